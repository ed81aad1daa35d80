//! `cargo xtask bench` — compares our `perf` with perftest on the same rxe
//! device, in the same boot (only ratios mean something under emulation);
//! with `--hosts 2`, across two hosts' link (servers on A, clients on B),
//! optionally with `--delay` on the link.
//!
//! For every test (write_bw, read_bw, send_bw, write_lat, send_lat), size
//! and repetition the plan runs perftest's server + client, then ours, with
//! the same size, iterations and (bandwidth) tx depth 128, each pair on its
//! own TCP port, alternating so that slow drifts of the guest hit both
//! tools alike. Each run's raw output goes to `<out>/raw/` (the run's
//! results directory, the only place the guest may write); the host parses
//! it afterwards: perftest's text table, our `perf --json` lines. The
//! medians over the repetitions go into a table and `target/bench.json`,
//! and one SVG plot per test beside it (`target/bench-<test>.svg`: every
//! run and the medians against the message size). `--plot-only PATH` draws
//! the plots of an existing report again, without running anything.
//!
//! Where things are: [`options`] (the command line), [`settings`] (what
//! it decides: tests, sizes, iterations), [`suite`] (the tests
//! and their targets), [`plan`] (the runs and each tool's command line),
//! [`results`] (reading the raw outputs), [`judgement`] (medians, ratio,
//! pairs), [`table`] (what is printed), [`json_report`] (bench.json) and
//! [`plot`] (the SVGs, drawn from bench.json).
//!
//! `--instructions` runs both tools under valgrind's callgrind instead and
//! reports user-space instructions per operation: [`instructions`] (the
//! runs and their commands), [`callgrind`] (reading its files),
//! [`profile_counts`] (what one profile counts), [`instruction_counts`]
//! (the figures per operation) and [`instruction_report`] (the
//! table and bench.json's `instructions` member).

mod callgrind;
mod instruction_counts;
mod instruction_report;
mod instructions;
mod json_report;
mod judgement;
mod options;
mod plan;
mod plot;
mod profile_counts;
mod results;
mod settings;
mod suite;
mod table;

use std::fs;
use std::path::Path;
use std::process::ExitCode;

pub(crate) use options::{Args, ABOUT};
use settings::Settings;

use crate::demo::build_examples;
use crate::rxe;
use crate::setup;
use crate::workspace::Workspace;
use crate::{heading, Result};

