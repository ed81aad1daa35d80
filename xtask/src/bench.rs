//! `cargo xtask bench` — compares our `perf` with perftest on the same rxe
//! device, in the same boot (only ratios mean something under emulation).
//!
//! For every test (write_bw, read_bw, send_bw, write_lat, send_lat), size
//! and repetition the plan runs perftest's server + client, then ours, with
//! the same size, iterations and (bandwidth) tx depth 128, each pair on its
//! own TCP port, alternating so that slow drifts of the guest hit both
//! tools alike. Each run's raw output goes to `<out>/raw/` (the run's
//! results directory, the only place the guest may write); the host parses
//! it afterwards: perftest's text table, our `perf --json` lines. The
//! medians over the repetitions go into a table and `target/bench.json`.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::demo::build_examples;
use crate::json::Json;
use crate::rxe::{self, Plan, RunOptions};
use crate::setup;
use crate::shell::shell_quote;
use crate::workspace::Workspace;
use crate::{heading, Result};

const HELP: &str = "\
usage: cargo xtask bench [OPTIONS]

Runs perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat,
ib_send_lat) and our perf (write_bw, read_bw, send_bw, write_lat, send_lat)
on rxe0 in one boot, server and client on 127.0.0.1, with identical sizes,
iterations and tx depth (128 for bandwidth), alternating perftest and ours,
and prints the medians: bandwidth as average MB/sec (higher is better),
latency as t_typical usec (lower is better), the ratio ours/perftest, in
how many repetitions ours beat the perftest run beside it (a sign test that
tells a real gap from run-to-run noise), and whether the target is met
(bandwidth ratio >= 1.00, latency <= 1.05). Writes the table to
target/bench.json; raw outputs stay in
target/xtask/bench/<pid>/out/raw/. Exits non-zero if any run failed; a
perftest run that prints `inf` (its clock conversion failing in the guest)
is reported and left out of the medians instead.

options:
  --reps N              repetitions of every test and size (default 3)
  --iters N             operations per run (default 20000 for bandwidth, 5000
                        for latency; perftest needs >= 5), capped so that a
                        run moves at most 64 MiB (64 KiB: 1024, 1 MiB: 64)
  --sizes A,B,...       message sizes in bytes, K/M suffixes allowed
                        (default 64,4K,64K,1M)
  --tests T,...         only these tests (default write_bw,read_bw,send_bw,
                        write_lat,send_lat)
  --inline N            pass -I N to both tools in the write and send tests
                        (reads carry no inline data; default: each tool's
                        own; perftest turns inline off on devices it does
                        not recognise, rxe among them, while our perf inlines
                        up to 220/236 B in write/send latency tests):
                        --inline 0 compares without inline data on both sides
  --no-setup            do not check/install prerequisites first
";

/// Bandwidth tests keep this many operations in flight (both tools).
const TX_DEPTH: u32 = 128;
/// A run moves at most this many bytes: large sizes get fewer iterations
/// (both tools alike), so that a bench stays minutes long under emulation.
const MAX_RUN_BYTES: u64 = 64 << 20;

/// Iterations of a run at `size`: `--iters`, capped by [`MAX_RUN_BYTES`],
/// never below perftest's minimum of 5.
fn iters_for(iters: u32, size: u64) -> u32 {
    let cap = (MAX_RUN_BYTES / size.max(1)).max(5);
    u64::from(iters).min(cap) as u32
}

/// First TCP port; run k uses `BASE_PORT + k`.
const BASE_PORT: u32 = 19000;

/// One test: our name, perftest's program, bandwidth or latency, and
/// whether its operation can carry inline data.
#[derive(Debug, Clone, Copy)]
struct Test {
    name: &'static str,
    perftest: &'static str,
    bw: bool,
    /// Sends and RDMA writes can carry their data inline in the work
    /// request; RDMA reads cannot, and perftest's read tests refuse `-I`.
    inline: bool,
}

