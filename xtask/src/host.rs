//! What this host offers: programs on `PATH`, root, and where `vng` is.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

/// The `vng` (virtme-ng) executable: on `PATH`, or else in the scripts
/// directory of `python3` — where `python3 -m pip install` puts it, and which
/// is not on `PATH` under pyenv until a rehash.
pub(crate) fn vng() -> PathBuf {
    if let Some(p) = which("vng") {
        return p;
    }
    let scripts = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('scripts'))",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match scripts.map(|d| d.join("vng")) {
        Some(p) if p.is_file() => p,
        _ => PathBuf::from("vng"),
    }
}

/// The first executable called `name` on `PATH`.
pub(crate) fn which(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name.as_ref()))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `true` if this process runs with effective uid 0 (read from procfs; no libc).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}
