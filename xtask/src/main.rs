//! `cargo xtask` — the workspace's automation. It is what installs the
//! system libraries the other crates need, so it and its few dependencies
//! (clap for the command line, serde and serde_json for cargo's messages
//! and bench.json, plotters for bench's SVGs, libc and signal-hook for
//! process groups and signals) are pure Rust and build on a bare machine.
//!
//! One module per task ([`setup`], [`test_rxe`], [`demo`], [`bench`](mod@bench),
//! [`vm`]); [`rxe`] is the runner they share ("run these steps on a
//! soft-RoCE device, natively or in a VM") and `ci/vm-run.sh` is its
//! device-side half. Beside them: [`process`] runs commands (echoed, with
//! a time limit), [`artifacts`] collects what cargo built, [`cli`] names
//! the tasks on the command line (clap), [`workspace`], [`host`] and [`shell`] hold
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

use cli::Task;

/// Errors are messages for a human; `main` prints them after `error: `.
pub(crate) type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// Prints a section heading.
pub(crate) fn heading(text: &str) {
    println!("\n=== {text} ===");
}

fn main() -> ExitCode {
    use clap::Parser;
    let cli = cli::Cli::parse();
    // A signal ends the VMs and commands running for us too.
    process::terminate::install();
    let result = match cli.task {
        Task::Setup(args) => setup::main(args),
        Task::TestRxe(args) => test_rxe::main(args),
        Task::Demo(args) => demo::main(args),
        Task::Bench(args) => bench::main(args),
        Task::Vm(args) => vm::main(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