const TESTS: [Test; 5] = [
    Test {
        name: "write_bw",
        perftest: "ib_write_bw",
        bw: true,
        inline: true,
    },
    Test {
        name: "read_bw",
        perftest: "ib_read_bw",
        bw: true,
        inline: false,
    },
    Test {
        name: "send_bw",
        perftest: "ib_send_bw",
        bw: true,
        inline: true,
    },
    Test {
        name: "write_lat",
        perftest: "ib_write_lat",
        bw: false,
        inline: true,
    },
    Test {
        name: "send_lat",
        perftest: "ib_send_lat",
        bw: false,
        inline: true,
    },
];

impl Test {
    /// The target for ours/perftest: bandwidth at least 1.00,
    /// latency at most 1.05.
    fn target(self) -> f64 {
        if self.bw {
            1.00
        } else {
            1.05
        }
    }

    /// Whether `ratio` (ours/perftest) meets [`Test::target`].
    fn meets(self, ratio: f64) -> bool {
        if self.bw {
            ratio >= self.target()
        } else {
            ratio <= self.target()
        }
    }

    /// Whether `ours` beats `perftest` in this test's metric.
    fn better(self, ours: f64, perftest: f64) -> bool {
        if self.bw {
            ours > perftest
        } else {
            ours < perftest
        }
    }

    fn metric(self) -> &'static str {
        if self.bw {
            "BW average [MB/sec]"
        } else {
            "t_typical [usec]"
        }
    }
}

/// Which program produced a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Perftest,
    Ours,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Perftest => "perftest",
            Tool::Ours => "ours",
        }
    }
}

#[derive(Debug)]
struct Args {
    run: RunOptions,
    reps: usize,
    /// Operations per bandwidth run and per latency run (before the cap).
    bw_iters: u32,
    lat_iters: u32,
    sizes: Vec<u64>,
    tests: Vec<Test>,
    inline: Option<u32>,
    no_setup: bool,
}

impl Args {
    /// Operations of a run of `test` at `size` (both tools alike).
    fn iters(&self, test: Test, size: u64) -> u32 {
        let n = if test.bw {
            self.bw_iters
        } else {
            self.lat_iters
        };
        iters_for(n, size)
    }

    fn iters_text(&self) -> String {
        format!(
            "{} iterations per bandwidth run, {} per latency run",
            self.bw_iters, self.lat_iters
        )
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .map(|n| n * mul)
        .filter(|&n| n > 0 && n <= 8 << 20)
}

fn parse(args: &[String]) -> Result<Option<Args>> {
    let mut a = Args {
        run: RunOptions {
            // ~120 server/client runs under emulation: more than the default.
            timeout: Duration::from_secs(60 * 60),
            ..RunOptions::default()
        },
        reps: 3,
        // Long enough that a bandwidth run is not its start-up (2000
        // operations of 64 B last 50 ms under emulation, and their medians
        // moved by 30% from run to run).
        bw_iters: 20000,
        lat_iters: 5000,
        sizes: vec![64, 4096, 65536, 1 << 20],
        tests: TESTS.to_vec(),
        inline: None,
        no_setup: false,
    };
    let mut i = 0;
    while i < args.len() {
        if a.run.parse_arg(args, &mut i)? {
            continue;
        }
        let value = |name: &str| -> Result<&String> {
            args.get(i + 1)
                .ok_or_else(|| format!("bench: {name} needs a value").into())
        };
        match args[i].as_str() {
            "-h" | "--help" => {
                println!("{HELP}{}", RunOptions::HELP);
                return Ok(None);
            }
            "--no-setup" => a.no_setup = true,
            "--reps" => {
                a.reps = value("--reps")?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or("bench: --reps needs a positive number")?;
                i += 1;
            }
            "--iters" => {
                a.bw_iters = value("--iters")?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 5)
                    .ok_or("bench: --iters needs a number >= 5 (perftest's minimum)")?;
                a.lat_iters = a.bw_iters;
                i += 1;
            }
            "--sizes" => {
                let v = value("--sizes")?;
                a.sizes = v
                    .split(',')
                    .map(|s| {
                        parse_size(s).ok_or_else(|| format!("bench: bad size `{s}` in --sizes"))
                    })
                    .collect::<std::result::Result<_, _>>()?;
                i += 1;
            }
            "--inline" => {
                a.inline = Some(
                    value("--inline")?
                        .parse()
                        .ok()
                        .filter(|&n| n <= 4096)
                        .ok_or("bench: --inline needs a number of bytes (0..=4096)")?,
                );
                i += 1;
            }
            "--tests" => {
                let v = value("--tests")?;
                a.tests = v
                    .split(',')
                    .map(|s| {
                        TESTS
                            .iter()
                            .copied()
                            .find(|t| t.name == s.trim())
                            .ok_or_else(|| format!("bench: unknown test `{s}` in --tests"))
                    })
                    .collect::<std::result::Result<_, _>>()?;
                i += 1;
            }
            other => return Err(format!("bench: unknown argument `{other}` (see --help)").into()),
        }
        i += 1;
    }
    Ok(Some(a))
}