/// `cargo xtask bench`.
pub(crate) fn main(args: Args) -> Result<ExitCode> {
    let a = Settings::new(args)?;
    if let Some(json) = &a.plot_only {
        // Nothing to set up, build or boot: the report holds every run.
        for svg in plot::write_from_json(json)? {
            println!("wrote {}", svg.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(raw) = &a.instructions_from {
        // Nothing to set up, build or boot: the files are there.
        let ws = Workspace::locate();
        let runs = instructions::runs(&a);
        let route = format!("(read back from {})", raw.display());
        return report_instructions(&a, &ws, &runs, raw, &route, "unknown", None);
    }
    if !a.no_setup {
        setup::ensure()?;
    }
    let ws = Workspace::locate();
    let bin = build_examples(&ws)?;
    if a.instructions.is_some() {
        return run_instructions(&a, &ws, &bin.join("perf"));
    }
    let runs = plan::runs(&a);
    let plan = plan::plan(&a, &runs, &bin.join("perf"));
    let (route, outcome, failure) = if a.hosts == 2 {
        // Servers on host A, clients on host B: the clients' outputs (the
        // values) and their steps' verdicts are B's.
        let route = rxe::choose_two_hosts(&ws, "bench")?;
        let run = rxe::run_two_hosts(&ws, "bench", &route, [&plan, &plan], &a.run)?;
        let failure = run.failure_reason();
        let outcome = run
            .hosts
            .into_iter()
            .nth(1)
            .ok_or("bench: host B has no outcome")?;
        (route, outcome, failure)
    } else {
        let route = rxe::choose_route(&ws, "bench", a.run.want)?;
        let outcome = rxe::run(&ws, "bench", &route, &plan, &a.run)?;
        let failure = outcome.failure_reason();
        (route, outcome, failure)
    };
    let raw = outcome.out.join("raw");
    let rows = results::collect(&a, &runs, &outcome, &raw);

    heading("bench results");
    table::print(&a, &route, &rows);
    let json_path = ws.target.join("bench.json");
    let kernel = outcome.env("KERNEL").unwrap_or("unknown");
    json_report::write(&json_path, &a, &route, kernel, &raw, &rows)?;
    println!(
        "\nwritten to {} (raw outputs in {})",
        json_path.display(),
        raw.display()
    );
    // Drawn from the file just written, as `--plot-only` draws them. A
    // plot that cannot be drawn fails the bench, but only after the
    // verdicts below: the numbers are in the table and bench.json already.
    let plotted = match plot::write_from_json(&json_path) {
        Ok(svgs) => {
            let names: Vec<String> = svgs.iter().map(|p| p.display().to_string()).collect();
            println!("plots: {}", names.join(", "));
            true
        }
        Err(e) => {
            println!("problem: no plots: {e}");
            false
        }
    };
    if let Some(why) = failure {
        println!("problem: {why}");
        return Ok(ExitCode::FAILURE);
    }
    let printed_inf: usize = rows.iter().map(|c| c.perftest.inf).sum();
    if printed_inf > 0 {
        println!(
            "note: perftest printed `inf` (latency) or 0.00 (bandwidth) in {printed_inf} run(s) \
             (its clock rate sampling failed in the guest: `Correlation coefficient r^2 < 0.9`); \
             those runs are left out of its medians"
        );
    }
    if rows
        .iter()
        .any(|c| c.perftest.failed > 0 || c.ours.failed > 0)
    {
        println!("problem: some runs produced no result (\"fail\" above)");
        return Ok(ExitCode::FAILURE);
    }
    if !plotted {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The run directory's task name of `--instructions` runs
/// (`target/xtask/bench-instructions/<pid>`).
const INSTRUCTIONS_TASK: &str = "bench-instructions";

/// `--instructions`: the callgrind runs, their table and bench.json's
/// `instructions` member.
fn run_instructions(a: &Settings, ws: &Workspace, perf: &Path) -> Result<ExitCode> {
    let runs = instructions::runs(a);
    let plan = instructions::plan(a, &runs, perf);
    let route = rxe::choose_route(ws, "bench", a.run.want)?;
    // A directory of its own: a timing run keeps only its predecessor's
    // (`target/xtask/bench/last`), so two timing runs after this one
    // would remove the callgrind files that the report points at and
    // `--instructions-from` reads.
    let outcome = rxe::run(ws, INSTRUCTIONS_TASK, &route, &plan, &a.run)?;
    let failure = outcome.failure_reason();
    let raw = outcome.out.join("raw");
    let kernel = outcome.env("KERNEL").unwrap_or("unknown");
    report_instructions(a, ws, &runs, &raw, &route.to_string(), kernel, failure)
}

/// The table and bench.json member of the callgrind files in `raw`;
/// `failure` is the run's, if it had one.
fn report_instructions(
    a: &Settings,
    ws: &Workspace,
    runs: &[instructions::CgRun],
    raw: &Path,
    route: &str,
    kernel: &str,
    failure: Option<String>,
) -> Result<ExitCode> {
    let shim_path = ws.root.join(profile_counts::SHIM_FILE);
    let shim = fs::read_to_string(&shim_path)
        .ok()
        .and_then(|t| profile_counts::shim_line(&t));
    if shim.is_none() {
        println!(
            "problem: no `ops.poll_cq` call in {}: polls cannot be counted",
            shim_path.display()
        );
    }
    let ins = instruction_counts::collect(a, runs, raw, shim);

    heading("bench instructions");
    instruction_report::print(a, route, &ins);
    let json_path = ws.target.join("bench.json");
    instruction_report::write(&json_path, a, route, kernel, raw, &ins)?;
    println!(
        "\nadded to {} as `instructions` (callgrind's files in {}; \
         `callgrind_annotate --inclusive=yes FILE` shows where they went)",
        json_path.display(),
        raw.display()
    );
    if let Some(why) = failure {
        println!("problem: {why}");
        return Ok(ExitCode::FAILURE);
    }
    if !ins.problems.is_empty() || ins.poll_fn.is_none() {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
