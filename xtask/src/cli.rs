//! The command line: [`Cli`] names the tasks, one [`Task`] variant per task
//! module, and each module holds its task's options as a clap `Args` struct
//! (`setup::Args`, `demo::Args`, ...) with their defaults in
//! `default_value`.
//!
//! Conventions of every task's options: an option's value is the next word
//! whatever it starts with (`allow_hyphen_values`: `--timeout -1` is a bad
//! number of seconds, not an unknown option `-1`), and a repeated option
//! replaces its earlier value (`args_override_self`).

use crate::{bench, demo, setup, test_rxe, vm};

/// `cargo xtask <TASK> [OPTIONS]`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "The workspace's automation: prerequisites, soft-RoCE (rxe) test runs, the demo and benchmarks.",
    subcommand_value_name = "TASK",
    subcommand_help_heading = "Tasks",
    after_help = "`cargo xtask <TASK> --help` describes a task and its options.",
    args_override_self = true,
    arg_required_else_help = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) task: Task,
}

/// The tasks; each one's long description is its module's `ABOUT`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Task {
    /// Install the apt packages and vng (virtme-ng) this workspace needs
    #[command(long_about = setup::ABOUT)]
    Setup(setup::Args),
    /// Build and run every test, device tests on a soft-RoCE device, then our programs against rdma-core's across two hosts
    #[command(long_about = test_rxe::ABOUT)]
    TestRxe(test_rxe::Args),
    /// Show a soft-RoCE device and programs talking over it
    #[command(long_about = demo::ABOUT)]
    Demo(demo::Args),
    /// Benchmark our perf against perftest on rxe in one boot: medians and ratios (target/bench.json)
    #[command(long_about = bench::ABOUT)]
    Bench(bench::Args),
    /// Run one command next to rxe0 in the VM, or one on each of two hosts
    #[command(long_about = vm::ABOUT)]
    Vm(vm::Args),
}

/// Parses `cargo xtask <words>` as main does, without exiting.
#[cfg(test)]
pub(crate) fn try_parse(words: &[&str]) -> Result<Task, clap::Error> {
    use clap::Parser;
    Cli::try_parse_from(std::iter::once("cargo xtask").chain(words.iter().copied())).map(|c| c.task)
}

/// `cargo xtask <task> --help`, as printed.
#[cfg(test)]
pub(crate) fn long_help(task: &str) -> String {
    let mut cli = <Cli as clap::CommandFactory>::command();
    cli.build();
    cli.find_subcommand_mut(task)
        .unwrap_or_else(|| panic!("no task {task}"))
        .render_long_help()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_parser_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_lists_every_task() {
        let help = Cli::command().render_help().to_string();
        for task in ["setup", "test-rxe", "demo", "bench", "vm"] {
            assert!(
                help.lines().any(|l| l.trim_start().starts_with(task)),
                "{task} in {help}"
            );
        }
        let e = try_parse(&[]).unwrap_err();
        assert_eq!(
            e.kind(),
            clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
        let e = try_parse(&["bogus"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidSubcommand);
    }

    /// The command lines README.md, ci/, .ci/run and the benchmark notes
    /// give.
    #[test]
    fn the_documented_command_lines_parse() {
        for line in [
            "setup",
            "test-rxe",
            "test-rxe --no-two-hosts",
            "test-rxe --two-hosts-only",
            "demo",
            "bench",
            "bench --async",
            "bench --cm",
            "bench --hosts 2 --delay 5",
            "bench --inline 0",
            "bench --reps 7",
            "bench --tests atomic_bw,atomic_lat",
            "bench --instructions --reps 2 --tests send_lat,atomic_lat,send_lat_async",
            "bench --instructions-from DIR",
            "bench --no-setup --async --reps 5 --sizes 64,64K",
            "bench --no-setup --tests write_bw_q4,write_bw_q16,write_bw_bidi,read_bw_q4,send_bw_bidi --sizes 64,64K --reps 3",
            "bench --no-setup --tests write_bw_q4,write_bw_q4_t2,write_bw_q4_t4 --sizes 64,64K --reps 2",
            "bench --plot-only xtask/doc/bench.json",
            "vm -- ibv_devinfo -v",
            "vm --hosts 2 -- ibv_rc_pingpong -- ibv_rc_pingpong $PEER_IPV4",
        ] {
            let words: Vec<&str> = line.split(' ').collect();
            if let Err(e) = try_parse(&words) {
                panic!("`cargo xtask {line}`: {e}");
            }
        }
    }
}
