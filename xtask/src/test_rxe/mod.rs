//! `cargo xtask test-rxe` — builds the workspace's tests and runs all of
//! them, device tests included, on a real soft-RoCE device.
//!
//! 1. `cargo test --workspace --no-run` collects the test executables;
//!    rdma-core's and rdma-safe's fault-injection tests are built apart,
//!    with that feature (see [`injected`]).
//! 2. On the host: `cargo test --workspace --doc` (doctests, compile-fail
//!    ones included) and test targets using trybuild (they need rustc and
//!    a writable target directory).
//! 3. On rxe0 (natively or in the VM, see [`crate::rxe`]): every other test
//!    executable with `--include-ignored --test-threads=1`, so the tests
//!    marked `#[ignore = "needs an RDMA device ..."]` run too.
//! 4. On two hosts (two VMs joined by a link, see [`two_hosts`]): our
//!    example programs against rdma-core's, server and client on different
//!    hosts.

mod failures;
mod faults;
mod faults_connections;
mod faults_handshake;
mod injected;
mod msrv;
mod packages;
mod pairs;
mod pairs_library;
mod pairs_perf;
mod pairs_stream;
mod smoke;
mod totals;
mod two_hosts;

use std::process::ExitCode;
use std::time::Instant;

use crate::artifacts::{self, Artifact};
use crate::process::capture;
use crate::rxe::{self, Plan, RunArgs, Want};
use crate::setup;
use crate::workspace::{self, Workspace};
use crate::{heading, Result};
use totals::Totals;

/// What the task does, printed by `--help` above the options.
pub(crate) const ABOUT: &str = "\
Builds every test of the workspace, runs doctests and trybuild tests on the
host and every other test binary on a soft-RoCE device (rxe0) with
--include-ignored --test-threads=1 and RDMA_TEST_REQUIRE_DEVICE=1,
RDMA_TEST_DEVICE=rxe0: natively when the host kernel has rdma_rxe and we are
root, otherwise in a qemu VM (vng) booting a /boot kernel that has it.
Then the two-host tier: two VMs (1 vCPU, 1 GiB each) joined by a virtual
link, our rc/ud/srq_pingpong and rping against rdma-core's in both
directions and against themselves, server on one host, client on the other.";

/// The options of `cargo xtask test-rxe`.
#[derive(Debug, clap::Args)]
#[command(
    override_usage = "cargo xtask test-rxe [OPTIONS] [-- LIBTEST-ARGS...]",
    after_help = rxe::ENV_HELP,
)]
pub(crate) struct Args {
    /// only tests whose name contains SUBSTR (passed to libtest)
    #[arg(long, value_name = "SUBSTR", allow_hyphen_values = true)]
    filter: Option<String>,
    /// skip the build; only bring up rxe0 and run ibv_devinfo
    /// and a perftest ib_write_bw loop (checks the VM path)
    #[arg(long, verbatim_doc_comment)]
    smoke: bool,
    /// skip the host part (doctests, trybuild tests)
    #[arg(long)]
    no_host: bool,
    /// skip the two-host tier (two VMs joined by a link; our
    /// pingpongs and rping against rdma-core's across it)
    #[arg(long, verbatim_doc_comment)]
    no_two_hosts: bool,
    /// build only rdma-examples' programs and run only the
    /// two-host tier
    #[arg(long, verbatim_doc_comment)]
    two_hosts_only: bool,
    /// do not check/install prerequisites first
    #[arg(long)]
    no_setup: bool,
    #[command(flatten)]
    run: RunArgs,
    /// passed to libtest after `--` (host and device tests; e.g. --nocapture)
    #[arg(last = true, value_name = "LIBTEST-ARGS")]
    libtest: Vec<String>,
}

/// The most failed binaries and tests the summary names at its end.
const MAX_FAILED: usize = 16;

