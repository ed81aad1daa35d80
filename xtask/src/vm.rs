//! `cargo xtask vm -- CMD...` — boots the VM, brings up rxe0 and runs one
//! shell command there; exits with the command's exit status. For poking at
//! the guest and for checking the VM path without building anything.

use std::process::ExitCode;

use crate::rxe::{self, Plan, RunOptions, Want};
use crate::workspace::Workspace;
use crate::Result;

const HELP: &str = "\
usage: cargo xtask vm [OPTIONS] -- CMD [ARG...]

Boots the qemu VM (or, with --native, uses the host), brings up rxe0 and
runs CMD through `bash -c` with RXE_DEVICE, RXE_NETDEV, RXE_GID_INDEX,
RXE_IPV4 set and memlock unlimited. Exits with CMD's exit status.
Example: cargo xtask vm -- 'ibv_devinfo -v -d $RXE_DEVICE'

options:
";

/// `cargo xtask vm`.
pub(crate) fn main(args: &[String]) -> Result<ExitCode> {
    let mut opts = RunOptions {
        want: Want::Vm,
        ..RunOptions::default()
    };
    let mut i = 0;
    let mut command: Vec<String> = Vec::new();
    while i < args.len() {
        if opts.parse_arg(args, &mut i)? {
            continue;
        }
        match args[i].as_str() {
            "-h" | "--help" => {
                println!("{HELP}{}", RunOptions::HELP);
                return Ok(ExitCode::SUCCESS);
            }
            "--" => {
                command = args[i + 1..].to_vec();
                break;
            }
            _ => {
                command = args[i..].to_vec();
                break;
            }
        }
    }
    if command.is_empty() {
        return Err("vm: no command given (usage: cargo xtask vm -- CMD...)".into());
    }
    let ws = Workspace::locate();
    let route = rxe::choose_route(&ws, "vm", opts.want)?;
    let script = command.join(" ");
    let mut plan = Plan::new();
    plan.sh_step(&script, &script);
    let outcome = rxe::run(&ws, "vm", &route, &plan, &opts)?;
    match (outcome.steps.first(), outcome.failure_reason()) {
        (Some(step), _) if outcome.status.is_some() => {
            let code: u8 = step.code.parse().unwrap_or(1);
            println!("vm: `{script}` exited with status {code}");
            Ok(ExitCode::from(code))
        }
        (_, why) => {
            println!(
                "vm: {}",
                why.unwrap_or_else(|| "the command did not run".into())
            );
            Ok(ExitCode::from(125))
        }
    }
}
