//! Helpers shared by the host-only tests: compile a C program against the
//! installed `<infiniband/verbs.h>` with the system C compiler and run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The C compiler to use: `$CC`, else the first of `cc`, `gcc`, `clang` that
/// runs. Panics with an explanation when there is none.
fn find_cc() -> String {
    let candidates = std::env::var("CC")
        .ok()
        .filter(|cc| !cc.trim().is_empty())
        .into_iter()
        .chain(["cc", "gcc", "clang"].map(String::from));
    for cc in candidates {
        let runs = Command::new(&cc)
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success());
        if runs {
            return cc;
        }
    }
    panic!(
        "no C compiler found ($CC, cc, gcc, clang): this test compiles a C program \
         against <infiniband/verbs.h> to compare it with the Rust side. Install one \
         (apt-get install gcc / dnf install gcc) or set CC."
    );
}

/// `pkg-config --cflags libibverbs`, split on whitespace; empty if
/// pkg-config is missing or does not know the package.
fn ibverbs_cflags() -> Vec<String> {
    match Command::new("pkg-config")
        .args(["--cflags", "libibverbs"])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "ibverbs-sys-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|err| panic!("cannot create {}: {err}", dir.display()));
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles `program` (C source) in a temporary directory, runs it, and
/// returns its output lines `key value…` as key → rest of the line.
pub(crate) fn run_c_program(program: &str) -> BTreeMap<String, String> {
    let dir = TempDir::new();
    let src = dir.path().join("prog.c");
    let exe = dir.path().join("prog");
    std::fs::write(&src, program).expect("write the C program");

    let cc = find_cc();
    let out = Command::new(&cc)
        .args(ibverbs_cflags())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {cc}: {err}"));
    assert!(
        out.status.success(),
        "{cc} failed to compile the test program:\n{}\n--- program ---\n{program}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = Command::new(&exe).output().expect("run the C program");
    assert!(out.status.success(), "the C program failed: {out:?}");
    let mut map = BTreeMap::new();
    for line in String::from_utf8(out.stdout).expect("utf-8").lines() {
        let (key, value) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("unexpected line from the C program: {line:?}"));
        assert!(
            map.insert(key.to_string(), value.to_string()).is_none(),
            "the C program printed {key} twice"
        );
    }
    map
}
