//! Reading the raw outputs back on the host: perftest's text table, our
//! `perf --json` lines and (stream rows) rstream's result line, one value
//! per run, gathered per test and size.

use std::fs;
use std::path::Path;

use serde::Deserialize;

use super::judgement::Comparison;
use super::plan::{Run, Tool};
use super::settings::Settings;
use super::suite::Test;
use crate::rxe::Outcome;

/// Every run's value, in a [`Comparison`] per test and size (in the order
/// of `--tests`, then `--sizes`). A run counts only if its step passed
/// (both sides exited 0) and its output holds a value; an infinite value
/// is counted apart.
pub(super) fn collect(
    a: &Settings,
    runs: &[Run],
    outcome: &Outcome,
    raw: &Path,
) -> Vec<Comparison> {
    let mut rows: Vec<Comparison> = Vec::new();
    for &test in &a.tests {
        for size in a.sizes_of(test) {
            rows.push(Comparison::new(test, size));
        }
    }
    for r in runs {
        let value = match r.tool {
            // All three programs of a stream row print rstream's lines.
            _ if r.test.stream => fs::read_to_string(raw.join(format!("{}.client.txt", r.stem())))
                .ok()
                .and_then(|t| parse_rstream(&t, r.test, r.size)),
            Tool::Tcp => unreachable!("only stream rows have a TCP run"),
            Tool::Perftest => fs::read_to_string(raw.join(format!("{}.client.txt", r.stem())))
                .ok()
                .and_then(|t| parse_perftest(&t, r.test, r.size)),
            Tool::Ours => fs::read_to_string(raw.join(format!("{}.client.json", r.stem())))
                .ok()
                .and_then(|t| parse_ours(&t, r.test, r.size)),
        };
        let label_tail = r.label_tail();
        let passed = outcome
            .steps
            .iter()
            .any(|s| s.passed && s.label.ends_with(&label_tail));
        let row = rows
            .iter_mut()
            .find(|c| c.test.name == r.test.name && c.size == r.size)
            .expect("every run has a row");
        let cell = match r.tool {
            Tool::Perftest => &mut row.perftest,
            Tool::Ours => &mut row.ours,
            Tool::Tcp => &mut row.tcp,
        };
        if r.test.cm && passed {
            if let Some(ms) = setup_ms(raw, r) {
                cell.setup_ms.push(ms);
            }
        }
        match value.filter(|_| passed) {
            Some(v) if v.is_finite() => cell.push(r.rep, v),
            Some(_) => cell.inf += 1,
            None => cell.failed += 1,
        }
    }
    rows
}

/// The data connection's set-up time (ms) of an rdma_cm run: ours from
/// perf's `rdma_cm set-up [ms]: control X  data Y` line, perftest's from
/// its client's time-stamped output (see [`perftest_setup_ms`]).
fn setup_ms(raw: &Path, r: &Run) -> Option<f64> {
    match r.tool {
        Tool::Ours => fs::read_to_string(raw.join(format!("{}.client.txt", r.stem())))
            .ok()
            .and_then(|t| ours_setup_ms(&t)),
        Tool::Perftest => fs::read_to_string(raw.join(format!("{}.client.ts", r.stem())))
            .ok()
            .and_then(|t| perftest_setup_ms(&t)),
        Tool::Tcp => None,
    }
}

/// `Y` of perf's `rdma_cm set-up [ms]: control X  data Y` line.
fn ours_setup_ms(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains("rdma_cm set-up"))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == "data")?;
    words.next()?.parse().ok()
}

/// perftest prints no set-up time: the span between the line that ends
/// its banner (`Data ex. method`, printed just before it creates the data
/// connection) and its first `local address` line (printed once the data
/// QP is connected), from `<ns> <line>` time stamps.
fn perftest_setup_ms(text: &str) -> Option<f64> {
    let stamp = |needle: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.contains(needle))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let (from, to) = (stamp("Data ex. method")?, stamp("local address")?);
    (to >= from).then(|| (to - from) as f64 / 1e6)
}

