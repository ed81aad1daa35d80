//! test-rxe's two-host tier: boots two hosts (two VMs joined by a link,
//! see [`crate::rxe`]) and runs the [`pairs`] plan on both.
//!
//! The programs are the `rdma-examples` binaries cargo built for the
//! one-host tier (found in its artifacts, not rebuilt).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::pairs::{self, Programs};
use crate::artifacts::{self, Artifact};
use crate::rxe::{self, RunOptions, TwoHosts};
use crate::workspace::Workspace;
use crate::{heading, Result};

/// The longest a pair step may take (unless `--step-timeout` is lower):
/// every step takes under 25 s under TCG (the slowest are fault cases),
/// and rdma-core's pingpongs wait forever for a peer that is gone.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);

/// What the tier did.
#[derive(Debug)]
pub(super) struct Tier {
    route: rxe::Route,
    run: TwoHosts,
    /// Steps in the plan (each host runs a side of every one).
    steps: usize,
    /// Wall time of the tier: route choice, boot and steps.
    took: Duration,
}

/// Runs the tier: boots the two hosts and runs [`pairs::plan`] on both.
pub(super) fn run(ws: &Workspace, built: &[Artifact], opts: &RunOptions) -> Result<Tier> {
    let t0 = Instant::now();
    let progs = Programs::from_artifacts(built)?;
    let route = rxe::choose_two_hosts(ws, "test-rxe")?;
    let plan = pairs::plan(&progs);
    let opts = RunOptions {
        step_timeout: opts.step_timeout.min(STEP_TIMEOUT),
        ..opts.clone()
    };
    println!(
        "test-rxe: two hosts: each step limited to {} s",
        opts.step_timeout.as_secs()
    );
    let run = rxe::run_two_hosts(ws, "test-rxe-two-hosts", &route, [&plan, &plan], &opts)?;
    Ok(Tier {
        route,
        run,
        steps: plan.step_count(),
        took: t0.elapsed(),
    })
}

/// `test-rxe --two-hosts-only`: builds rdma-examples' programs and
/// rdma-safe's peer tests (debug, as the full run has them) and runs the
/// tier alone.
pub(super) fn only(ws: &Workspace, opts: &RunOptions, started: Instant) -> Result<ExitCode> {
    heading("test-rxe: building rdma-examples' programs");
    let mut built = artifacts::cargo_executables(ws, &["build", "-p", "rdma-examples", "--bins"])?;
    built.extend(artifacts::cargo_executables(
        ws,
        &[
            "test",
            "-p",
            "rdma-safe",
            "--test",
            pairs::PEER_TESTS,
            "--no-run",
        ],
    )?);
    heading("test-rxe: two hosts");
    let tier = run(ws, &built, opts)?;
    heading("test-rxe summary (two-host tier only)");
    let ok = tier.summary();
    println!("total:      {:.0} s", started.elapsed().as_secs_f64());
    println!("result:     {}", if ok { "PASS" } else { "FAIL" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

impl Tier {
    /// Prints the tier's part of test-rxe's summary; `true` if it passed.
    pub(super) fn summary(&self) -> bool {
        let hosts = &self.run.hosts;
        println!("two hosts:  {}", self.route);
        for (i, o) in hosts.iter().enumerate() {
            if let Some(k) = o.env("KERNEL") {
                println!(
                    "            host {}: {} on {} ({}), RoCE v2 GID index {}, kernel {k}",
                    rxe::host_name(i),
                    o.env("RXE_DEVICE").unwrap_or("?"),
                    o.env("RXE_NETDEV").unwrap_or("?"),
                    o.env("RXE_IPV4").unwrap_or("?"),
                    o.env("RXE_GID_INDEX").unwrap_or("?"),
                );
            }
        }
        let ran = hosts.iter().map(|o| o.steps.len()).min().unwrap_or(0);
        let mut passed = 0;
        for k in 0..ran {
            let (a, b) = (&hosts[0].steps[k], &hosts[1].steps[k]);
            let ok = a.passed && b.passed;
            passed += usize::from(ok);
            let secs = a
                .seconds
                .parse()
                .unwrap_or(0)
                .max(b.seconds.parse().unwrap_or(0u32));
            println!(
                "            {} {secs:>4} s  {}  (A exit {}, B exit {})",
                if ok { "PASS" } else { "FAIL" },
                a.label,
                a.code,
                b.code
            );
        }
        println!(
            "            {ran} of {} steps run, {passed} passed ({:.0} s incl. boot)",
            self.steps,
            self.took.as_secs_f64()
        );
        let mut ok = self.run.success() && passed == self.steps;
        if let Some(why) = self.run.failure_reason() {
            println!("problem:    two hosts: {why}");
        }
        if ran != self.steps {
            ok = false;
            println!(
                "problem:    two hosts: only {ran} of {} steps ran on both hosts",
                self.steps
            );
        }
        ok
    }
}
