//! Helpers shared by the tasks: echoing and running commands, capturing
//! output with a time limit, locating the workspace, shell quoting.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::json::Json;

/// Errors are messages for a human; `main` prints them after `error: `.
pub(crate) type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// Formats a command the way it is echoed: `prog arg 'arg with space'`,
/// preceded by the environment variables set on it and its directory.
pub(crate) fn display_cmd(cmd: &Command) -> String {
    let mut s = String::new();
    if let Some(dir) = cmd.get_current_dir() {
        s.push_str(&format!("(cd {}) ", shell_quote(&dir.to_string_lossy())));
    }
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            s.push_str(&format!(
                "{}={} ",
                k.to_string_lossy(),
                shell_quote(&v.to_string_lossy())
            ));
        }
    }
    s.push_str(&shell_quote(&cmd.get_program().to_string_lossy()));
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&shell_quote(&a.to_string_lossy()));
    }
    s
}

/// Prints `==> <command>` before a command runs.
pub(crate) fn echo(cmd: &Command) {
    println!("==> {}", display_cmd(cmd));
    let _ = io::stdout().flush();
}

/// Echoes and runs a command with inherited stdio; returns its status.
pub(crate) fn run_status(cmd: &mut Command) -> Result<ExitStatus> {
    echo(cmd);
    cmd.status().map_err(|e| spawn_error(cmd, e))
}

/// Echoes and runs a command; an unsuccessful exit is an error.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = run_status(cmd)?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({})", display_cmd(cmd), describe(status)).into())
    }
}

/// Runs a command quietly (not echoed) and returns its stdout if it
/// succeeded; `None` if it could not start or failed.
pub(crate) fn quiet_output(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `true` if the command could be started and exited successfully (quiet).
pub(crate) fn quiet_ok(cmd: &mut Command) -> bool {
    quiet_output(cmd).is_some()
}

fn spawn_error(cmd: &Command, e: io::Error) -> Box<dyn std::error::Error> {
    let prog = cmd.get_program().to_string_lossy();
    if e.kind() == io::ErrorKind::NotFound {
        format!("`{prog}` not found on PATH (run `cargo xtask setup` to install prerequisites)")
            .into()
    } else {
        format!("could not start `{prog}`: {e}").into()
    }
}

/// "exit status 3", "killed by signal 9".
pub(crate) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => status.to_string(),
    }
}

/// What [`run_captured`] saw.
#[derive(Debug)]
pub(crate) struct Captured {
    /// Exit status; `None` if the time limit killed the process.
    pub(crate) status: Option<ExitStatus>,
    /// Everything the process wrote to stdout and stderr, interleaved by line.
    pub(crate) output: String,
    /// Wall-clock time the process ran.
    pub(crate) elapsed: Duration,
    /// When the first line of output arrived (for a VM: roughly the boot time).
    pub(crate) first_output: Option<Duration>,
}

impl Captured {
    /// Exited on its own with status 0.
    pub(crate) fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Echoes and runs a command, copying its stdout and stderr to ours as they
/// arrive (so a long VM run is visible live) while also capturing them.
/// With a `limit`, the process is killed when it runs longer.
pub(crate) fn run_captured(cmd: &mut Command, limit: Option<Duration>) -> Result<Captured> {
    echo(cmd);
    captured(cmd, limit, true)
}

/// Like [`run_captured`] but neither echoes the command nor copies its output.
pub(crate) fn run_captured_quiet(cmd: &mut Command, limit: Option<Duration>) -> Result<Captured> {
    captured(cmd, limit, false)
}

fn captured(cmd: &mut Command, limit: Option<Duration>, live: bool) -> Result<Captured> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| spawn_error(cmd, e))?;

    let (tx, rx) = mpsc::channel::<(bool, String)>();
    let readers = [
        pump(
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
            false,
            tx.clone(),
        ),
        pump(
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
            true,
            tx,
        ),
    ];

    let mut output = String::new();
    let mut first_output = None;
    let mut timed_out = false;
    let mut drained = true;
    let deadline = limit.map(|l| start + l);
    // After a kill, grandchildren may still hold the pipes open: read what
    // they write for a short grace period, then stop waiting for them.
    let mut give_up: Option<Instant> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((is_err, line)) => {
                first_output.get_or_insert_with(|| start.elapsed());
                if !live {
                } else if is_err {
                    eprint!("{line}");
                } else {
                    print!("{line}");
                    let _ = io::stdout().flush();
                }
                output.push_str(&line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        if !timed_out && deadline.is_some_and(|d| now >= d) {
            timed_out = true;
            if live {
                eprintln!(
                    "xtask: `{}` ran longer than {} s; killing it",
                    cmd.get_program().to_string_lossy(),
                    limit.unwrap_or_default().as_secs()
                );
            }
            // vng runs qemu as a grandchild: kill the whole tree, not just vng.
            kill_tree(child.id());
            let _ = child.kill();
            give_up = Some(now + Duration::from_secs(10));
        }
        if give_up.is_some_and(|g| now >= g) {
            drained = false;
            break;
        }
    }
    if drained {
        for r in readers.into_iter().flatten() {
            let _ = r.join();
        }
    }
    let status = child.wait()?;
    Ok(Captured {
        status: (!timed_out).then_some(status),
        output,
        elapsed: start.elapsed(),
        first_output,
    })
}

