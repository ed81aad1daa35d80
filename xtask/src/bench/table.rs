//! The table bench prints: what was run, the medians of both tools per test
//! and size, the ratio, the pairs and the verdict, and the missed targets.

use super::judgement::{median, Cell, Comparison};
use super::settings::{Settings, MAX_RUN_BYTES, TX_DEPTH};
use crate::rxe::Route;

/// Prints the legend, one row per comparison and which targets were missed.
pub(super) fn print(a: &Settings, route: &Route, rows: &[Comparison]) {
    println!("route: {route}");
    if a.hosts == 2 {
        println!(
            "hosts: 2 (servers on host A, clients on host B: every byte crosses the link){}",
            a.delay_ms.map_or(String::new(), |ms| format!(
                ", {ms} ms of netem delay on each host's link"
            ))
        );
    }
    println!(
        "{} (at most {} MiB per run), tx depth {TX_DEPTH} (bandwidth), median of {} repetitions",
        a.iters_text(),
        MAX_RUN_BYTES >> 20,
        a.reps
    );
    // The verbs rows' legend; the stream rows have their own below.
    let verbs_rows = rows.iter().any(|c| !c.test.stream);
    match a.inline {
        _ if !verbs_rows => {}
        Some(n) => {
            println!("inline: -I {n} for both tools in write and send tests (reads take none)")
        }
        None => println!(
            "inline: each tool's default (perftest: none on rxe; ours: up to 220/236 B in write/send latency)"
        ),
    }
    if verbs_rows {
        println!("bandwidth: BW average MB/sec (MB = 2^20 B), higher is better");
        println!("latency:   t_typical usec (median of the run), lower is better");
    }
    println!(
        "ratio: of the medians; pairs: repetitions in which ours beat the {} run next to it;\n\
         target: bandwidth ratio >= 1.00, latency ratio <= 1.05\n",
        if verbs_rows { "perftest" } else { "rstream" }
    );
    let mut missed = Vec::new();
    let (streams, verbs): (Vec<&Comparison>, Vec<&Comparison>) =
        rows.iter().partition(|c| c.test.stream);
    if !verbs.is_empty() {
        println!(
            "{:<10} {:>8}  {:>18}  {:>18}  {:>13}  {:>6}  {:>6}",
            "test", "size", "perftest", "ours", "ours/perftest", "pairs", "target"
        );
    }
    for c in verbs {
        let (ratio, pairs, verdict) = judge(c, &mut missed);
        println!(
            "{:<10} {:>8}  {:>18}  {:>18}  {:>13}  {:>6}  {:>6}",
            c.test.name,
            size_name(c.size),
            cell_text(&c.perftest, a.reps),
            cell_text(&c.ours, a.reps),
            ratio,
            pairs,
            verdict
        );
    }
    print_streams(a, &streams, &mut missed);
    print_setup(rows);
    if missed.is_empty() {
        println!("\ntargets: met in all {} cells", rows.len());
    } else {
        println!(
            "\ntargets: met in {} of {} cells; missed: {}",
            rows.len() - missed.len(),
            rows.len(),
            missed.join("; ")
        );
    }
}

/// A row's ratio, pairs and verdict as printed; a row that misses its
/// target (or has no ratio) goes into `missed`.
fn judge(c: &Comparison, missed: &mut Vec<String>) -> (String, String, &'static str) {
    let ratio = c.ratio();
    let (wins, paired) = c.pairs();
    let meets = c.meets();
    if meets != Some(true) {
        missed.push(format!(
            "{} {} ({}, ours better in {wins} of {paired} pairs)",
            c.test.name,
            size_name(c.size),
            ratio.map_or("no ratio".to_string(), |r| format!("{r:.3}"))
        ));
    }
    (
        ratio.map_or("-".to_string(), |r| format!("{r:.3}")),
        format!("{wins}/{paired}"),
        match meets {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        },
    )
}

/// The stream rows: rstream, ours, the ratio, pairs and verdict against
/// rstream, then TCP and ours/TCP for reference.
fn print_streams(a: &Settings, rows: &[&Comparison], missed: &mut Vec<String>) {
    if rows.is_empty() {
        return;
    }
    println!(
        "\nbyte streams: rstream's test (-S size -C n; latency -S 64 -C 1 -I n) by rdmacm-utils' rstream,\n\
         ours (rdma-examples' rstream on rdma_safe::stream) and TCP (rstream -T s), same options;\n\
         stream_bw: MB/sec (2^20 B) both directions together, from rstream's usec/xfer, higher is better;\n\
         stream_lat: usec/xfer (half a round trip, the run's mean), lower is better;\n\
         ratio, pairs and target against rstream; TCP is a reference, without a target;\n\
         a run counts only if both its sides exited 0"
    );
    println!(
        "{:<10} {:>8}  {:>16}  {:>16}  {:>12}  {:>6}  {:>6}  {:>16}  {:>8}",
        "test", "size", "rstream", "ours", "ours/rstream", "pairs", "target", "tcp", "ours/tcp"
    );
    for c in rows {
        let (ratio, pairs, verdict) = judge(c, missed);
        println!(
            "{:<10} {:>8}  {:>16}  {:>16}  {:>12}  {:>6}  {:>6}  {:>16}  {:>8}",
            c.test.name,
            size_name(c.size),
            cell_text(&c.perftest, a.reps),
            cell_text(&c.ours, a.reps),
            ratio,
            pairs,
            verdict,
            cell_text(&c.tcp, a.reps),
            c.ratio_tcp().map_or("-".to_string(), |r| format!("{r:.3}"))
        );
    }
}

/// rdma_cm rows: the medians of the data connection's set-up time.
fn print_setup(rows: &[Comparison]) {
    let cm: Vec<&Comparison> = rows.iter().filter(|c| c.test.cm).collect();
    if cm.is_empty() {
        return;
    }
    println!(
        "\nrdma_cm data connection set-up, median ms (ours: resolve -> established, from perf;\n\
         perftest: `Data ex. method` to `local address` in its output, two control handshakes included)"
    );
    println!(
        "{:<12} {:>8}  {:>10}  {:>10}",
        "test", "size", "perftest", "ours"
    );
    let ms = |v: &[f64]| median(v).map_or("-".to_string(), |m| format!("{m:.1}"));
    for c in cm {
        println!(
            "{:<12} {:>8}  {:>10}  {:>10}",
            c.test.name,
            size_name(c.size),
            ms(&c.perftest.setup_ms),
            ms(&c.ours.setup_ms)
        );
    }
}

/// A tool's median, with how many of `reps` runs gave a value when some
/// did not; `fail` when none did.
fn cell_text(cell: &Cell, reps: usize) -> String {
    match median(&cell.values) {
        None => "fail".to_string(),
        Some(m) if cell.failed > 0 || cell.inf > 0 => {
            format!("{m:.2} ({}/{reps} ok)", cell.values.len())
        }
        Some(m) => format!("{m:.2}"),
    }
}

/// `64 B`, `4 KiB`, `1 MiB`.
pub(super) fn size_name(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_and_sizes() {
        // A perftest run that printed `inf` is reported, not counted.
        let mut cell = Cell::default();
        cell.push(1, 250.0);
        cell.inf = 1;
        assert_eq!(cell_text(&cell, 2), "250.00 (1/2 ok)");
        assert_eq!(cell_text(&Cell::default(), 2), "fail");
        assert_eq!(size_name(1 << 20), "1 MiB");
        assert_eq!(size_name(64), "64 B");
    }
}
