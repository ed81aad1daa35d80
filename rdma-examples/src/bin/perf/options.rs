//! `perf`'s command line (perftest's short flags), turned into the
//! [`Options`] the server and client run with.

use crate::protocol::{
    AtomicKind, Params, Test, INLINE, ITERS, MAX_ALL, QPS, RX_DEPTH, SIZE, TX_DEPTH,
};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use rdma_examples::cli;
use rdma_examples::flags::{DeviceFlags, GidIndex, Timeout};
use rdma_examples::limit::Limit;
use rdma_safe::{channel::Mtu, work::ATOMIC_SIZE};
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "perf",
    override_usage = "perf [options] <test>            server: wait for one client\n       \
                      perf [options] <test> <host>     client: run <test> against the server at <host>\n       \
                      perf [options] --test <test> [<host>]",
    after_help = "Tests: write_bw read_bw send_bw write_lat read_lat send_lat atomic_bw atomic_lat\n\
                  The client's -s/-a/-n/-t/-r/-I/-e/-A/-q/-b are sent to the server; both check the data.\n\
                  Atomic tests operate on 8 bytes: -s other than 8 and -a do not apply.\n\
                  A peer that dies ends the run with status 1, T = --timeout: a killed peer\n\
                  (its control connection closed) in about a second, at most T + 2 s; a stopped\n\
                  one T after the last completion or, in perf's own protocol, the client's last\n\
                  heartbeat (ALIVE every 250 ms); a -R server that waits through its client's\n\
                  run T + n/1000 + n*s/2^20 seconds (n operations of s bytes on all queue pairs)."
)]
struct Args {
    /// write_bw|read_bw|send_bw|write_lat|read_lat|send_lat|atomic_bw|atomic_lat
    #[arg(long = "test", value_name = "test")]
    test: Option<String>,
    #[command(flatten)]
    device: DeviceFlags,
    #[command(flatten)]
    gid: GidIndex,
    /// message size (default 65536 for bandwidth, 2 for latency tests)
    #[arg(short = 's', long = "size", value_name = "bytes",
          value_parser = cli::number::<usize>(SIZE))]
    size: Option<usize>,
    /// run every size from 2 bytes to 8 MiB (powers of two)
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    all: bool,
    /// operations per size (default 5000 for bandwidth, 1000 for latency)
    #[arg(short = 'n', long = "iters", value_name = "iters",
          value_parser = cli::number::<usize>(ITERS))]
    iters: Option<usize>,
    /// operations in flight, bandwidth tests (default 128)
    #[arg(short = 't', long = "tx-depth", value_name = "depth", hide_default_value = true, default_value = "128",
          value_parser = cli::number::<usize>(TX_DEPTH))]
    tx_depth: usize,
    /// receives posted at a time by the send_bw server (default 512)
    #[arg(short = 'r', long = "rx-depth", value_name = "depth", hide_default_value = true, default_value = "512",
          value_parser = cli::number::<usize>(RX_DEPTH))]
    rx_depth: usize,
    /// largest message sent inline (default: 220 for write_lat, 236 for send_lat — perftest's
    /// defaults — or 0 where the device has no inline support; 0 for the other tests)
    #[arg(short = 'I', long = "inline-size", value_name = "bytes",
          value_parser = cli::number::<u32>(INLINE))]
    inline_size: Option<u32>,
    /// atomic of atomic_bw/atomic_lat: FETCH_AND_ADD (default) or CMP_AND_SWAP
    #[arg(short = 'A', long = "atomic-type", alias = "atomic_type", value_name = "type",
          value_parser = atomic_kind)]
    atomic_type: Option<AtomicKind>,
    /// path MTU (default: the port's active MTU)
    #[arg(short = 'm', long = "mtu", value_name = "bytes", value_parser = mtu)]
    mtu: Option<Mtu>,
    /// QP timeout: the ACK timeout exponent, 4.096 us x 2^N (default 14, as
    /// perftest's -u: a lost packet is retransmitted after 67 ms; the safe
    /// API's own default is 17), with -R too. Transport retries are
    /// perftest's 7.
    #[arg(short = 'u', long = "qp-timeout", alias = "qp_timeout", value_name = "N",
          hide_default_value = true, default_value = "14",
          value_parser = cli::number::<u8>(Limit::new("-u/--qp-timeout", 1, 31)))]
    qp_timeout: u8,
    /// queue pairs, one connection each (bandwidth tests, atomic_bw
    /// included; as perftest's -q, each runs -n operations with -t in flight)
    #[arg(short = 'q', long = "qp", value_name = "N", hide_default_value = true, default_value = "1",
          value_parser = cli::number::<usize>(QPS))]
    qps: usize,
    /// bidirectional: both sides post (bandwidth tests; as perftest's -b,
    /// each side reports the sum of both directions)
    #[arg(short = 'b', long = "bidirectional")]
    bidirectional: bool,
    /// client: drive the -q queue pairs from N threads, each its share on
    /// channels of its own (default 1: one thread polls them all in turn)
    #[arg(long = "threads", value_name = "N", hide_default_value = true, default_value = "1",
          value_parser = cli::number::<usize>(Limit::new("--threads", 1, 64)))]
    threads: usize,
    /// sleep on completion events while waiting (default: busy polling)
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// TCP port to listen on/connect to (default 18515)
    #[arg(short = 'p', long = "port", value_name = "port", hide_default_value = true, default_value = "18515",
          value_parser = cli::number::<u16>(Limit::new("-p/--port", 1, 65535)))]
    port: u16,
    /// one JSON object per size on stdout (other text goes to stderr)
    #[arg(long = "json")]
    json: bool,
    /// client: run the operations through the owned-buffer async API on a
    /// tokio current-thread runtime (write_bw, read_bw, send_bw, write_lat,
    /// read_lat, send_lat); a server serves either client as is
    #[arg(long = "async")]
    asynchronous: bool,
    /// also report the per-operation overhead of the safe API
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// connect through the RDMA connection manager and speak perftest's
    /// `-R` protocol (peer: `ib_<test> -R` or `perf -R`; both sides take the
    /// same -s/-n/-t options, as with perftest)
    #[arg(short = 'R', long = "rdma_cm", alias = "rdma-cm")]
    rdma_cm: bool,
    #[command(flatten)]
    timeout: Timeout,
    /// the test (unless --test is given), then the server to connect to
    #[arg(value_name = "test|host")]
    positionals: Vec<String>,
}

