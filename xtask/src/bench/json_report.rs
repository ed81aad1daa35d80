//! `target/bench.json`: the settings of the bench and, per test and size,
//! every run's value, the medians, the ratio, the pairs and the verdict.

use std::fs;
use std::path::Path;

use serde::Serialize;

use super::judgement::{median, Cell, Comparison};
use super::settings::{Settings, TX_DEPTH};
use crate::rxe::Route;
use crate::Result;

/// The whole file.
#[derive(Debug, Serialize)]
struct Report<'a> {
    route: String,
    kernel: &'a str,
    /// 1: one host's rxe talking to itself; 2: servers on host A, clients
    /// on host B, across the link.
    hosts: usize,
    /// `--delay`: netem delay (ms) on each host's link.
    delay_ms: Option<u32>,
    iters: Iters,
    reps: usize,
    tx_depth: u32,
    /// `--inline`, if given (it applies to write and send tests only).
    inline: Option<u32>,
    raw_dir: String,
    results: Vec<Row>,
}

/// Operations per run before the size cap.
#[derive(Debug, Serialize)]
struct Iters {
    bandwidth: u32,
    latency: u32,
}

/// One test at one size.
#[derive(Debug, Serialize)]
struct Row {
    test: &'static str,
    perftest_program: &'static str,
    size: u64,
    iters: u32,
    metric: &'static str,
    /// `higher` or `lower`: which way the metric is better.
    better: &'static str,
    perftest: Values,
    ours: Values,
    /// Stream rows: the TCP reference (`rstream -T s`) and ours/TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp: Option<Values>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_ours_tcp: Option<f64>,
    ratio_ours_perftest: Option<f64>,
    pairs: usize,
    pairs_ours_better: usize,
    target: f64,
    meets_target: Option<bool>,
}

/// One tool's values for a test and size (rounded to 3 decimals).
#[derive(Debug, Serialize)]
struct Values {
    median: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    runs: Vec<f64>,
    failed: usize,
    printed_inf: usize,
    /// rdma_cm rows: the data connection's set-up time per run (ms) and its
    /// median; empty/`None` otherwise.
    setup_ms: Vec<f64>,
    setup_ms_median: Option<f64>,
}

impl Values {
    fn of(cell: &Cell) -> Values {
        Values {
            median: median(&cell.values).map(round3),
            min: cell.values.iter().copied().reduce(f64::min).map(round3),
            max: cell.values.iter().copied().reduce(f64::max).map(round3),
            runs: cell.values.iter().copied().map(round3).collect(),
            failed: cell.failed,
            printed_inf: cell.inf,
            setup_ms: cell.setup_ms.iter().copied().map(round3).collect(),
            setup_ms_median: median(&cell.setup_ms).map(round3),
        }
    }
}

/// A cell's values as bench.json has them (for the plots' tests, which
/// read them back).
#[cfg(test)]
pub(super) fn values_json(cell: &Cell) -> String {
    serde_json::to_string(&Values::of(cell)).expect("plain numbers serialize")
}

/// `v` rounded to 3 decimals: the precision both tools print.
fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Writes the report to `path`.
pub(super) fn write(
    path: &Path,
    a: &Settings,
    route: &Route,
    kernel: &str,
    raw: &Path,
    rows: &[Comparison],
) -> Result<()> {
    let report = Report {
        route: route.to_string(),
        kernel,
        hosts: a.hosts,
        delay_ms: a.delay_ms,
        iters: Iters {
            bandwidth: a.bw_iters,
            latency: a.lat_iters,
        },
        reps: a.reps,
        tx_depth: TX_DEPTH,
        inline: a.inline,
        raw_dir: raw.to_string_lossy().into_owned(),
        results: rows.iter().map(|c| row(a, c)).collect(),
    };
    let mut report = serde_json::to_value(&report)?;
    // An earlier `--instructions` member stays (it carries its own route
    // and kernel), as that run keeps these results.
    if let Some(ins) = fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|old| old.get("instructions").cloned())
    {
        report["instructions"] = ins;
    }
    let mut text = serde_json::to_string_pretty(&report)?;
    text.push('\n');
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

fn row(a: &Settings, c: &Comparison) -> Row {
    let (pairs_ours_better, pairs) = c.pairs();
    Row {
        test: c.test.name,
        perftest_program: c.test.perftest,
        size: c.size,
        iters: a.iters(c.test, c.size),
        metric: c.test.metric(),
        better: if c.test.bw { "higher" } else { "lower" },
        perftest: Values::of(&c.perftest),
        ours: Values::of(&c.ours),
        tcp: c.test.stream.then(|| Values::of(&c.tcp)),
        ratio_ours_tcp: c.ratio_tcp().map(round3),
        ratio_ours_perftest: c.ratio().map(round3),
        pairs,
        pairs_ours_better,
        target: c.test.target(),
        meets_target: c.meets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_values() {
        let mut cell = Cell::default();
        cell.push(1, 11.0);
        cell.push(2, 50.0);
        cell.push(3, 9.0);
        cell.inf = 1;
        let v = serde_json::to_value(Values::of(&cell)).unwrap();
        assert_eq!(
            (v["min"].as_f64(), v["max"].as_f64()),
            (Some(9.0), Some(50.0))
        );
        assert_eq!(
            (v["failed"].as_u64(), v["printed_inf"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(v["median"].as_f64(), Some(11.0));
        assert_eq!(round3(1.234_56), 1.235);
        assert!(serde_json::to_value(Values::of(&Cell::default())).unwrap()["median"].is_null());
    }
}
