//! Builds with cargo's JSON messages and collects the executables it made.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::json::Json;
use crate::process;
use crate::workspace::{self, Workspace};
use crate::Result;

/// One executable cargo built.
#[derive(Debug, Clone)]
pub(crate) struct Artifact {
    /// Package name (`rdma-safe`).
    pub(crate) package: String,
    /// Directory of the package's `Cargo.toml` (cargo runs tests from there).
    pub(crate) manifest_dir: PathBuf,
    /// Target kind: `lib`, `bin`, `test`, `example`, `bench`, ...
    pub(crate) kind: String,
    /// Target name (`rdma_safe`, `scope`, ...).
    pub(crate) name: String,
    /// The target's root source file.
    pub(crate) src_path: PathBuf,
    /// The executable.
    pub(crate) exe: PathBuf,
    /// Built with the test harness (`profile.test`).
    pub(crate) test: bool,
}

impl Artifact {
    /// `rdma-safe test scope`, `rdma-core lib`.
    pub(crate) fn label(&self) -> String {
        match self.kind.as_str() {
            "lib" | "rlib" | "proc-macro" | "cdylib" | "dylib" | "staticlib" => {
                format!("{} lib", self.package)
            }
            k => format!("{} {k} {}", self.package, self.name),
        }
    }

    /// Test targets that drive rustc themselves (trybuild compile-fail
    /// tests) need cargo and a writable target directory: they run on the
    /// host, not in the VM.
    pub(crate) fn needs_host_toolchain(&self) -> bool {
        self.kind == "test"
            && std::fs::read_to_string(&self.src_path).is_ok_and(|s| s.contains("trybuild"))
    }
}

/// `path+file:///w/rdma-safe#0.1.0` → `rdma-safe`;
/// `path+file:///w/x#name@0.1.0` → `name`; `name 0.1.0 (path+...)` → `name`.
fn package_name(id: &str) -> String {
    if let Some((url, frag)) = id.rsplit_once('#') {
        if let Some((name, _)) = frag.split_once('@') {
            return name.to_string();
        }
        return url.rsplit('/').next().unwrap_or(url).to_string();
    }
    id.split_whitespace().next().unwrap_or(id).to_string()
}

/// Runs `cargo <args> --message-format=json-render-diagnostics` in the
/// workspace (diagnostics still reach the terminal) and returns every
/// executable it produced, deduplicated.
pub(crate) fn cargo_executables(ws: &Workspace, args: &[&str]) -> Result<Vec<Artifact>> {
    let mut cmd = workspace::cargo();
    cmd.args(args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(&ws.root);
    process::echo(&cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let mut found: Vec<Artifact> = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            if !line.starts_with('{') {
                println!("{line}");
                continue;
            }
            let Ok(msg) = Json::parse(&line) else {
                continue;
            };
            if msg.str_at("reason") != Some("compiler-artifact") {
                continue;
            }
            let Some(exe) = msg.str_at("executable") else {
                continue;
            };
            let target = msg.get("target");
            let first_kind = target
                .and_then(|t| t.get("kind"))
                .and_then(Json::as_array)
                .and_then(|k| k.first())
                .and_then(Json::as_str)
                .unwrap_or("?");
            let manifest_dir = msg
                .str_at("manifest_path")
                .map(|p| {
                    Path::new(p)
                        .parent()
                        .map(Path::to_path_buf)
                        .unwrap_or_default()
                })
                .unwrap_or_else(|| ws.root.clone());
            let art = Artifact {
                package: package_name(msg.str_at("package_id").unwrap_or("?")),
                manifest_dir,
                kind: first_kind.to_string(),
                name: target
                    .and_then(|t| t.str_at("name"))
                    .unwrap_or("?")
                    .to_string(),
                src_path: target
                    .and_then(|t| t.str_at("src_path"))
                    .map(PathBuf::from)
                    .unwrap_or_default(),
                exe: PathBuf::from(exe),
                test: msg
                    .get("profile")
                    .and_then(|p| p.get("test"))
                    .and_then(Json::as_bool)
                    == Some(true),
            };
            if !found.iter().any(|a| a.exe == art.exe) {
                found.push(art);
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!(
            "`{}` failed ({})",
            process::display_cmd(&cmd),
            process::describe(status)
        )
        .into());
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::package_name;

    #[test]
    fn package_ids() {
        assert_eq!(package_name("path+file:///w/rdma-safe#0.1.0"), "rdma-safe");
        assert_eq!(
            package_name("path+file:///w/dir#rdma-core@0.1.0"),
            "rdma-core"
        );
        assert_eq!(
            package_name("registry+https://github.com/rust-lang/crates.io-index#libc@0.2.1"),
            "libc"
        );
        assert_eq!(package_name("xtask 0.1.0 (path+file:///w/xtask)"), "xtask");
    }
}
