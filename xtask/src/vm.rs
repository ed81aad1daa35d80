//! `cargo xtask vm -- CMD...` — boots the VM, brings up rxe0 and runs one
//! shell command there; exits with the command's exit status. For poking at
//! the guest and for checking the VM path without building anything.
//! `cargo xtask vm --hosts 2 -- CMD_A -- CMD_B` boots two hosts joined by a
//! link and runs CMD_A on host A and CMD_B on host B at once.

use std::process::ExitCode;

use crate::rxe::{self, Outcome, Plan, RunArgs, RunOptions, Want};
use crate::workspace::Workspace;
use crate::Result;

/// What the task does, printed by `--help` above the options.
pub(crate) const ABOUT: &str = "\
Boots the qemu VM (or, with --native, uses the host), brings up rxe0 and
runs CMD through `bash -c` with RXE_DEVICE, RXE_NETDEV, RXE_GID_INDEX,
RXE_IPV4 set and memlock unlimited. Exits with CMD's exit status.
Example: cargo xtask vm -- 'ibv_devinfo -v -d $RXE_DEVICE'

With --hosts 2: two VMs (always VMs: two hosts need two kernels), 1 vCPU
and 1 GiB each, joined by a virtual Ethernet link (qemu's UDP socket
netdev); host A is 192.168.77.1/24, host B 192.168.77.2/24, each with rxe0
on its link NIC. Once both are up, CMD_A runs on A and CMD_B on B at once,
each also seeing PEER_IPV4 (the other host's address) and HOST_INDEX (0 on
A, 1 on B); their output comes back with [A] / [B] in front. Exits 0 if
both exit 0, else with the first non-zero status (125: a command did not run).
Example: cargo xtask vm --hosts 2 -- 'ibv_rc_pingpong -g $RXE_GID_INDEX' \\
             -- 'sleep 5; ibv_rc_pingpong -g $RXE_GID_INDEX $PEER_IPV4'";

/// The options of `cargo xtask vm`. The command is everything after the
/// first `--`, or from the first word that is not an option (a later `--`
/// then belongs to it); with `--hosts 2` a `--` inside it separates the two
/// hosts' commands.
#[derive(Debug, clap::Args)]
#[command(
    override_usage = "cargo xtask vm [OPTIONS] -- CMD [ARG...]
       cargo xtask vm --hosts 2 [OPTIONS] -- CMD_A [ARG...] -- CMD_B [ARG...]",
    after_help = rxe::ENV_HELP,
)]
pub(crate) struct Args {
    /// how many hosts: 1 or 2
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = hosts, default_value_t = 1)]
    hosts: usize,
    #[command(flatten)]
    run: RunArgs,
    /// the command (with --hosts 2: CMD_A [ARG...] -- CMD_B [ARG...])
    #[arg(value_name = "CMD", trailing_var_arg = true)]
    command: Vec<String>,
}

/// `--hosts`: exactly `1` or `2`.
fn hosts(s: &str) -> Result<usize, String> {
    match s {
        "1" => Ok(1),
        "2" => Ok(2),
        _ => Err("takes 1 or 2".into()),
    }
}

impl Args {
    /// One command per host.
    fn commands(&self) -> Result<Vec<String>> {
        let rest = &self.command;
        let commands: Vec<String> = if self.hosts == 1 {
            vec![rest.join(" ")]
        } else {
            // CMD_A -- CMD_B: the first `--` separates them.
            let Some(cut) = rest.iter().position(|a| a == "--") else {
                return Err("vm --hosts 2: give two commands: -- CMD_A -- CMD_B".into());
            };
            vec![rest[..cut].join(" "), rest[cut + 1..].join(" ")]
        };
        if commands.iter().any(|c| c.trim().is_empty()) {
            return Err("vm: no command given (usage: cargo xtask vm -- CMD...)".into());
        }
        Ok(commands)
    }
}

/// The exit status of the one step `outcome` ran, if it ran.
fn step_code(outcome: &Outcome) -> Option<u8> {
    let step = outcome.steps.first()?;
    outcome.status?;
    Some(step.code.parse().unwrap_or(1))
}

/// `cargo xtask vm`.
pub(crate) fn main(args: Args) -> Result<ExitCode> {
    let commands = args.commands()?;
    let opts = args.run.options(Want::Vm);
    let ws = Workspace::locate();
    if let [a, b] = commands.as_slice() {
        return two_hosts(&ws, [a, b], &opts);
    }
    let script = &commands[0];
    let route = rxe::choose_route(&ws, "vm", opts.want)?;
    let mut plan = Plan::new();
    plan.sh_step(script, script);
    let outcome = rxe::run(&ws, "vm", &route, &plan, &opts)?;
    match step_code(&outcome) {
        Some(code) => {
            println!("vm: `{script}` exited with status {code}");
            Ok(ExitCode::from(code))
        }
        None => {
            let why = outcome.failure_reason();
            println!(
                "vm: {}",
                why.unwrap_or_else(|| "the command did not run".into())
            );
            Ok(ExitCode::from(125))
        }
    }
}