fn atomic_kind(text: &str) -> Result<AtomicKind, String> {
    AtomicKind::parse(text)
        .ok_or_else(|| format!("-A/--atomic-type: `{text}` is not CMP_AND_SWAP or FETCH_AND_ADD"))
}

fn mtu(text: &str) -> Result<Mtu, String> {
    let b = cli::parse_uint(text).ok_or_else(|| format!("-m/--mtu: not a number: `{text}`"))?;
    u32::try_from(b)
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("-m/--mtu: {b} is not an IB MTU"))
}

/// What `perf` runs with.
#[derive(Debug)]
pub(crate) struct Options {
    pub(crate) params: Params,
    pub(crate) server: Option<String>,
    pub(crate) ib_dev: Option<String>,
    pub(crate) ib_port: u8,
    pub(crate) gid_index: Option<u32>,
    pub(crate) mtu: Option<Mtu>,
    /// `-u`: the ACK timeout exponent of the queue pair.
    pub(crate) qp_timeout: u8,
    /// `-R`: perftest's rdma_cm mode ([`crate::rdma_cm`]).
    pub(crate) rdma_cm: bool,
    pub(crate) port: u16,
    pub(crate) json: bool,
    pub(crate) asynchronous: bool,
    pub(crate) verbose: bool,
    pub(crate) timeout: Duration,
    /// `--threads`: threads that drive the client's queue pairs.
    pub(crate) threads: usize,
}