/// One server/client run in the plan.
#[derive(Debug, Clone)]
struct Run {
    test: Test,
    tool: Tool,
    size: u64,
    rep: usize,
}

impl Run {
    /// File name stem under `raw/`.
    fn stem(&self) -> String {
        format!(
            "{}-{}-{}-r{}",
            self.tool.name(),
            self.test.name,
            self.size,
            self.rep
        )
    }
}

/// Every run in plan order: per test and size, perftest and ours alternate.
fn runs(a: &Args) -> Vec<Run> {
    let mut v = Vec::new();
    for &test in &a.tests {
        for &size in &a.sizes {
            for rep in 1..=a.reps {
                for tool in [Tool::Perftest, Tool::Ours] {
                    v.push(Run {
                        test,
                        tool,
                        size,
                        rep,
                    });
                }
            }
        }
    }
    v
}

/// The options both tools take alike beyond size and iterations: the tx
/// depth of bandwidth tests and `--inline`, for the tests that can inline.
fn depth_and_inline(a: &Args, test: Test) -> String {
    let mut options = String::new();
    if test.bw {
        options += &format!(" -t {TX_DEPTH}");
    }
    if let Some(n) = a.inline.filter(|_| test.inline) {
        options += &format!(" -I {n}");
    }
    options
}

/// The plan; the guest writes the raw outputs to `$XTASK_OUT/raw`.
fn plan(a: &Args, runs: &[Run], perf: &Path) -> Plan {
    let perf = shell_quote(&perf.to_string_lossy());
    let raw = "R=\"$XTASK_OUT/raw\"; mkdir -p \"$R\"";
    let mut p = Plan::new();
    p.say(&format!(
        "== cargo xtask bench: {} runs ({} tests x {} sizes x {} reps x 2 tools), {} \
         (at most {} MiB per run) ==\n\
         perftest and our perf alternate with identical -s/-n (and -t {TX_DEPTH} for bandwidth{});\n\
         each run prints its result line; raw outputs go to the results directory's raw/.",
        runs.len(),
        a.tests.len(),
        a.sizes.len(),
        a.reps,
        a.iters_text(),
        MAX_RUN_BYTES >> 20,
        a.inline
            .map_or(String::new(), |n| format!(", -I {n} for writes and sends"))
    ));
    let dev = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";
    for (k, r) in runs.iter().enumerate() {
        let port = BASE_PORT + k as u32;
        let (size, n) = (r.size, a.iters(r.test, r.size));
        let extra = depth_and_inline(a, r.test);
        let f = format!("f=\"$R/{}\"", r.stem());
        // On success show only the result (the line after the table
        // header, or our JSON line); on failure everything.
        let (server, client) = match r.tool {
            Tool::Perftest => {
                let cmd = format!(
                    "{} {dev} -s {size} -n {n}{extra} -F -p {port}",
                    r.test.perftest
                );
                (
                    format!(
                        "{raw}; {f}; {cmd} >\"$f.server.txt\" 2>&1; rc=$?; \
                         [ $rc = 0 ] || cat \"$f.server.txt\"; exit $rc"
                    ),
                    format!(
                        "{raw}; {f}; {cmd} 127.0.0.1 >\"$f.client.txt\" 2>&1; rc=$?; \
                         if [ $rc = 0 ]; then grep -A1 -e '#bytes' \"$f.client.txt\"; \
                         else cat \"$f.client.txt\"; fi; exit $rc"
                    ),
                )
            }
            Tool::Ours => {
                let name = r.test.name;
                (
                    format!(
                        "{raw}; {f}; {perf} {name} {dev} -p {port} --json \
                         >\"$f.server.json\" 2>\"$f.server.txt\"; rc=$?; \
                         [ $rc = 0 ] || cat \"$f.server.txt\" \"$f.server.json\"; exit $rc"
                    ),
                    format!(
                        "{raw}; {f}; {perf} {name} {dev} -s {size} -n {n}{extra} -p {port} --json 127.0.0.1 \
                         >\"$f.client.json\" 2>\"$f.client.txt\"; rc=$?; \
                         if [ $rc = 0 ]; then cat \"$f.client.json\"; \
                         else cat \"$f.client.txt\" \"$f.client.json\"; fi; exit $rc"
                    ),
                )
            }
        };
        let label = format!(
            "[{}/{}] {} {} {} B rep {}",
            k + 1,
            runs.len(),
            r.tool.name(),
            r.test.name,
            size,
            r.rep
        );
        p.server_client(&label, port as u16, &server, &client);
    }
    p
}

