//! Where the workspace and its build output live, and the cargo to build
//! them with.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::process::quiet_output;
use crate::Result;

/// The cargo that runs us (cargo sets `$CARGO`), else `cargo` from `PATH`.
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Where the workspace and its build output live.
#[derive(Debug, Clone)]
pub(crate) struct Workspace {
    /// The directory holding the workspace `Cargo.toml`.
    pub(crate) root: PathBuf,
    /// Cargo's target directory (honours `CARGO_TARGET_DIR` and config).
    pub(crate) target: PathBuf,
}

/// The members of `cargo metadata`'s output that xtask reads.
#[derive(Debug, Deserialize)]
struct Metadata {
    workspace_root: PathBuf,
    target_directory: PathBuf,
}

impl Workspace {
    /// Asks `cargo metadata`; falls back to the directory above `xtask/`.
    pub(crate) fn locate() -> Workspace {
        let fallback_root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let meta = quiet_output(
            cargo()
                .args([
                    "metadata",
                    "--format-version",
                    "1",
                    "--no-deps",
                    "--offline",
                ])
                .current_dir(&fallback_root),
        )
        .and_then(|s| serde_json::from_str::<Metadata>(&s).ok());
        match meta {
            Some(m) => Workspace {
                root: m.workspace_root,
                target: m.target_directory,
            },
            None => Workspace {
                target: fallback_root.join("target"),
                root: fallback_root,
            },
        }
    }

    /// `target/xtask/<name>`, created if needed.
    pub(crate) fn xtask_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.target.join("xtask").join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }
}
