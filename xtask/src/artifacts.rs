//! Builds with cargo's JSON messages and collects the executables it made.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::Deserialize;

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

/// A line of cargo's JSON messages; xtask reads only the artifacts.
#[derive(Debug, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
enum Message {
    CompilerArtifact(ArtifactMessage),
    #[serde(other)]
    Other,
}

/// The members of a `compiler-artifact` message that xtask reads.
#[derive(Debug, Deserialize)]
struct ArtifactMessage {
    package_id: String,
    /// When missing, the workspace root stands in for its directory.
    manifest_path: Option<PathBuf>,
    target: TargetMessage,
    profile: ProfileMessage,
    /// `null` for targets that are not executables.
    executable: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct TargetMessage {
    kind: Vec<String>,
    name: String,
    src_path: PathBuf,
}

#[derive(Debug, Deserialize)]
struct ProfileMessage {
    test: bool,
}

/// The executable a line of cargo's JSON messages announces, if it is a
/// `compiler-artifact` message with one; `root` is the package directory
/// when the message names no manifest.
fn artifact(line: &str, root: &Path) -> Option<Artifact> {
    let Ok(Message::CompilerArtifact(msg)) = serde_json::from_str(line) else {
        return None;
    };
    let exe = msg.executable?;
    let manifest_dir = match msg.manifest_path {
        Some(p) => p.parent().map(Path::to_path_buf).unwrap_or_default(),
        None => root.to_path_buf(),
    };
    Some(Artifact {
        package: package_name(&msg.package_id),
        manifest_dir,
        kind: msg
            .target
            .kind
            .first()
            .map_or("?", String::as_str)
            .to_string(),
        name: msg.target.name,
        src_path: msg.target.src_path,
        exe,
        test: msg.profile.test,
    })
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
            let Some(art) = artifact(&line, &ws.root) else {
                continue;
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
    use super::*;

    #[test]
    fn reads_executables_from_cargo_messages() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/a#0.1.0","manifest_path":"/w/a/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"a","src_path":"/w/a/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"0","debuginfo":2,"test":true},"features":[],"filenames":["/w/target/debug/deps/a-1"],"executable":"/w/target/debug/deps/a-1","fresh":false,"u":"\u00e9\ud83d\ude00\n"}"#;
        let a = artifact(line, Path::new("/elsewhere")).expect("an executable");
        assert_eq!(a.package, "a");
        assert_eq!(a.manifest_dir, Path::new("/w/a"));
        assert_eq!((a.kind.as_str(), a.name.as_str()), ("lib", "a"));
        assert_eq!(a.src_path, Path::new("/w/a/src/lib.rs"));
        assert_eq!(a.exe, Path::new("/w/target/debug/deps/a-1"));
        assert!(a.test);
        assert_eq!(a.label(), "a lib");

        // Without a manifest path the workspace root stands in.
        let old = line.replace(r#""manifest_path":"/w/a/Cargo.toml","#, "");
        let a = artifact(&old, Path::new("/elsewhere")).expect("an executable");
        assert_eq!(a.manifest_dir, Path::new("/elsewhere"));

        // A library's artifact has no executable; other messages are skipped.
        let lib = line.replace(
            r#""executable":"/w/target/debug/deps/a-1""#,
            r#""executable":null"#,
        );
        assert!(artifact(&lib, Path::new("/")).is_none());
        assert!(artifact(
            r#"{"reason":"build-finished","success":true}"#,
            Path::new("/")
        )
        .is_none());
        assert!(artifact("{\"reason\":", Path::new("/")).is_none());
    }

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