/// perftest's result: the line after the `#bytes` header; field 3 (BW
/// average) for bandwidth, field 4 (t_typical) for latency.
fn parse_perftest(text: &str, test: Test, size: u64) -> Option<f64> {
    let mut lines = text.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    let fields: Vec<&str> = lines.next()?.split_whitespace().collect();
    if fields.first()?.parse::<u64>().ok()? != size {
        return None;
    }
    fields.get(if test.bw { 3 } else { 4 })?.parse::<f64>().ok()
}

/// Our result: the client's JSON line for `size` (no `role` member).
fn parse_ours(text: &str, test: Test, size: u64) -> Option<f64> {
    let key = if test.bw {
        "bw_avg_mb_s"
    } else {
        "t_typical_us"
    };
    text.lines()
        .filter_map(|l| Json::parse(l.trim()).ok())
        .filter(|j| j.get("role").is_none() && j.str_at("test") == Some(test.name))
        .filter(|j| matches!(j.get("bytes"), Some(Json::Number(b)) if *b == size as f64))
        .find_map(|j| match j.get(key) {
            Some(Json::Number(v)) if v.is_finite() => Some(*v),
            _ => None,
        })
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

/// The values of one tool for one test and size.
#[derive(Debug, Default)]
struct Cell {
    values: Vec<f64>,
    /// The repetition each of `values` came from (same order).
    reps: Vec<usize>,
    /// Runs that failed or printed no result.
    failed: usize,
    /// perftest runs that passed but printed `inf` (its cycles-to-usec
    /// conversion failed in the guest): reported, left out of the median,
    /// not a failure of the bench.
    inf: usize,
}

impl Cell {
    fn push(&mut self, rep: usize, v: f64) {
        self.values.push(v);
        self.reps.push(rep);
    }

    fn at_rep(&self, rep: usize) -> Option<f64> {
        self.reps
            .iter()
            .position(|&r| r == rep)
            .map(|i| self.values[i])
    }

    fn show(&self, reps: usize) -> String {
        match median(&self.values) {
            None => "fail".to_string(),
            Some(m) if self.failed > 0 || self.inf > 0 => {
                format!("{m:.2} ({}/{reps} ok)", self.values.len())
            }
            Some(m) => format!("{m:.2}"),
        }
    }

    fn json(&self) -> String {
        let num = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.3}"));
        let values: Vec<String> = self.values.iter().map(|&v| num(Some(v))).collect();
        format!(
            "{{\"median\":{},\"min\":{},\"max\":{},\"runs\":[{}],\"failed\":{},\"printed_inf\":{}}}",
            num(median(&self.values)),
            num(self.values.iter().copied().reduce(f64::min)),
            num(self.values.iter().copied().reduce(f64::max)),
            values.join(","),
            self.failed,
            self.inf
        )
    }
}

