//! Running commands: echoed before they run, with their exit status, or
//! quietly for a probe. [`capture`] also copies and keeps their output under
//! a time limit; [`group`] runs a command as a process group and ends it
//! with everything it started; [`terminate`] ends the running commands
//! when xtask is told to stop.

pub(crate) mod capture;
mod group;
pub(crate) mod terminate;

use std::io::{self, Write};
use std::process::{Command, ExitStatus, Stdio};

use crate::shell::shell_quote;
use crate::Result;

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

/// The error for a command that could not be started, naming the fix when
/// the program is missing.
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