/// `cargo xtask test-rxe`.
pub(crate) fn main(args: Args) -> Result<ExitCode> {
    let opts = args.run.options(Want::Auto);
    let started = Instant::now();
    if !args.no_setup {
        setup::ensure()?;
    }
    let ws = Workspace::locate();

    if args.smoke {
        return smoke::run(&ws, &opts);
    }
    if args.two_hosts_only {
        return two_hosts::only(&ws, &opts, started);
    }

    // 1. Build.
    heading("test-rxe: building tests");
    let built = artifacts::cargo_executables(
        &ws,
        &[
            "test",
            "--workspace",
            "--no-run",
            "--lib",
            "--bins",
            "--tests",
            "--examples",
        ],
    )?;
    let with_faults = injected::build(&ws)?;
    let tests: Vec<&Artifact> = built
        .iter()
        .filter(|a| a.test && !injected::is_empty_without_the_feature(a))
        .chain(&with_faults)
        .collect();
    let (host_only, rest): (Vec<&Artifact>, Vec<&Artifact>) =
        tests.iter().partition(|a| a.needs_host_toolchain());
    let (skipped, on_device): (Vec<&Artifact>, Vec<&Artifact>) = rest
        .into_iter()
        .partition(|a| a.kind == "example" || a.kind == "bench");
    println!(
        "test-rxe: {} test executable(s): {} for rxe0, {} host-only (trybuild), {} example/bench harness(es) not run",
        tests.len(),
        on_device.len(),
        host_only.len(),
        skipped.len()
    );

    let mut libtest_args: Vec<String> = Vec::new();
    if let Some(f) = &args.filter {
        libtest_args.push(f.clone());
    }
    libtest_args.extend(args.libtest.iter().cloned());

    let mut totals = Totals::default();
    // Failed tests, named with their panics (see `failures`).
    let mut failed_tests: Vec<String> = Vec::new();
    let mut host_lines: Vec<String> = Vec::new();
    let mut ok = true;

    // 2. Host part.
    if args.no_host {
        host_lines.push("skipped (--no-host)".into());
    } else {
        heading("test-rxe: doctests on the host");
        let mut doc = workspace::cargo();
        doc.args(["test", "--workspace", "--doc"])
            .current_dir(&ws.root);
        if !libtest_args.is_empty() {
            doc.arg("--").args(&libtest_args);
        }
        let c = capture::run(&mut doc, None)?;
        totals.add_output(&c.output);
        failed_tests.extend(failures::libtest(&c.output));
        ok &= c.success();
        host_lines.push(format!("doctests: {}", verdict(c.success())));
        heading("test-rxe: the library crates built from their package tarballs");
        let c = packages::verify(&ws)?;
        ok &= c.success();
        host_lines.push(format!(
            "cargo package ({}): {}",
            packages::PACKAGES.join(", "),
            verdict(c.success())
        ));
        heading("test-rxe: the declared minimum Rust version against the locked dependencies");
        let (declared, newer) = msrv::check(&ws)?;
        let too_new: Vec<String> = newer
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(krate, v)| format!("{krate}: {}", v.join(", ")))
            .collect();
        for line in &too_new {
            println!("newer than rust-version {declared}: {line}");
        }
        ok &= too_new.is_empty();
        host_lines.push(format!(
            "rust-version {declared} against the library crates' locked dependencies: {}",
            verdict(too_new.is_empty())
        ));
        for a in &host_only {
            heading(&format!(
                "test-rxe: {} on the host (uses trybuild)",
                a.label()
            ));
            let mut cmd = workspace::cargo();
            cmd.args(["test", "-p", &a.package, "--test", &a.name])
                .current_dir(&ws.root);
            if !libtest_args.is_empty() {
                cmd.arg("--").args(&libtest_args);
            }
            let c = capture::run(&mut cmd, None)?;
            totals.add_output(&c.output);
            failed_tests.extend(failures::libtest(&c.output));
            ok &= c.success();
            host_lines.push(format!("{}: {}", a.label(), verdict(c.success())));
        }
    }

    // 3. Device part.
    heading("test-rxe: test binaries on rxe0");
    let mut plan = Plan::new();
    let mut device_args = vec!["--include-ignored", "--test-threads=1"];
    device_args.extend(libtest_args.iter().map(String::as_str));
    for a in &on_device {
        plan.test_binary(&a.label(), &a.manifest_dir, &a.exe, &device_args);
    }
    let route = rxe::choose_route(&ws, "test-rxe", opts.want)?;
    let outcome = rxe::run(&ws, "test-rxe", &route, &plan, &opts)?;
    totals.add_output(&outcome.captured.output);
    failed_tests.extend(failures::libtest(&outcome.captured.output));
    ok &= outcome.success();

    // 4. Two hosts.
    let two = if args.no_two_hosts {
        Err("skipped (--no-two-hosts)".to_string())
    } else if args.filter.is_some() {
        Err("skipped (--filter given)".to_string())
    } else {
        heading("test-rxe: two hosts");
        two_hosts::run(&ws, &built, &opts).map_err(|e| format!("FAILED: {e}"))
    };
    if let Err(why) = &two {
        ok &= why.starts_with("skipped");
    }

    // 5. Summary.
    heading("test-rxe summary");
    println!("route:      {route}");
    if let Some(k) = outcome.env("KERNEL") {
        println!(
            "device:     {} on {} ({}), RoCE v2 GID index {}, kernel {k}",
            outcome.env("RXE_DEVICE").unwrap_or("?"),
            outcome.env("RXE_NETDEV").unwrap_or("?"),
            outcome.env("RXE_IPV4").unwrap_or("?"),
            outcome.env("RXE_GID_INDEX").unwrap_or("?"),
        );
    }
    for l in &host_lines {
        println!("host:       {l}");
    }
    let passed = outcome.steps.iter().filter(|s| s.passed).count();
    println!(
        "on rxe0:    {} of {} binaries run, {passed} passed, {} failed ({:.0} s incl. boot)",
        outcome.steps.len(),
        on_device.len(),
        outcome.steps.len() - passed,
        outcome.captured.elapsed.as_secs_f64()
    );
    outcome.print_steps("            ");
    println!(
        "libtest:    {} suites, {} passed, {} failed, {} ignored",
        totals.suites, totals.passed, totals.failed, totals.ignored
    );
    if let Some(why) = outcome.failure_reason() {
        println!("problem:    {why}");
    }
    if outcome.steps.len() != on_device.len() {
        ok = false;
        println!(
            "problem:    only {} of {} binaries ran",
            outcome.steps.len(),
            on_device.len()
        );
    }
    match &two {
        Err(why) => println!("two hosts:  {why}"),
        Ok(tier) => ok &= tier.summary(),
    }
    // Last, where a CI report's tail keeps them: what failed on rxe0 (the
    // binaries, then their tests).
    let failed: Vec<String> = outcome
        .steps
        .iter()
        .filter(|s| !s.passed)
        .map(|s| format!("{} (exit {})", s.label, s.code))
        .chain(failed_tests)
        .collect();
    for f in failed.iter().take(MAX_FAILED) {
        println!("failed:     {f}");
    }
    if failed.len() > MAX_FAILED {
        println!("failed:     and {} more (above)", failed.len() - MAX_FAILED);
    }
    println!("total:      {:.0} s", started.elapsed().as_secs_f64());
    println!("result:     {}", if ok { "PASS" } else { "FAIL" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAILED"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::{self, Task};

    fn parse(words: &[&str]) -> std::result::Result<Args, clap::Error> {
        match cli::try_parse(&[&["test-rxe"], words].concat())? {
            Task::TestRxe(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn args() {
        let a = parse(&[
            "--filter",
            "qp",
            "--vm",
            "--timeout",
            "60",
            "--",
            "--nocapture",
        ])
        .unwrap();
        assert_eq!(a.filter.as_deref(), Some("qp"));
        let run = a.run.options(Want::Auto);
        assert_eq!(run.want, rxe::Want::Vm);
        assert_eq!(run.timeout.as_secs(), 60);
        assert_eq!(a.libtest, ["--nocapture"]);
        assert!(!a.no_two_hosts && !a.two_hosts_only);
        let a = parse(&["--no-two-hosts"]).unwrap();
        assert!(a.no_two_hosts && !a.two_hosts_only);
        let a = parse(&["--two-hosts-only", "--step-timeout", "60"]).unwrap();
        assert!(a.two_hosts_only && a.run.options(Want::Auto).step_timeout.as_secs() == 60);
    }

    #[test]
    fn help_lists_the_options() {
        let e = parse(&["--smoke", "-h"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = cli::long_help("test-rxe");
        for option in [
            "--filter <SUBSTR>",
            "--two-hosts-only",
            "--step-timeout <SECS>",
            "[default: 3600]",
            "[-- LIBTEST-ARGS...]",
            "--include-ignored",
        ] {
            assert!(help.contains(option), "{option} in {help}");
        }
    }

    #[test]
    fn mistakes_name_the_task_and_the_option() {
        let e = parse(&["--bogus"]).unwrap_err().to_string();
        assert!(
            e.contains("cargo xtask test-rxe") && e.contains("--bogus"),
            "{e}"
        );
        // A word that is no option is a mistake too, unless after `--`.
        let e = parse(&["qp"]).unwrap_err().to_string();
        assert!(e.contains("'qp'"), "{e}");
        let e = parse(&["--timeout", "1m"]).unwrap_err().to_string();
        assert!(e.contains("--timeout") && e.contains("seconds"), "{e}");
        assert!(parse(&["--filter"]).is_err());
    }

    #[test]
    fn libtest_arguments_pass_through_after_the_separator() {
        let a = parse(&[
            "--no-host",
            "--",
            "--nocapture",
            "--exact",
            "qp::tests::x",
            "--vm",
            "--",
            "--filter",
        ])
        .unwrap();
        assert_eq!(
            a.libtest,
            [
                "--nocapture",
                "--exact",
                "qp::tests::x",
                "--vm",
                "--",
                "--filter"
            ]
        );
        assert!(a.no_host && a.filter.is_none());
        assert_eq!(
            a.run.options(Want::Auto).want,
            rxe::Want::Auto,
            "--vm after `--` is libtest's"
        );
        assert!(parse(&["--"]).unwrap().libtest.is_empty());
        let a = parse(&["--filter", "-x"]).unwrap();
        assert_eq!(a.filter.as_deref(), Some("-x"));
    }
}
