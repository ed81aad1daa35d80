//! The native path: the host kernel's `rdma_rxe`, with `ci/vm-run.sh` run
//! by bash on the host (with `--cleanup`: it deletes rxe0 at exit if it
//! created it).

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::process;
use crate::workspace::Workspace;

/// Whether the running kernel has rdma_rxe; with `load`, tries `modprobe`.
pub(super) fn host_has_rxe(load: bool) -> bool {
    if Path::new("/sys/module/rdma_rxe").exists() {
        return true;
    }
    if !load {
        let rel = Path::new("/lib/modules").join(kernel_release());
        return fs::read_to_string(rel.join("modules.dep"))
            .is_ok_and(|d| d.contains("/rdma_rxe.ko"));
    }
    let mut cmd = Command::new("modprobe");
    cmd.arg("rdma_rxe");
    process::echo(&cmd);
    let ok = process::quiet_ok(&mut cmd);
    if !ok {
        println!("    (no rdma_rxe module for kernel {})", kernel_release());
    }
    ok
}

fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The command that runs `ci/vm-run.sh` (`script`) on the host.
pub(super) fn command(ws: &Workspace, script: &Path, script_args: &[String]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .args(script_args)
        .args(["--netdev", "auto", "--cleanup"])
        .current_dir(&ws.root);
    cmd
}
