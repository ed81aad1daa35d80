//! `target/bench.json`: the settings of the bench and, per test and size,
//! every run's value, the medians, the ratio, the pairs and the verdict.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use super::judgement::{median, Cell, Comparison};
use super::options::{Args, TX_DEPTH};
use crate::rxe::Route;
use crate::Result;

/// Writes the report to `path`.
pub(super) fn write(
    path: &Path,
    a: &Args,
    route: &Route,
    kernel: &str,
    raw: &Path,
    rows: &[Comparison],
) -> Result<()> {
    let rows: Vec<String> = rows
        .iter()
        .map(|c| {
            let (test, size) = (c.test, c.size);
            let ratio = c.ratio();
            let (wins, paired) = c.pairs();
            let meets = c.meets();
            format!(
                "{{\"test\":{},\"perftest_program\":{},\"size\":{size},\"iters\":{},\"metric\":{},\"better\":{},\"perftest\":{},\"ours\":{},\"ratio_ours_perftest\":{},\"pairs\":{paired},\"pairs_ours_better\":{wins},\"target\":{:.2},\"meets_target\":{}}}",
                json_string(test.name),
                json_string(test.perftest),
                a.iters(test, size),
                json_string(test.metric()),
                json_string(if test.bw { "higher" } else { "lower" }),
                cell_json(&c.perftest),
                cell_json(&c.ours),
                ratio.map_or("null".to_string(), |r| format!("{r:.3}")),
                test.target(),
                meets.map_or("null".to_string(), |m| m.to_string())
            )
        })
        .collect();
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
    fs::write(path, &doc).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// One tool's values for a test and size.
fn cell_json(cell: &Cell) -> String {
    let num = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.3}"));
    let values: Vec<String> = cell.values.iter().map(|&v| num(Some(v))).collect();
    format!(
        "{{\"median\":{},\"min\":{},\"max\":{},\"runs\":[{}],\"failed\":{},\"printed_inf\":{}}}",
        num(median(&cell.values)),
        num(cell.values.iter().copied().reduce(f64::min)),
        num(cell.values.iter().copied().reduce(f64::max)),
        values.join(","),
        cell.failed,
        cell.inf
    )
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
        assert!(cell_json(&cell).contains("\"min\":9.000,\"max\":50.000"));
        assert!(cell_json(&cell).ends_with("\"failed\":0,\"printed_inf\":1}"));
    }
}
