//! Where the workspace and its build output live, and the cargo to build
//! them with.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::json::Json;
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
        .and_then(|s| Json::parse(&s).ok());
        let root = meta
            .as_ref()
            .and_then(|m| m.str_at("workspace_root"))
            .map(PathBuf::from)
            .unwrap_or_else(|| fallback_root.clone());
        let target = meta
            .as_ref()
            .and_then(|m| m.str_at("target_directory"))
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        Workspace { root, target }
    }

    /// `target/xtask/<name>`, created if needed.
    pub(crate) fn xtask_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.target.join("xtask").join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }
}