/// perftest's result: the first line after the `#bytes` header that starts
/// with a number (before the closing rule); field 3 (BW average) for
/// bandwidth, field 4 (t_typical) for latency.
///
/// Under emulation perftest's sampled clock rate often fails: it prints
/// `Correlation coefficient r^2: .. < 0.9` and converts with a rate of 0,
/// which gives `inf` in a latency row and 0.00 in a bandwidth row. Both
/// come back as infinity, a failed conversion that bench counts apart. (A
/// latency test also samples the rate before its run, so a warning above
/// a finite latency row is not that row's.)
fn parse_perftest(text: &str, test: Test, size: u64) -> Option<f64> {
    let mut lines = text.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    let row = lines
        .take_while(|l| !l.trim_start().starts_with("---"))
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })?;
    let fields: Vec<&str> = row.split_whitespace().collect();
    if fields.first()?.parse::<u64>().ok()? != size {
        return None;
    }
    let value = fields
        .get(if test.bw { 3 } else { 4 })?
        .parse::<f64>()
        .ok()?;
    Some(if test.bw && value == 0.0 {
        f64::INFINITY
    } else {
        value
    })
}

/// A stream row's value from rstream's output (the header `name bytes
/// xfers iters total time Gb/sec usec/xfer`, then the result line, its
/// size abbreviated as rstream does: `64`, `4k`, `1m`): for `stream_bw`
/// the throughput in MB/sec (2^20 B) both directions together, from the
/// line's usec per transfer (`size / usec`), which keeps four or more
/// digits where its Gb/sec column keeps two decimals (0.05 at 64 B under
/// emulation); for `stream_lat` the usec per transfer itself (half a round
/// trip, the run's mean). A run that took no measurable time per transfer
/// comes back as infinity.
fn parse_rstream(text: &str, test: Test, size: u64) -> Option<f64> {
    let mut lines = text.lines();
    lines.find(|l| l.starts_with("name") && l.contains("usec/xfer"))?;
    let fields: Vec<&str> = lines.next()?.split_whitespace().collect();
    if fields.len() != 8 || fields[1] != rstream_size(size) {
        return None;
    }
    let per_xfer: f64 = fields[7].parse().ok()?;
    if per_xfer.is_nan() || per_xfer <= 0.0 {
        return Some(f64::INFINITY);
    }
    Some(if test.bw {
        size as f64 / per_xfer * 1e6 / f64::from(1 << 20)
    } else {
        per_xfer
    })
}

/// A size as rstream's result line abbreviates it (its `size_str`): the
/// largest binary unit it reaches, one decimal below 10 units when not
/// whole.
fn rstream_size(size: u64) -> String {
    let (base, mag) = match size {
        s if s >= 1 << 30 => (1 << 30, "g"),
        s if s >= 1 << 20 => (1 << 20, "m"),
        s if s >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let fraction = if size / base < 10 {
        (size % base) * 10 / base
    } else {
        0
    };
    if fraction > 0 {
        format!("{}.{fraction}{mag}", size / base)
    } else {
        format!("{}{mag}", size / base)
    }
}

/// The members of a `perf --json` line that bench reads.
#[derive(Debug, Deserialize)]
struct PerfLine {
    test: String,
    /// Only the server's lines have one.
    role: Option<String>,
    bytes: u64,
    bw_avg_mb_s: Option<f64>,
    t_typical_us: Option<f64>,
}

/// Our result: the client's JSON line for `size` (no `role` member).
fn parse_ours(text: &str, test: Test, size: u64) -> Option<f64> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<PerfLine>(l.trim()).ok())
        .filter(|l| l.role.is_none() && l.test == test.perf_name() && l.bytes == size)
        .find_map(|l| {
            let value = if test.bw {
                l.bw_avg_mb_s
            } else {
                l.t_typical_us
            };
            value.filter(|v| v.is_finite())
        })
}