/// The processes whose parent chain leads to `root` (read from /proc),
/// parents before their children.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

extern "C" {
    /// kill(2) from the C library std already links (no new dependency).
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Running (not gone, not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            != Some("Z")
    })
}

/// Sends `sig` to `pid`; errors (already gone) are ignored.
fn signal(pid: u32, sig: i32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours;
    // `pid` is positive, so it never addresses a process group.
    unsafe {
        kill(pid, sig);
    }
}

/// Terminates `root` and every process below it: SIGTERM first (qemu exits
/// cleanly), SIGKILL after 5 s for whatever is left. Parents are signalled
/// before their children, so that no parent outlives a child long enough to
/// act on its death (a shell would run its next command).
pub(crate) fn kill_tree(root: u32) {
    const SIGTERM: i32 = 15;
    const SIGKILL: i32 = 9;
    let mut all = vec![root];
    all.extend(descendants(root));
    for &p in &all {
        signal(p, SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !all.iter().any(|&p| alive(p)) {
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
    for p in all {
        signal(p, SIGKILL);
    }
}

fn pump(
    reader: Option<Box<dyn Read + Send>>,
    is_err: bool,
    tx: mpsc::Sender<(bool, String)>,
) -> Option<thread::JoinHandle<()>> {
    let reader = reader?;
    Some(thread::spawn(move || {
        let mut r = BufReader::new(reader);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx
                        .send((is_err, String::from_utf8_lossy(&buf).into_owned()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    }))
}

/// Quotes a string for a POSIX shell (only when it needs quoting).
pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Quotes and joins words into one shell command line.
pub(crate) fn shell_join<I, S>(words: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    words
        .into_iter()
        .map(|w| shell_quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `vng` (virtme-ng) executable: on `PATH`, or else in the scripts
/// directory of `python3` — where `python3 -m pip install` puts it, and which
/// is not on `PATH` under pyenv until a rehash.
pub(crate) fn vng() -> PathBuf {
    if let Some(p) = which("vng") {
        return p;
    }
    let scripts = std::process::Command::new("python3")
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

/// Prints a section heading.
pub(crate) fn heading(text: &str) {
    println!("\n=== {text} ===");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_round_trips_through_sh() {
        let words = ["plain", "with space", "it's", "", "$HOME", "a\"b", "--x=1"];
        let line = shell_join(words);
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("for w in {line}; do printf '[%s]' \"$w\"; done"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "[plain][with space][it's][][$HOME][a\"b][--x=1]"
        );
        assert_eq!(shell_quote("--x=1"), "--x=1");
    }

    #[test]
    fn captured_output_and_time_limit() {
        let c = run_captured(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            None,
        )
        .unwrap();
        assert_eq!(c.status.and_then(|s| s.code()), Some(3));
        assert!(c.output.contains("out\n") && c.output.contains("err\n"));

        // The shell's child `sleep` holds the pipes open too: the limit must
        // kill the whole tree, not only the shell.
        let c = run_captured(
            Command::new("sh").args(["-c", "sleep 600 & echo \"sleeper $!\"; wait; echo never"]),
            Some(Duration::from_millis(300)),
        )
        .unwrap();
        assert!(
            c.status.is_none() && !c.success(),
            "not reported as timed out"
        );
        assert!(!c.output.contains("never"), "{}", c.output);
        let sleeper: u32 = c
            .output
            .lines()
            .find_map(|l| l.strip_prefix("sleeper "))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no sleeper pid in {:?}", c.output));
        // SIGKILL takes effect asynchronously; a generous bound only keeps a
        // broken kill from hanging the test.
        let hang_bound = Instant::now() + Duration::from_secs(60);
        while alive(sleeper) {
            assert!(
                Instant::now() < hang_bound,
                "sleep {sleeper} survived the kill"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}
