//! What `perf` prints: perftest-style text tables, or with `--json` one
//! JSON object per size on stdout (read by `cargo xtask bench`) and the
//! text on stderr.

use crate::bandwidth::BwRun;
use crate::protocol::Params;
use rdma_examples::stats::Latency;
use serde::{Serialize, Serializer};
use std::time::Instant;

/// Where human-readable text goes (stdout, or stderr with `--json`), and
/// what the results may claim about the data.
pub(crate) struct Out {
    pub(crate) json: bool,
    pub(crate) checks: Checks,
}

/// What a run checks, said in its JSON lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Checks {
    /// `perf`'s own protocol: the bytes (or the atomics' old and final
    /// values) are checked; `"verified": true`.
    Data,
    /// `-R`: the peer may be perftest, which fills its buffers with
    /// arbitrary bytes, so only completion statuses and message lengths are
    /// checked; `"verified": false`.
    Statuses,
}

impl Out {
    pub(crate) fn say(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
}

/// The rule around perftest's headers.
pub(crate) const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// The table header of a bandwidth test.
pub(crate) const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";

/// The table header of a latency test.
pub(crate) const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";

/// What a timestamp costs here (on a VM without a TSC clocksource,
/// `Instant::now` is a system call).
pub(crate) fn clock_cost() -> String {
    let n = 10_000;
    let start = Instant::now();
    let mut last = start;
    for _ in 0..n {
        last = Instant::now();
    }
    let each = (last - start).as_secs_f64() * 1e9 / n as f64;
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
    format!(" (clock: Instant::now() takes {each:.0} ns; clocksource {source})")
}

/// The result of one size, client side.
pub(crate) enum Report {
    Bw(BwRun),
    Lat(Latency),
}

/// A number with three decimals; `null` when not finite.
fn three<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64((v * 1000.0).round() / 1000.0)
    } else {
        s.serialize_none()
    }
}

/// The client's JSON line of a bandwidth size.
#[derive(Serialize)]
struct BwJson<'a> {
    test: &'a str,
    bytes: usize,
    /// Operations over all queue pairs (`-n` × `-q`), as perftest counts.
    iterations: usize,
    tx_depth: usize,
    /// `-q`.
    qps: usize,
    /// `-b`: the numbers are the sum of both directions (as perftest's).
    bidirectional: bool,
    #[serde(serialize_with = "three")]
    bw_peak_mb_s: f64,
    #[serde(serialize_with = "three")]
    bw_avg_mb_s: f64,
    #[serde(serialize_with = "three")]
    msg_rate_mpps: f64,
    #[serde(serialize_with = "three")]
    post_ns_avg: f64,
    #[serde(serialize_with = "three")]
    scope_exit_us: f64,
    verified: bool,
    checks: Checks,
}

/// The client's JSON line of a latency size.
#[derive(Serialize)]
struct LatJson<'a> {
    test: &'a str,
    bytes: usize,
    iterations: usize,
    #[serde(serialize_with = "three")]
    t_min_us: f64,
    #[serde(serialize_with = "three")]
    t_max_us: f64,
    #[serde(serialize_with = "three")]
    t_typical_us: f64,
    #[serde(serialize_with = "three")]
    t_avg_us: f64,
    #[serde(serialize_with = "three")]
    t_stdev_us: f64,
    #[serde(serialize_with = "three")]
    p99_us: f64,
    #[serde(serialize_with = "three")]
    p99_9_us: f64,
    verified: bool,
    checks: Checks,
}

/// The server's JSON line of a size (it has no measurements).
#[derive(Serialize)]
struct ServerJson<'a> {
    test: &'a str,
    role: &'a str,
    bytes: usize,
    iterations: usize,
    verified: bool,
    checks: Checks,
}

fn json_line(value: &impl Serialize) {
    match serde_json::to_string(value) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("perf: cannot write the JSON result: {e}"),
    }
}

/// The server's report of a finished size (JSON only).
pub(crate) fn print_server_size(out: &Out, p: &Params, size: usize) {
    if out.json {
        json_line(&ServerJson {
            test: p.test.name(),
            role: "server",
            bytes: size,
            iterations: p.iters * p.qps,
            verified: out.checks == Checks::Data,
            checks: out.checks,
        });
    }
}

/// The client's report of a finished size.
pub(crate) fn print_report(out: &Out, p: &Params, size: usize, r: &Report, verbose: bool) {
    let test = p.test.name();
    match r {
        Report::Bw(b) => {
            if out.json {
                return json_line(&BwJson {
                    test,
                    bytes: size,
                    iterations: p.iters * p.qps,
                    tx_depth: p.tx_depth,
                    qps: p.qps,
                    bidirectional: p.bidirectional,
                    bw_peak_mb_s: b.bw.peak_mb,
                    bw_avg_mb_s: b.bw.avg_mb,
                    msg_rate_mpps: b.bw.mpps,
                    post_ns_avg: b.post_ns_avg,
                    scope_exit_us: b.scope_exit_us,
                    verified: out.checks == Checks::Data,
                    checks: out.checks,
                });
            }
            out.say(&format!(
                " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
                size,
                p.iters * p.qps,
                b.bw.peak_mb,
                b.bw.avg_mb,
                b.bw.mpps
            ));
            if verbose && b.post_ns_avg.is_finite() {
                out.say(&format!(
                    "   (safe API: {:.0} ns per post on average; scope ended {:.1} us after the last completion)",
                    b.post_ns_avg, b.scope_exit_us
                ));
            }
        }
        Report::Lat(l) => {
            if out.json {
                return json_line(&LatJson {
                    test,
                    bytes: size,
                    iterations: p.iters,
                    t_min_us: l.min,
                    t_max_us: l.max,
                    t_typical_us: l.typical,
                    t_avg_us: l.avg,
                    t_stdev_us: l.stdev,
                    p99_us: l.p99,
                    p99_9_us: l.p999,
                    verified: out.checks == Checks::Data,
                    checks: out.checks,
                });
            }
            out.say(&format!(
                " {:<6} {:<11} {:<14.2} {:<14.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                size, p.iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_members_in_order_with_three_decimals() {
        let line = serde_json::to_string(&LatJson {
            test: "send_lat",
            bytes: 64,
            iterations: 20,
            t_min_us: 1.23456,
            t_max_us: f64::NAN,
            t_typical_us: 2.0,
            t_avg_us: 0.0,
            t_stdev_us: 0.0,
            p99_us: 0.0,
            p99_9_us: f64::INFINITY,
            verified: true,
            checks: Checks::Data,
        })
        .unwrap();
        assert!(
            line.starts_with(r#"{"test":"send_lat","bytes":64,"iterations":20,"t_min_us":1.235,"t_max_us":null,"t_typical_us":2.0,"#),
            "{line}"
        );
        assert!(
            line.ends_with(r#""p99_9_us":null,"verified":true,"checks":"data"}"#),
            "{line}"
        );
    }
}
