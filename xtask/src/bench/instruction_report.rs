//! What `--instructions` prints and the `instructions` member it adds to
//! `target/bench.json` (the file's timing results, if any, are kept).

use std::fs;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use super::instruction_counts::{
    mean, spread_pct, InstructionRow, Instructions, SideFigures, SIDES,
};
use super::instructions::TOGGLE;
use super::settings::Settings;
use super::table::size_name;
use crate::Result;

/// A spread (percent) above which a figure is called unstable.
const STABLE_PCT: f64 = 5.0;

/// How each tool was counted, for the table's legend and bench.json.
fn methods() -> [(&'static str, String); 2] {
    [
        (
            "perftest",
            "its loops: the functions of its own that call the provider's poll function, \
             inclusive (Debian's binaries are stripped: found by what they call), n-difference; \
             its report (a peak search quadratic in the samples, qsort) and clock-rate \
             sampling stay out"
                .to_string(),
        ),
        (
            "ours",
            format!("inside perf's measured loops only (callgrind --toggle-collect={TOGGLE}), n-difference"),
        ),
    ]
}

/// `mean ±spread%`, `idle` for instructions of a side that ran no loop
/// (under 0.5 per operation in every measurement), `-` for none.
fn cell(v: &[f64], digits: usize) -> String {
    match mean(v) {
        None => "-".to_string(),
        Some(_) if digits == 0 && v.iter().all(|x| x.abs() < 0.5) => "idle".to_string(),
        Some(m) => match spread_pct(v) {
            Some(s) => format!("{m:.digits$} ±{s:.1}%"),
            None => format!("{m:.digits$}"),
        },
    }
}

fn ir(f: &SideFigures) -> Vec<f64> {
    f.per_op.iter().map(|p| p.ir).collect()
}

fn without_polls(f: &SideFigures) -> Vec<f64> {
    f.without_polls()
}

fn polls(f: &SideFigures) -> Vec<f64> {
    f.per_op.iter().map(|p| p.polls).collect()
}

/// Prints the legend, one line per test, size and side, and the notes.
pub(super) fn print(a: &Settings, route: &str, ins: &Instructions) {
    println!("route: {route}");
    println!(
        "user-space instructions per operation (callgrind Ir), Ir/op = (Ir(n2) - Ir(n1)) / (n2 - n1);\n\
         each cell: the mean of {} measurements ±(max - min)/mean",
        a.reps
    );
    for (tool, how) in methods() {
        println!("  {tool}: {how}");
    }
    println!(
        "polls/op: calls to the provider's completion-queue poll function (rxe_poll_cq) per op,\n\
         most of them empty: their number follows timing;\n\
         w/o polls: Ir/op - Ir/poll x polls/op, Ir/poll the cost of one more poll with the tool's\n\
         loop, measured from same-n runs that polled differently (listed below the table)\n"
    );
    println!(
        "{:<15} {:>5} {:<6} | {:>15} {:>15} {:>12} | {:>15} {:>15} {:>12} | {:>7}",
        "test",
        "size",
        "side",
        "perftest Ir/op",
        "w/o polls",
        "polls/op",
        "ours Ir/op",
        "w/o polls",
        "polls/op",
        "ratio*"
    );
    let mut unstable = Vec::new();
    for r in &ins.rows {
        for (s, side) in SIDES.iter().enumerate() {
            let (p, o) = (&r.perftest[s], &r.ours[s]);
            let ratio = match (mean(&without_polls(o)), mean(&without_polls(p))) {
                (Some(o), Some(p)) if p.abs() >= 1.0 && o.abs() >= 0.5 => format!("{:.2}", o / p),
                _ => "-".to_string(),
            };
            println!(
                "{:<15} {:>5} {:<6} | {:>15} {:>15} {:>12} | {:>15} {:>15} {:>12} | {:>7}",
                r.test.name,
                size_name(r.size),
                side,
                cell(&ir(p), 0),
                cell(&without_polls(p), 0),
                cell(&polls(p), 2),
                cell(&ir(o), 0),
                cell(&without_polls(o), 0),
                cell(&polls(o), 2),
                ratio
            );
            for (tool, f) in [("perftest", p), ("ours", o)] {
                if spread_pct(&without_polls(f)).is_some_and(|x| x > STABLE_PCT) {
                    unstable.push(format!("{} {side} {tool}", r.test.name));
                }
                if f.failed > 0 {
                    unstable.push(format!(
                        "{} {side} {tool}: {} of {} measurements missing",
                        r.test.name, f.failed, a.reps
                    ));
                }
            }
        }
    }
    println!("* ratio: ours/perftest of Ir/op w/o polls");
    print_floor(&ins.rows);
    print_loop_costs(&ins.rows);
    match &ins.poll_fn {
        Some((obj, f)) => println!("\nprovider poll function: {f} in {obj} (rxe is stripped: named by offset)"),
        None => println!(
            "\nproblem: the provider's poll function was not found in ours' files: polls are not counted"
        ),
    }
    if unstable.is_empty() {
        println!("every Ir/op w/o polls within {STABLE_PCT}% across the measurements");
    } else {
        println!(
            "not stable (spread > {STABLE_PCT}% or missing): {}",
            unstable.join("; ")
        );
    }
    for p in &ins.problems {
        println!("problem: {p}");
    }
}

/// The provider floor under each tool's Ir/op w/o polls, and how far
/// above it each tool is.
fn print_floor(rows: &[InstructionRow]) {
    println!("\n{PROVIDER_LEGEND}");
    println!(
        "{:<15} {:>5} {:<6} | {:>15} {:>15} | {:>15} {:>15} | {:>7}",
        "test", "size", "side", "perftest floor", "over", "ours floor", "over", "ratio**"
    );
    for r in rows {
        for (s, side) in SIDES.iter().enumerate() {
            let (p, o) = (&r.perftest[s], &r.ours[s]);
            let ratio = match (mean(&o.over()), mean(&p.over())) {
                (Some(x), Some(y)) if y.abs() >= 1.0 && !idle(o) => format!("{:.2}", x / y),
                _ => "-".to_string(),
            };
            println!(
                "{:<15} {:>5} {:<6} | {:>15} {:>15} | {:>15} {:>15} | {:>7}",
                r.test.name,
                size_name(r.size),
                side,
                cell(&p.floor(), 0),
                over_cell(p),
                cell(&o.floor(), 0),
                over_cell(o),
                ratio
            );
        }
    }
    println!("** ratio: ours/perftest of Ir/op over the floor");
}

/// How the floor is counted, for the table and bench.json.
const PROVIDER_LEGEND: &str = "provider floor: Ir/op inside rdma-core's user-space library and driver \
     (objects libibverbs.so* and libibverbs/lib<driver>-rdmav*.so) entered from the tool, their libc \
     calls included,\nw/o polls (less the poll function's Ir/op): what a C program posting and reaping \
     the same operations pays whatever its loop; over: Ir/op w/o polls - floor, the tool's own code";

/// A side that ran no loop: under 0.5 Ir/op in every measurement.
fn idle(f: &SideFigures) -> bool {
    !f.per_op.is_empty() && f.per_op.iter().all(|p| p.ir.abs() < 0.5)
}

/// The over-the-floor cell: `idle` where the side ran no loop at all.
fn over_cell(f: &SideFigures) -> String {
    if idle(f) {
        "idle".to_string()
    } else {
        let v = f.over();
        match mean(&v) {
            Some(m) => match spread_pct(&v) {
                Some(s) => format!("{m:.0} ±{s:.1}%"),
                None => format!("{m:.0}"),
            },
            None => "-".to_string(),
        }
    }
}

/// The Ir/poll each row used, and where it came from.
fn print_loop_costs(rows: &[InstructionRow]) {
    println!("\nIr/poll (one more poll, the tool's loop included):");
    for r in rows {
        let mut parts = Vec::new();
        for (tool, f) in [("perftest", &r.perftest), ("ours", &r.ours)] {
            let pairs = f[0].pairs.len() + f[1].pairs.len();
            parts.push(match f[0].poll_cost {
                Some(c) if f[0].poll_cost_own => format!("{tool} {c:.0} ({pairs} pairs)"),
                Some(c) => format!("{tool} {c:.0} (the tool's, over all tests)"),
                None => format!("{tool} - (provider's instructions only)"),
            });
        }
        println!("  {:<15} {}", r.test.name, parts.join(", "));
    }
}

/// One side's figures in bench.json (rounded to 0.1).
#[derive(Debug, Serialize)]
struct SideJson {
    ir_per_op: Vec<f64>,
    ir_per_op_without_polls: Vec<f64>,
    polls_per_op: Vec<f64>,
    provider_poll_ir_per_op: Vec<f64>,
    /// Everything inside the provider, polls included, and the floor
    /// (without them), and Ir/op w/o polls over it.
    provider_ir_per_op: Vec<f64>,
    provider_ir_per_op_without_polls: Vec<f64>,
    over_provider: Vec<f64>,
    mean_provider_ir_per_op_without_polls: Option<f64>,
    mean_over_provider: Option<f64>,
    mean_ir_per_op: Option<f64>,
    mean_ir_per_op_without_polls: Option<f64>,
    spread_pct_without_polls: Option<f64>,
    /// Ir/poll used, and whether it is this test's own.
    ir_per_poll: Option<f64>,
    ir_per_poll_own: bool,
    /// `[polls_b - polls_a, Ir_b - Ir_a]` of the same-n pairs.
    same_n_pairs: Vec<(f64, f64)>,
    failed: usize,
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

impl SideJson {
    fn of(f: &SideFigures) -> SideJson {
        let r = |v: Vec<f64>| v.into_iter().map(round1).collect();
        SideJson {
            ir_per_op: r(ir(f)),
            ir_per_op_without_polls: r(without_polls(f)),
            polls_per_op: f
                .per_op
                .iter()
                .map(|p| (p.polls * 1000.0).round() / 1000.0)
                .collect(),
            provider_poll_ir_per_op: r(f.per_op.iter().map(|p| p.poll_ir).collect()),
            provider_ir_per_op: r(f.per_op.iter().map(|p| p.provider).collect()),
            provider_ir_per_op_without_polls: r(f.floor()),
            over_provider: r(f.over()),
            mean_provider_ir_per_op_without_polls: mean(&f.floor()).map(round1),
            mean_over_provider: mean(&f.over()).map(round1),
            mean_ir_per_op: mean(&ir(f)).map(round1),
            mean_ir_per_op_without_polls: mean(&without_polls(f)).map(round1),
            spread_pct_without_polls: spread_pct(&without_polls(f)).map(round1),
            ir_per_poll: f.poll_cost.map(round1),
            ir_per_poll_own: f.poll_cost_own,
            same_n_pairs: f.pairs.clone(),
            failed: f.failed,
        }
    }
}

/// The `instructions` member.
fn member(a: &Settings, route: &str, kernel: &str, raw: &Path, ins: &Instructions) -> Value {
    let rows: Vec<Value> = ins
        .rows
        .iter()
        .map(|r| {
            let tool = |f: &[SideFigures; 2]| {
                json!({ "client": SideJson::of(&f[0]), "server": SideJson::of(&f[1]) })
            };
            json!({
                "test": r.test.name,
                "perftest_program": r.test.perftest,
                "size": r.size,
                "n1": r.n.0,
                "n2": r.n.1,
                "queue_pairs": r.test.qps,
                "bidirectional": r.test.bidirectional,
                "threads": r.test.threads,
                "perftest": tool(&r.perftest),
                "ours": tool(&r.ours),
            })
        })
        .collect();
    let methods: serde_json::Map<String, Value> = methods()
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::String(v)))
        .collect();
    json!({
        "route": route,
        "kernel": kernel,
        "measurements": a.reps,
        "method": methods,
        "without_polls": "Ir/op - ir_per_poll x polls/op; ir_per_poll: the cost of one more poll, \
            the tool's loop included, the least-squares slope of Ir on polls over same-n runs \
            (without one: Ir/op less the provider poll function's inclusive instructions)",
        "poll_function": ins.poll_fn.as_ref().map(|(o, f)| format!("{o}:{f}")),
        "operations": "n1 and n2 on each of queue_pairs (both tools' -q): Ir/op divides by \
            queue_pairs x (n2 - n1)",
        "provider": PROVIDER_LEGEND.replace('\n', " "),
        "raw_dir": raw.to_string_lossy(),
        "results": rows,
        "problems": ins.problems,
    })
}