#[cfg(test)]
mod tests {
    use super::super::suite::TESTS;
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
        // A warning between the header and the row (as perftest prints it
        // under TCG), and no row before the rule.
        let warned = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]\n\
                      Correlation coefficient r^2: 0.752994 < 0.9\n \
                      4096    5000          92.57          9939.20      96.86\n";
        assert_eq!(parse_perftest(warned, TESTS[4], 4096), Some(96.86));
        let zero =
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n\
                    Correlation coefficient r^2: 0.75043 < 0.9\n \
                    64         20000            0.00               0.00   \t\t   0.000000\n";
        assert!(parse_perftest(zero, TESTS[0], 64).is_some_and(f64::is_infinite));
        let no_row = " #bytes #iterations\n------\n 4096 5000 1 2 3\n";
        assert_eq!(parse_perftest(no_row, TESTS[4], 4096), None);
    }

    #[test]
    fn parses_perftest_atomic_tables() {
        // As ib_atomic_bw and ib_atomic_lat print them on rxe (rdma-core 44).
        let bw =
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
                  8          20000            0.36               0.30   \t\t   0.039483\n";
        let lat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n \
                   8       5000          20.01          306.62       20.37    \t       21.97       \t10.50  \t\t55.17   \t\t225.43 \n";
        let (atomic_bw, atomic_lat) = (TESTS[5], TESTS[6]);
        assert_eq!(atomic_bw.name, "atomic_bw");
        assert_eq!(parse_perftest(bw, atomic_bw, 8), Some(0.30));
        assert_eq!(parse_perftest(lat, atomic_lat, 8), Some(20.37));
        let ours = "{\"test\":\"atomic_lat\",\"bytes\":8,\"iterations\":5000,\"t_min_us\":21.597,\"t_typical_us\":22.308,\"verified\":true}";
        assert_eq!(parse_ours(ours, atomic_lat, 8), Some(22.308));
    }

    #[test]
    fn parses_set_up_times() {
        let ours = "perf -R: x\n rdma_cm set-up [ms]: control 320.714  data 16.268  (resolve -> established)\n";
        assert_eq!(ours_setup_ms(ours), Some(16.268));
        assert_eq!(ours_setup_ms("nothing"), None);
        let ts = "1000000000  rdma_cm QPs\t : ON\n1000000000  Data ex. method : rdma_cm\n\
                  1250000000  local address: LID 0000 QPN 0x0014\n";
        assert_eq!(perftest_setup_ms(ts), Some(250.0));
        assert_eq!(perftest_setup_ms("1 Data ex. method\n"), None);
    }

    /// rstream 44's output of a bandwidth and a ping-pong run, as its
    /// client prints them (ours prints the same layout).
    const RSTREAM_BW: &str = "\
name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer
custom    4k      20k     1       312m        1.43s      1.83      17.90
";
    const RSTREAM_LAT: &str = "\
name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer
custom    64      1       5k      625k        0.28s      0.02      28.14
";

    #[test]
    fn parses_rstream_lines() {
        let (bw, lat) = (TESTS[26], TESTS[27]);
        assert_eq!((bw.name, lat.name), ("stream_bw", "stream_lat"));
        // The fixture's usec/xfer column, as MiB/s of 4096-byte transfers.
        let v = parse_rstream(RSTREAM_BW, bw, 4096).expect("a value");
        assert!((v - 4096.0 / 17.90 * 1e6 / 1048576.0).abs() < 1e-9, "{v}");
        assert_eq!(parse_rstream(RSTREAM_LAT, lat, 64), Some(28.14));
        // Another size's line, no line, an error, a zero time.
        assert_eq!(parse_rstream(RSTREAM_BW, bw, 64), None);
        let header = RSTREAM_BW.lines().next().unwrap();
        assert_eq!(parse_rstream(header, bw, 4096), None);
        assert_eq!(
            parse_rstream(
                &format!("{header}\nrsend: Connection reset by peer\n"),
                bw,
                4096
            ),
            None
        );
        let zero = RSTREAM_LAT.replace("28.14", "0.00");
        assert!(parse_rstream(&zero, lat, 64).is_some_and(f64::is_infinite));
        for (size, text) in [
            (64, "64"),
            (1536, "1.5k"),
            (65536, "64k"),
            (1 << 20, "1m"),
            (100_003, "97k"),
        ] {
            assert_eq!(rstream_size(size), text);
        }
    }

    #[test]
    fn parses_our_json() {
        let text = "{\"test\":\"send_lat\",\"role\":\"server\",\"bytes\":4096,\"iterations\":200,\"verified\":true}\n\
            {\"test\":\"send_lat\",\"bytes\":4096,\"iterations\":200,\"t_min_us\":97.165,\"t_typical_us\":116.765,\"verified\":true}\n";
        assert_eq!(parse_ours(text, TESTS[4], 4096), Some(116.765));
        assert_eq!(parse_ours(text, TESTS[3], 4096), None);
        let bw = "{\"test\":\"write_bw\",\"bytes\":1048576,\"iterations\":100,\"tx_depth\":128,\"bw_peak_mb_s\":40.668,\"bw_avg_mb_s\":37.263}";
        assert_eq!(parse_ours(bw, TESTS[0], 1 << 20), Some(37.263));
        assert_eq!(parse_ours(bw, TESTS[0], 64), None);
        // perf writes a number that is not finite as null.
        let null = bw.replace("37.263", "null");
        assert_eq!(parse_ours(&null, TESTS[0], 1 << 20), None);
    }
}