impl Options {
    /// The command line's options; exits with a usage error (status 2) if
    /// it does not parse.
    pub(crate) fn from_command_line() -> Options {
        let args = Args::parse();
        Options::from_args(args)
            .unwrap_or_else(|e| Args::command().error(ErrorKind::ValueValidation, e).exit())
    }

    fn from_args(a: Args) -> Result<Options, String> {
        let mut pos = a.positionals.into_iter();
        let test_name = match a.test {
            Some(t) => t,
            None => pos.next().ok_or_else(|| "no test given".to_owned())?,
        };
        let test = Test::parse(&test_name).ok_or_else(|| format!("unknown test `{test_name}`"))?;
        let server = pos.next();
        if pos.next().is_some() {
            return Err("too many arguments".into());
        }
        let lat = !test.is_bw();
        if a.atomic_type.is_some() && !test.is_atomic() {
            return Err(format!(
                "-A/--atomic-type applies to atomic_bw and atomic_lat, not {test_name}"
            ));
        }
        let sizes = if test.is_atomic() {
            // 64-bit atomics: the size is fixed.
            match (a.all, a.size) {
                (true, _) => {
                    return Err(format!("-a/--all does not apply to {test_name} (8 bytes)"))
                }
                (_, Some(s)) if s != ATOMIC_SIZE => {
                    return Err(format!(
                        "-s/--size: {test_name} operates on {ATOMIC_SIZE} bytes, not {s}"
                    ))
                }
                _ => vec![ATOMIC_SIZE],
            }
        } else if a.all {
            (1..=23).map(|k| 1usize << k).collect()
        } else {
            vec![a.size.unwrap_or(if lat { 2 } else { 65536 })]
        };
        debug_assert!(sizes.iter().all(|&s| s <= MAX_ALL * 64));
        if a.rdma_cm && (a.all || a.asynchronous || a.events) {
            return Err(format!(
                "-R/--rdma_cm runs {test_name} at one size, polling, without --async \
                 (not with -a, -e or --async)"
            ));
        }
        if a.qps > 1 && !test.takes_many_qps() {
            return Err(format!(
                "-q/--qp above 1 applies to the bandwidth tests, not {test_name}"
            ));
        }
        if a.bidirectional && !test.takes_both_directions() {
            return Err(format!(
                "-b/--bidirectional applies to write_bw, read_bw and send_bw, not {test_name}"
            ));
        }
        if (a.qps > 1 || a.bidirectional) && (a.asynchronous || a.events) {
            return Err(
                "-q/--qp above 1 and -b/--bidirectional poll their queue pairs in turn \
                 (not with --async or -e)"
                    .into(),
            );
        }
        if a.threads > a.qps {
            return Err(format!(
                "--threads {} drives -q/--qp queue pairs, {} here: give -q {} or more",
                a.threads, a.qps, a.threads
            ));
        }
        if a.rdma_cm && test == Test::WriteLat && a.iters.is_some_and(|n| n < 2) {
            return Err(
                "-n/--iters: write_lat -R times each write to the next (as perftest): \
                 at least 2"
                    .into(),
            );
        }
        Ok(Options {
            params: Params {
                test,
                sizes,
                iters: a.iters.unwrap_or(if lat { 1000 } else { 5000 }),
                tx_depth: if lat { 1 } else { a.tx_depth },
                rx_depth: a.rx_depth,
                inline: a.inline_size,
                events: a.events,
                atomic: a.atomic_type.unwrap_or_default(),
                qps: a.qps,
                bidirectional: a.bidirectional,
            },
            server,
            ib_dev: a.device.ib_dev,
            ib_port: a.device.ib_port,
            gid_index: a.gid.gid_index,
            mtu: a.mtu,
            qp_timeout: a.qp_timeout,
            rdma_cm: a.rdma_cm,
            port: a.port,
            json: a.json,
            asynchronous: a.asynchronous,
            verbose: a.verbose,
            timeout: a.timeout.timeout,
            threads: a.threads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        let argv = std::iter::once("perf").chain(args.iter().copied());
        Options::from_args(Args::try_parse_from(argv).map_err(|e| e.to_string())?)
    }

    #[test]
    fn perftest_style_flags() {
        let o = parse(&["write_bw", "-s64K", "-ev", "-n", "0x10", "host"]).unwrap();
        assert_eq!(o.params.sizes, [65536]);
        assert!(o.params.events && o.verbose);
        assert_eq!(o.params.iters, 16);
        assert_eq!(o.server.as_deref(), Some("host"));
        let o = parse(&["--test=send_lat", "-I", "0", "--json"]).unwrap();
        assert_eq!((o.params.test, o.params.inline), (Test::SendLat, Some(0)));
        assert_eq!((o.params.sizes[0], o.params.tx_depth), (2, 1));
        assert!(o.json && o.server.is_none());
        assert_eq!(parse(&["read_bw", "-a"]).unwrap().params.sizes.len(), 23);
        let o = parse(&["atomic_bw", "-A", "CMP_AND_SWAP", "host"]).unwrap();
        assert_eq!(o.params.atomic, AtomicKind::CmpAndSwap);
        assert_eq!(
            (o.params.sizes.as_slice(), o.params.tx_depth),
            (&[8][..], 128)
        );
        let o = parse(&["atomic_lat", "-s", "8"]).unwrap();
        assert_eq!(o.params.atomic, AtomicKind::FetchAndAdd);
        assert!(parse(&["atomic_bw", "-R", "-A", "CMP_AND_SWAP"]).is_ok());
        assert!(parse(&["write_lat", "-R", "-n", "1"]).is_err());
        assert!(parse(&["write_lat", "-R", "-n", "2"]).is_ok());
        assert_eq!((o.params.iters, o.params.tx_depth), (1000, 1));
        let o = parse(&["send_bw", "-q", "4", "-b", "-R", "host"]).unwrap();
        assert_eq!((o.params.qps, o.params.bidirectional), (4, true));
        assert!(o.params.many_lanes());
        assert!(!parse(&["write_bw"]).unwrap().params.many_lanes());
        assert_eq!(parse(&["atomic_bw", "-q", "4"]).unwrap().params.qps, 4);
        assert_eq!(
            parse(&["write_bw", "-q", "4", "--threads", "2"])
                .unwrap()
                .threads,
            2
        );
        let e = parse(&["write_bw", "-q", "2", "--threads", "4"]).unwrap_err();
        assert!(
            e.contains("--threads 4 drives -q/--qp queue pairs, 2 here"),
            "{e}"
        );
    }

    #[test]
    fn atomic_tests_are_eight_bytes() {
        let e = parse(&["atomic_bw", "-s", "64"]).unwrap_err();
        assert!(e.contains("operates on 8 bytes, not 64"), "{e}");
        assert!(parse(&["atomic_lat", "-a"])
            .unwrap_err()
            .contains("-a/--all"));
        assert!(parse(&["write_bw", "-A", "FETCH_AND_ADD"]).is_err());
        assert!(parse(&["atomic_bw", "-A", "XOR"]).is_err());
    }

    #[test]
    fn bad_command_lines() {
        for bad in [
            &["write_bw", "-a", "-s", "8"][..],
            &["write_bw", "-s", "0"],
            &["write_bw", "-s", "1T"],
            &["write_bw", "-i", "256"],
            &["write_bw", "-m", "1000"],
            &["write_bw", "-t", "0"],
            &["nope"],
            &[],
            &["write_bw", "a", "b"],
            &["write_bw", "-q"],
            &["write_bw", "-q", "0"],
            &["write_bw", "-q", "65"],
            &["write_lat", "-q", "2"],
            &["atomic_bw", "-b"],
            &["atomic_lat", "-q", "2"],
            &["send_bw", "-b", "--async"],
            &["read_bw", "-q", "2", "-e"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let e = parse(&["write_bw", "-r", "99999"]).unwrap_err();
        assert!(
            e.contains("-r/--rx-depth: 99999 is out of range (1..=16384)"),
            "{e}"
        );
    }
}