/// Adds (or replaces) `instructions` in the report at `path`, keeping the
/// rest of it; a new report has no timing results.
pub(super) fn write(
    path: &Path,
    a: &Settings,
    route: &str,
    kernel: &str,
    raw: &Path,
    ins: &Instructions,
) -> Result<()> {
    let old = fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .filter(Value::is_object);
    let mut report = old.unwrap_or_else(|| {
        json!({
            "route": route,
            "kernel": kernel,
            "hosts": 1,
            "delay_ms": null,
            "reps": 0,
            "results": [],
        })
    });
    report["instructions"] = member(a, route, kernel, raw, ins);
    let mut text = serde_json::to_string_pretty(&report)?;
    text.push('\n');
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::instruction_counts::PerOp;
    use super::*;

    #[test]
    fn cells_show_mean_spread_and_idle_sides() {
        assert_eq!(cell(&[990.0, 1010.0], 0), "1000 ±2.0%");
        assert_eq!(cell(&[0.0, 0.2], 0), "idle");
        assert_eq!(cell(&[], 0), "-");
        assert_eq!(cell(&[1.5], 2), "1.50");
        assert_eq!(cell(&[0.25, 0.25], 2), "0.25", "polls are never idle");
    }

    #[test]
    fn an_idle_side_is_idle_over_its_floor_too() {
        let side = |ir| SideFigures {
            per_op: vec![PerOp {
                ir,
                polls: 0.0,
                poll_ir: 0.0,
                provider: 0.0,
            }],
            ..SideFigures::default()
        };
        assert_eq!(over_cell(&side(0.2)), "idle");
        assert_eq!(over_cell(&side(0.7)), "1");
        assert_eq!(over_cell(&SideFigures::default()), "-");
    }

    #[test]
    fn the_member_joins_a_report_and_keeps_its_timing_results() {
        let dir = std::env::temp_dir().join(format!("xtask-ins-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.json");
        fs::write(&path, r#"{"reps": 3, "results": [{"test": "write_bw"}]}"#).unwrap();
        let a = super::super::settings::parse(&["--instructions"]).unwrap();
        let ins = Instructions {
            rows: Vec::new(),
            poll_fn: Some(("/lib/librxe.so".into(), "0x2ca0".into())),
            problems: Vec::new(),
        };
        write(&path, &a, "VM", "6.1", Path::new("raw"), &ins).unwrap();
        let v: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["results"][0]["test"], "write_bw", "timing results kept");
        assert_eq!(v["reps"], 3);
        assert_eq!(v["instructions"]["poll_function"], "/lib/librxe.so:0x2ca0");
        assert_eq!(v["instructions"]["measurements"], 2);
        // No report yet: a new one, with no timing results.
        fs::remove_file(&path).unwrap();
        write(&path, &a, "VM", "6.1", Path::new("raw"), &ins).unwrap();
        let v: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["results"], json!([]));
        assert!(v["instructions"].is_object());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn side_json_rounds_and_keeps_every_measurement() {
        let f = SideFigures {
            per_op: vec![
                PerOp {
                    ir: 1000.04,
                    polls: 2.0,
                    poll_ir: 100.0,
                    provider: 300.0,
                },
                PerOp {
                    ir: 1020.0,
                    polls: 2.5,
                    poll_ir: 120.0,
                    provider: 320.0,
                },
            ],
            failed: 0,
            pairs: vec![(100.0, 5000.0)],
            poll_cost: None,
            poll_cost_own: false,
        };
        let v = serde_json::to_value(SideJson::of(&f)).unwrap();
        assert_eq!(v["ir_per_op"], json!([1000.0, 1020.0]));
        assert_eq!(v["ir_per_op_without_polls"], json!([900.0, 900.0]));
        assert_eq!(v["spread_pct_without_polls"], json!(0.0));
        assert_eq!(v["same_n_pairs"], json!([[100.0, 5000.0]]));
        assert!(v["ir_per_poll"].is_null());
        // 200 in the provider less its polls; 700 of ours' 900 over it.
        assert_eq!(v["provider_ir_per_op_without_polls"], json!([200.0, 200.0]));
        assert_eq!(v["over_provider"], json!([700.0, 700.0]));
        assert_eq!(v["mean_over_provider"], json!(700.0));
        // With a poll cost: less 2 and 2.5 polls at 50.
        let f = SideFigures {
            poll_cost: Some(50.0),
            poll_cost_own: true,
            ..f
        };
        let v = serde_json::to_value(SideJson::of(&f)).unwrap();
        assert_eq!(v["ir_per_op_without_polls"], json!([900.0, 895.0]));
        assert_eq!(v["over_provider"], json!([700.0, 695.0]));
        assert_eq!(
            (v["ir_per_poll"].as_f64(), v["ir_per_poll_own"].as_bool()),
            (Some(50.0), Some(true))
        );
    }
}