/// `cargo xtask vm --hosts 2 -- CMD_A -- CMD_B`.
fn two_hosts(ws: &Workspace, commands: [&String; 2], opts: &RunOptions) -> Result<ExitCode> {
    let route = rxe::choose_two_hosts(ws, "vm")?;
    let plans = commands.map(|c| {
        let mut p = Plan::new();
        p.sh_step(c, c);
        p
    });
    let run = rxe::run_two_hosts(ws, "vm", &route, [&plans[0], &plans[1]], opts)?;
    let mut exit = 0;
    for (i, (outcome, command)) in run.hosts.iter().zip(commands).enumerate() {
        let host = format!("host {} ({})", rxe::host_name(i), rxe::host_ipv4(i));
        let code = match step_code(outcome) {
            Some(code) => {
                println!("vm: {host}: `{command}` exited with status {code}");
                code
            }
            None => {
                let why = outcome.failure_reason();
                let why = why.unwrap_or_else(|| "the command did not run".into());
                println!("vm: {host}: {why}");
                125
            }
        };
        if exit == 0 {
            exit = code;
        }
    }
    println!("vm: two hosts took {:.0} s", run.elapsed.as_secs_f64());
    Ok(ExitCode::from(exit))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::{self, Task};

    /// The parsed options and the commands they give.
    fn parse(words: &[&str]) -> Result<(RunOptions, Vec<String>)> {
        match cli::try_parse(&[&["vm"], words].concat())? {
            Task::Vm(a) => Ok((a.run.options(Want::Vm), a.commands()?)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn one_host_command() {
        let (run, commands) = parse(&["--timeout", "60", "--", "ibv_devinfo", "-v"]).unwrap();
        assert_eq!(commands, ["ibv_devinfo -v"]);
        assert_eq!(run.timeout.as_secs(), 60);
        assert_eq!(run.want, Want::Vm);
        // Without `--` the command starts at the first unknown word, and a
        // later `--` belongs to it.
        let (_, commands) = parse(&["echo", "--", "x"]).unwrap();
        assert_eq!(commands, ["echo -- x"]);
        assert!(parse(&["--"]).is_err());
    }

    #[test]
    fn two_host_commands() {
        let (run, commands) = parse(&[
            "--hosts",
            "2",
            "--",
            "ibv_rc_pingpong",
            "-g",
            "1",
            "--",
            "ibv_rc_pingpong",
            "$PEER_IPV4",
        ])
        .unwrap();
        assert_eq!(
            commands,
            ["ibv_rc_pingpong -g 1", "ibv_rc_pingpong $PEER_IPV4"]
        );
        assert_eq!(run.want, Want::Vm);
        assert!(parse(&["--hosts", "2", "--", "a"]).is_err());
        assert!(parse(&["--hosts", "2", "--", "a", "--"]).is_err());
        assert!(parse(&["--hosts", "3", "--", "a"]).is_err());
    }

    #[test]
    fn separators_and_the_words_after_them() {
        // Without a leading `--`, the first non-option word starts CMD_A.
        let (_, commands) = parse(&["--hosts", "2", "a", "-x", "--", "b", "--", "c"]).unwrap();
        assert_eq!(commands, ["a -x", "b -- c"], "only the first `--` splits");
        // Options after the command are the command's.
        let (run, commands) = parse(&["--native", "--", "ls", "-l", "--timeout", "5"]).unwrap();
        assert_eq!(commands, ["ls -l --timeout 5"]);
        assert_eq!(run.want, Want::Native);
        assert_eq!(run.timeout.as_secs(), 3600);
        let (_, commands) = parse(&["--", "echo", "--", "x"]).unwrap();
        assert_eq!(commands, ["echo -- x"]);
        let (_, commands) = parse(&["--hosts", "2", "--hosts", "1", "--", "a", "--", "b"]).unwrap();
        assert_eq!(commands, ["a -- b"], "the last --hosts wins");
    }

    #[test]
    fn help_and_mistakes() {
        let e = cli::try_parse(&["vm", "-h", "--", "ls"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = cli::long_help("vm");
        for option in [
            "--hosts <N>",
            "[default: 1]",
            "--native",
            "--timeout <SECS>",
            "CMD_A [ARG...] -- CMD_B",
            "PEER_IPV4",
        ] {
            assert!(help.contains(option), "{option} in {help}");
        }
        // An unknown option before the command is a mistake, not the command.
        let e = parse(&["--bogus", "--", "ls"]).unwrap_err().to_string();
        assert!(e.contains("cargo xtask vm") && e.contains("--bogus"), "{e}");
        let e = parse(&["--timeout", "x", "--", "ls"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--timeout") && e.contains("seconds"), "{e}");
        assert!(parse(&[]).is_err());
    }
}
