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

/// Where ci/two-hosts.sh keeps each failed step's last lines, in a host's
/// results directory.
const FAILED_STEPS: &str = "failed-steps.txt";

/// The most lines of [`FAILED_STEPS`] the summary prints per host: the
/// summary is the end of a long output, the part a CI report keeps.
const FAILED_LINES: usize = 40;

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
        for (i, o) in hosts.iter().enumerate() {
            print_failed_steps(rxe::host_name(i), &o.out.join(FAILED_STEPS));
        }
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

/// Prints the failed steps' last lines one host kept (nothing if none
/// failed), indented under the summary's table.
fn print_failed_steps(host: char, path: &std::path::Path) {
    if let Ok(text) = std::fs::read_to_string(path) {
        print!("{}", failed_steps_text(host, &text, path));
    }
}

/// [`print_failed_steps`]'s text: at most [`FAILED_LINES`] of `text`.
fn failed_steps_text(host: char, text: &str, path: &std::path::Path) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = format!("            host {host}'s failed steps:\n");
    for l in lines.iter().take(FAILED_LINES) {
        out += &format!("            | {l}\n");
    }
    if lines.len() > FAILED_LINES {
        out += &format!(
            "            | ({} more lines in {})\n",
            lines.len() - FAILED_LINES,
            path.display()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_steps_tail_is_printed_whole_or_cut_with_a_pointer() {
        let path = std::path::Path::new("/out/failed-steps.txt");
        let short = failed_steps_text(
            'A',
            "step x (server on host A, exit 1), its last lines:\nboom\n",
            path,
        );
        assert_eq!(
            short,
            "            host A's failed steps:\n            | step x (server on host A, exit 1), its last lines:\n            | boom\n"
        );
        let long: String = (0..FAILED_LINES + 5)
            .map(|k| format!("line {k}\n"))
            .collect();
        let cut = failed_steps_text('B', &long, path);
        assert_eq!(cut.lines().count(), FAILED_LINES + 2, "{cut}");
        assert!(
            cut.ends_with("| (5 more lines in /out/failed-steps.txt)\n"),
            "{cut}"
        );
    }
}
