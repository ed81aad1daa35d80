//! `cargo xtask` — the workspace's automation. It is what installs the
//! system libraries the other crates need, so it and its few dependencies
//! (serde, serde_json, and clap for the tasks' command lines) are pure Rust
//! and build on a bare machine.
//!
//! One module per task ([`setup`], [`test_rxe`], [`demo`], [`bench`](mod@bench),
//! [`vm`]); [`rxe`] is the runner they share ("run these steps on a
//! soft-RoCE device, natively or in a VM") and `ci/vm-run.sh` is its
//! device-side half. Beside them: [`process`] runs commands (echoed, with
//! a time limit), [`artifacts`] collects what cargo built, [`cli`] parses a
//! task's command line (clap), [`workspace`], [`host`] and [`shell`] hold
//! the small facts and quoting the tasks share.

mod artifacts;
mod bench;
mod cli;
mod demo;
mod host;
mod process;
mod rxe;
mod setup;
mod shell;
mod test_rxe;
mod vm;
mod workspace;

use std::process::ExitCode;

/// Errors are messages for a human; `main` prints them after `error: `.
pub(crate) type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// Prints a section heading.
pub(crate) fn heading(text: &str) {
    println!("\n=== {text} ===");
}

const HELP: &str = "\
usage: cargo xtask <TASK> [ARGS...]

tasks:
  setup      install the apt packages and vng (virtme-ng) this workspace needs
  test-rxe   build and run every test; device tests on a real soft-RoCE device
             (natively if the host kernel has rdma_rxe, else in a qemu VM), then
             our programs against rdma-core's across two hosts (two VMs)
  demo       show a soft-RoCE device and programs talking over it
  bench      perftest vs our perf on rxe, same boot: medians and ratios (target/bench.json)
  vm         run one command next to rxe0 in the VM: cargo xtask vm -- CMD;
             on two hosts: cargo xtask vm --hosts 2 -- CMD_A -- CMD_B

`cargo xtask <TASK> --help` describes a task's options.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(task) = args.first() else {
        println!("{HELP}");
        return ExitCode::FAILURE;
    };
    let rest = &args[1..];
    // A SIGTERM or SIGHUP ends the VMs and commands running for us too.
    process::terminate::install();
    let result = match task.as_str() {
        "setup" => setup::main(rest),
        "test-rxe" => test_rxe::main(rest),
        "demo" => demo::main(rest),
        "bench" => bench::main(rest),
        "vm" => vm::main(rest),
        "-h" | "--help" | "help" => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("error: unknown task `{other}`\n\n{HELP}");
            return ExitCode::FAILURE;
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
