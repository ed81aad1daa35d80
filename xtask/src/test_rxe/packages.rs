//! The library crates as packages: `cargo package` builds each of them
//! from the tarball it would publish (verification on), with the others
//! resolved from those tarballs too, so a file a crate needs but does not
//! ship, or a dependency that resolves to another crate of the same name
//! on crates.io, fails here rather than at publication.

use crate::process::capture;
use crate::workspace::{self, Workspace};
use crate::Result;

/// The published packages, in dependency order.
pub(super) const PACKAGES: [&str; 3] = ["rdma-rs-sys", "rdma-rs-core", "rdma-safe"];

/// Packages and verifies [`PACKAGES`]: the run, successful if every one
/// built from its tarball.
pub(super) fn verify(ws: &Workspace) -> Result<capture::Captured> {
    let mut cmd = workspace::cargo();
    // Dirty trees too: this checks what the tarballs hold, not the VCS.
    cmd.args(["package", "--allow-dirty"]).current_dir(&ws.root);
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    capture::run(&mut cmd, None)
}