/// Repetition by repetition (perftest and ours ran back to back with the
/// same parameters): in how many of the repetitions where both gave a
/// result ours was better, and in how many both gave one. A sign test on
/// these pairs says more under emulation's run-to-run noise than the ratio
/// of medians alone: 0 of 5 or 5 of 5 happens by chance 1 time in 16.
fn pairs(test: Test, perftest: &Cell, ours: &Cell) -> (usize, usize) {
    let both: Vec<(f64, f64)> = ours
        .reps
        .iter()
        .zip(&ours.values)
        .filter_map(|(&rep, &o)| perftest.at_rep(rep).map(|p| (o, p)))
        .collect();
    let wins = both.iter().filter(|&&(o, p)| test.better(o, p)).count();
    (wins, both.len())
}

fn json_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn size_name(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// `cargo xtask bench`.
pub(crate) fn main(args: &[String]) -> Result<ExitCode> {
    let Some(a) = parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    if !a.no_setup {
        setup::ensure()?;
    }
    let ws = Workspace::locate();
    let bin = build_examples(&ws)?;
    let route = rxe::choose_route(&ws, "bench", a.run.want)?;
    let runs = runs(&a);
    let plan = plan(&a, &runs, &bin.join("perf"));
    let outcome = rxe::run(&ws, "bench", &route, &plan, &a.run)?;
    let raw = outcome.out.join("raw");

    // Parse on the host.
    let mut cells: Vec<(Test, u64, Cell, Cell)> = Vec::new();
    for &test in &a.tests {
        for &size in &a.sizes {
            cells.push((test, size, Cell::default(), Cell::default()));
        }
    }
    for r in &runs {
        let value = match r.tool {
            Tool::Perftest => fs::read_to_string(raw.join(format!("{}.client.txt", r.stem())))
                .ok()
                .and_then(|t| parse_perftest(&t, r.test, r.size)),
            Tool::Ours => fs::read_to_string(raw.join(format!("{}.client.json", r.stem())))
                .ok()
                .and_then(|t| parse_ours(&t, r.test, r.size)),
        };
        // A run counts only if its step passed (both sides exited 0).
        let label_tail = format!(
            "{} {} {} B rep {}",
            r.tool.name(),
            r.test.name,
            r.size,
            r.rep
        );
        let passed = outcome
            .steps
            .iter()
            .any(|s| s.passed && s.label.ends_with(&label_tail));
        let (_, _, pt, ours) = cells
            .iter_mut()
            .find(|(t, s, _, _)| t.name == r.test.name && *s == r.size)
            .expect("every run has a cell");
        let cell = if r.tool == Tool::Perftest { pt } else { ours };
        match value.filter(|_| passed) {
            Some(v) if v.is_finite() => cell.push(r.rep, v),
            Some(_) => cell.inf += 1,
            None => cell.failed += 1,
        }
    }

    heading("bench results");
    println!("route: {route}");
    println!(
        "{} (at most {} MiB per run), tx depth {TX_DEPTH} (bandwidth), median of {} repetitions",
        a.iters_text(),
        MAX_RUN_BYTES >> 20,
        a.reps
    );
    match a.inline {
        Some(n) => println!("inline: -I {n} for both tools in write and send tests (reads take none)"),
        None => println!(
            "inline: each tool's default (perftest: none on rxe; ours: up to 220/236 B in write/send latency)"
        ),
    }
    println!("bandwidth: BW average MB/sec (MB = 2^20 B), higher is better");
    println!("latency:   t_typical usec (median of the run), lower is better");
    println!(
        "ratio: of the medians; pairs: repetitions in which ours beat the perftest run next to it;\n\
         target: bandwidth ratio >= 1.00, latency ratio <= 1.05\n"
    );
    println!(
        "{:<10} {:>8}  {:>18}  {:>18}  {:>13}  {:>6}  {:>6}",
        "test", "size", "perftest", "ours", "ours/perftest", "pairs", "target"
    );
    let mut any_fail = false;
    let mut printed_inf = 0;
    let mut rows = Vec::new();
    let mut missed = Vec::new();
    for (test, size, pt, ours) in &cells {
        let ratio = match (median(&ours.values), median(&pt.values)) {
            (Some(o), Some(p)) if p > 0.0 => Some(o / p),
            _ => None,
        };
        let (wins, paired) = pairs(*test, pt, ours);
        let meets = ratio.map(|r| test.meets(r));
        if meets != Some(true) {
            missed.push(format!(
                "{} {} ({}, ours better in {wins} of {paired} pairs)",
                test.name,
                size_name(*size),
                ratio.map_or("no ratio".to_string(), |r| format!("{r:.3}"))
            ));
        }
        any_fail |= pt.failed > 0 || ours.failed > 0;
        printed_inf += pt.inf;
        println!(
            "{:<10} {:>8}  {:>18}  {:>18}  {:>13}  {:>6}  {:>6}",
            test.name,
            size_name(*size),
            pt.show(a.reps),
            ours.show(a.reps),
            ratio.map_or("-".to_string(), |r| format!("{r:.3}")),
            format!("{wins}/{paired}"),
            match meets {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "-",
            }
        );
        rows.push(format!(
            "{{\"test\":{},\"perftest_program\":{},\"size\":{size},\"iters\":{},\"metric\":{},\"better\":{},\"perftest\":{},\"ours\":{},\"ratio_ours_perftest\":{},\"pairs\":{paired},\"pairs_ours_better\":{wins},\"target\":{:.2},\"meets_target\":{}}}",
            json_string(test.name),
            json_string(test.perftest),
            a.iters(*test, *size),
            json_string(test.metric()),
            json_string(if test.bw { "higher" } else { "lower" }),
            pt.json(),
            ours.json(),
            ratio.map_or("null".to_string(), |r| format!("{r:.3}")),
            test.target(),
            meets.map_or("null".to_string(), |m| m.to_string())
        ));
    }
    if missed.is_empty() {
        println!("\ntargets: met in all {} cells", cells.len());
    } else {
        println!(
            "\ntargets: met in {} of {} cells; missed: {}",
            cells.len() - missed.len(),
            cells.len(),
            missed.join("; ")
        );
    }
    let kernel = outcome.env("KERNEL").unwrap_or("unknown");
    let doc = format!(
        "{{\n\"route\":{},\n\"kernel\":{},\n\"iters\":{{\"bandwidth\":{},\"latency\":{}}},\n\"reps\":{},\n\"tx_depth\":{TX_DEPTH},\n\"inline\":{},\n\"raw_dir\":{},\n\"results\":[\n{}\n]\n}}\n",
        json_string(&route.to_string()),
        json_string(kernel),
        a.bw_iters,
        a.lat_iters,
        a.reps,
        a.inline.map_or("null".to_string(), |n| n.to_string()),
        json_string(&raw.to_string_lossy()),
        rows.join(",\n")
    );
    let json_path = ws.target.join("bench.json");
    fs::write(&json_path, &doc)
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    println!(
        "\nwritten to {} (raw outputs in {})",
        json_path.display(),
        raw.display()
    );
    if let Some(why) = outcome.failure_reason() {
        println!("problem: {why}");
        return Ok(ExitCode::FAILURE);
    }
    if printed_inf > 0 {
        println!(
            "note: perftest printed `inf` in {printed_inf} run(s) (its cycles-to-usec conversion \
             failed in the guest); those runs are left out of its medians"
        );
    }
    if any_fail {
        println!("problem: some runs produced no result (\"fail\" above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PT_BW: &str = "\
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      200              23.27              20.17  \t\t   0.000323
---------------------------------------------------------------------------------------
";
    const PT_LAT: &str = "\
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 4096    200          90.79          1309.18      101.94   \t       132.84      \t84.11  \t\t705.15  \t\t1309.18
";

    #[test]
    fn parses_perftest_tables() {
        assert_eq!(parse_perftest(PT_BW, TESTS[0], 65536), Some(20.17));
        assert_eq!(parse_perftest(PT_BW, TESTS[0], 64), None);
        assert_eq!(parse_perftest(PT_LAT, TESTS[4], 4096), Some(101.94));
        assert_eq!(parse_perftest("error", TESTS[4], 4096), None);
        // perftest's line when its clock conversion fails: a result, not a
        // number to take the median of.
        let inf = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]\n \
                   4096    2000          inf            inf          inf      \t       inf\n";
        let v = parse_perftest(inf, TESTS[4], 4096).expect("the line is there");
        assert!(v.is_infinite());
        let mut cell = Cell::default();
        cell.push(1, 250.0);
        cell.inf = 1;
        assert_eq!(cell.show(2), "250.00 (1/2 ok)");
        assert!(cell.json().ends_with("\"failed\":0,\"printed_inf\":1}"));
    }

    #[test]
    fn parses_our_json() {
        let text = "{\"test\":\"send_lat\",\"role\":\"server\",\"bytes\":4096,\"iterations\":200,\"verified\":true}\n\
            {\"test\":\"send_lat\",\"bytes\":4096,\"iterations\":200,\"t_min_us\":97.165,\"t_typical_us\":116.765,\"verified\":true}\n";
        assert_eq!(parse_ours(text, TESTS[4], 4096), Some(116.765));
        assert_eq!(parse_ours(text, TESTS[3], 4096), None);
        let bw = "{\"test\":\"write_bw\",\"bytes\":1048576,\"iterations\":100,\"tx_depth\":128,\"bw_peak_mb_s\":40.668,\"bw_avg_mb_s\":37.263}";
        assert_eq!(parse_ours(bw, TESTS[0], 1 << 20), Some(37.263));
    }

    #[test]
    fn pairs_and_targets() {
        let (bw, lat) = (TESTS[0], TESTS[3]);
        let mut pt = Cell::default();
        let mut ours = Cell::default();
        // Rep 2 of perftest failed: only reps 1 and 3 pair up.
        pt.push(1, 10.0);
        pt.push(3, 10.0);
        ours.push(1, 11.0);
        ours.push(2, 50.0);
        ours.push(3, 9.0);
        assert_eq!(pairs(bw, &pt, &ours), (1, 2));
        assert_eq!(pairs(lat, &pt, &ours), (1, 2));
        assert!(bw.meets(1.00) && !bw.meets(0.99));
        assert!(lat.meets(1.05) && !lat.meets(1.06));
        assert!(ours.json().contains("\"min\":9.000,\"max\":50.000"));
    }

    #[test]
    fn inline_only_where_the_operation_can_carry_it() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let a = parse(&v(&["--inline", "0"])).unwrap().unwrap();
        let by_name = |n: &str| TESTS.iter().copied().find(|t| t.name == n).unwrap();
        assert_eq!(depth_and_inline(&a, by_name("write_bw")), " -t 128 -I 0");
        assert_eq!(depth_and_inline(&a, by_name("read_bw")), " -t 128");
        assert_eq!(depth_and_inline(&a, by_name("send_lat")), " -I 0");
        let a = parse(&[]).unwrap().unwrap();
        assert_eq!(depth_and_inline(&a, by_name("write_lat")), "");
    }

    #[test]
    fn large_sizes_get_fewer_iterations() {
        assert_eq!(iters_for(2000, 64), 2000);
        assert_eq!(iters_for(2000, 4096), 2000);
        assert_eq!(iters_for(2000, 65536), 1024);
        assert_eq!(iters_for(2000, 1 << 20), 64);
        assert_eq!(
            iters_for(2000, 64 << 20),
            5,
            "never below perftest's minimum"
        );
        assert_eq!(iters_for(10, 1 << 20), 10);
    }

    #[test]
    fn medians_and_sizes() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("0"), None);
        assert_eq!(size_name(1 << 20), "1 MiB");
        assert_eq!(size_name(64), "64 B");
    }
}
