//! `rstream` — librdmacm's stream benchmark (rdmacm-utils' `rstream`) on
//! this workspace's byte stream: the same command line, the same test,
//! the same output, so either side may be the C program and a reader of
//! its output (`cargo xtask bench`'s stream rows) reads ours alike.
//!
//! ```text
//! rstream -b 10.0.2.15 -S 4096 -C 10000          server
//! rstream -s 10.0.2.15 -S 4096 -C 10000          client
//! rstream -s 10.0.2.15 -S 64 -C 1 -I 5000 -T v   client: ping-pong, verified
//! ```
//!
//! The test (rstream's "custom" test, which any of `-S size`, `-C count`,
//! `-I iterations` selects): after a 16-byte exchange, `iterations` times
//! the client writes `count` transfers of `size` bytes and the server
//! writes as many back. Both print rstream's header and result line:
//! total bytes both ways, seconds, Gb/sec (10^9 bit/s of both directions)
//! and usec per transfer (for `-C 1`, half a round trip). Without any of
//! the three, rstream's series: a latency test per size on one connection
//! (64 B, 4 KiB, 64 KiB, 1 MiB; `-S all`: 64 B..6 MiB), then a bandwidth
//! test per size on a second one. `-T v` fills and checks every byte as
//! rstream does ([`xfer`]); the output's layout is [`report`]'s.
//!
//! Over RDMA the connection is `rdma_safe::stream` (rsocket's protocol;
//! its reads and writes wait spinning, then yielding, as rstream's
//! non-blocking default spins); `-T s` runs the same test over TCP
//! ([`conn`]). Options rstream has and this program does not implement are
//! refused with a message: `-T a` (poll), `-T f` (fork), `-k`
//! (keepalive), `-f gid`, `-b` on a client, and `-B`/`-i` other than the
//! stream's fixed 512 KiB ring and 64-byte inline size (rstream's
//! defaults). `-T b`, `-T n` and `-T r` change nothing here: every wait
//! blocks, bounded by `--timeout` (ours alone; rstream waits for ever).

mod conn;
mod report;
mod xfer;

use clap::Parser;
use conn::{Server, Stream, Transport};
use rdma_examples::limit::Limit;
use rdma_examples::{cli, fail, Result};
use report::Shape;
use std::process::ExitCode;
use std::time::Duration;
use xfer::{Counts, Side};

/// `-S`: rstream allocates what it is given; here up to 64 MiB.
const SIZE: Limit = Limit::new("-S", 1, 64 << 20);
/// `-C` and `-I`.
const COUNT: Limit = Limit::new("-C", 1, u32::MAX as u64);
const ITERATIONS: Limit = Limit::new("-I", 1, u32::MAX as u64);
/// The stream's receive ring (`rdma_safe::stream`), rstream's default
/// `-B`, and its inline size, rstream's default `-i`.
const RING_BYTES: u64 = 1 << 19;
const INLINE: u64 = 64;

/// librdmacm's stream benchmark over this workspace's rsocket-compatible
/// byte stream; the options are rstream's.
#[derive(Debug, Parser)]
#[command(
    name = "rstream",
    override_usage = "rstream [-b bind_address] [-p port] [-S size|all] [-C count] [-I iterations] [-T option]...\n       \
                      rstream -s server_address [-p port] [-S size|all] [-C count] [-I iterations] [-T option]..."
)]
struct Options {
    /// server address (run as the client)
    #[arg(short = 's', value_name = "server_address")]
    server: Option<String>,
    /// address to listen on (server; default every address)
    #[arg(short = 'b', value_name = "bind_address")]
    bind: Option<String>,
    /// address format: name, ip, ipv6 (gid is not supported)
    #[arg(short = 'f', value_name = "address_format")]
    format: Option<String>,
    /// socket buffer size (only the stream's 524288 is accepted)
    #[arg(short = 'B', value_name = "buffer_size",
          value_parser = cli::number::<u64>(Limit::new("-B", 1, u32::MAX as u64)))]
    buffer: Option<u64>,
    /// inline size (only the stream's 64 is accepted)
    #[arg(short = 'i', value_name = "inline_size",
          value_parser = cli::number::<u64>(Limit::new("-i", 0, u32::MAX as u64)))]
    inline: Option<u64>,
    /// iterations (custom test; default 1)
    #[arg(short = 'I', value_name = "iterations", value_parser = cli::number::<u64>(ITERATIONS))]
    iterations: Option<u64>,
    /// transfers per iteration and direction (custom test; default 1000)
    #[arg(short = 'C', value_name = "transfer_count", value_parser = cli::number::<u64>(COUNT))]
    count: Option<u64>,
    /// transfer size in bytes (custom test; default 1000), or `all`
    #[arg(short = 'S', value_name = "transfer_size")]
    size: Option<String>,
    /// port
    #[arg(short = 'p', value_name = "port", default_value = "7471",
          value_parser = cli::number::<u16>(Limit::new("-p", 0, 65535)))]
    port: u16,
    /// keepalive time (not supported)
    #[arg(short = 'k', value_name = "keepalive_time")]
    keepalive: Option<String>,
    /// s: TCP sockets; v: verify the data; b, n, r: accepted, no effect
    #[arg(short = 'T', value_name = "test_option", action = clap::ArgAction::Append)]
    test: Vec<String>,
    /// bound on every wait, in seconds (ours only; rstream has none)
    #[arg(long = "timeout", value_name = "SECS", default_value = "60", value_parser = cli::timeout)]
    timeout: Duration,
}

/// What the options ask for.
#[derive(Debug)]
struct Plan {
    transport: Transport,
    verify: bool,
    /// `None`: rstream's series; `Some`: its custom test.
    custom: Option<Shape>,
    /// `-S all`: the series' sizes between the powers of two too.
    all_sizes: bool,
}

/// One `-T` option's effect on `plan`, in rstream's spellings (one
/// letter, or a word's prefix as rstream compares them).
fn test_option(plan: &mut Plan, arg: &str) -> Result<()> {
    let word = arg.to_ascii_lowercase();
    let is =
        |letter: &str, name: &str| word == letter || (word.len() > 1 && word.starts_with(name));
    if is("s", "socket") {
        plan.transport = Transport::Tcp;
    } else if is("v", "verify") {
        plan.verify = true;
    } else if is("b", "block") || is("n", "nonblock") || is("r", "resolve") {
        // Every wait here blocks, bounded; addresses resolve alike.
    } else if is("a", "async") || is("f", "fork") {
        return Err(fail(format!("-T {arg}: not supported by this rstream")));
    } else {
        return Err(fail(format!("-T {arg}: unknown test option")));
    }
    Ok(())
}

/// Checks the options and makes the plan.
fn plan(o: &Options) -> Result<Plan> {
    let mut p = Plan {
        transport: Transport::Rdma,
        verify: false,
        custom: None,
        all_sizes: false,
    };
    for t in &o.test {
        test_option(&mut p, t)?;
    }
    if o.keepalive.is_some() {
        return Err(fail("-k: keepalive is not supported by this rstream"));
    }
    if let Some(f) = &o.format {
        if f.to_ascii_lowercase().starts_with("gid") {
            return Err(fail("-f gid: AF_IB addresses are not supported"));
        }
    }
    if o.server.is_some() && o.bind.is_some() {
        return Err(fail("-b with -s: a client's own address cannot be chosen"));
    }
    if o.buffer.is_some_and(|b| b != RING_BYTES) {
        return Err(fail(format!(
            "-B: the stream's buffers are {RING_BYTES} bytes (rstream's default) and cannot be changed"
        )));
    }
    if o.inline.is_some_and(|i| i != INLINE) {
        return Err(fail(format!(
            "-i: the stream inlines {INLINE} bytes (rstream's default) and cannot be changed"
        )));
    }
    let size = match o.size.as_deref() {
        Some(s) if s.to_ascii_lowercase().starts_with("all") => {
            p.all_sizes = true;
            None
        }
        Some(s) => Some(SIZE.parse(s).map_err(fail)? as usize),
        None => None,
    };
    if size.is_some() || o.count.is_some() || o.iterations.is_some() {
        p.custom = Some(Shape {
            name: "custom".into(),
            size: size.unwrap_or(1000),
            count: o.count.unwrap_or(1000),
            iterations: o.iterations.unwrap_or(1),
        });
    }
    Ok(p)
}

/// rstream's series: 64 B, 4 KiB, 64 KiB and 1 MiB; with `-S all`, 64 B
/// and then every power of two from 128 B to 4 MiB and the size halfway
/// to the next (up to 6 MiB).
fn series_sizes(all: bool) -> Vec<usize> {
    if !all {
        return vec![64, 4 << 10, 64 << 10, 1 << 20];
    }
    std::iter::once(64)
        .chain((7..=22).flat_map(|e| [1usize << e, (1 << e) + (1 << (e - 1))]))
        .collect()
}

/// rstream's repetitions for a size: fewer as sizes grow.
fn size_to_count(size: usize) -> u64 {
    match size {
        s if s >= 1 << 20 => 100,
        s if s >= 1 << 16 => 1000,
        s if s >= 1 << 10 => 10000,
        _ => 100000,
    }
}

/// The series' latency test at `size`: one transfer per iteration.
fn latency_shape(size: usize) -> Shape {
    Shape {
        name: format!("{}_lat", series_name(size)),
        size,
        count: 1,
        iterations: size_to_count(size),
    }
}

/// The series' bandwidth test at `size`: one iteration of many transfers.
fn bandwidth_shape(size: usize) -> Shape {
    Shape {
        name: format!("{}_bw", series_name(size)),
        size,
        count: size_to_count(size),
        iterations: 1,
    }
}

/// The size in a series test's name (rstream keeps 4 characters).
fn series_name(size: usize) -> String {
    report::size_text(size as u64).chars().take(4).collect()
}

fn main() -> ExitCode {
    let o = Options::parse();
    cli::finish("rstream", plan(&o).and_then(|p| run(&o, &p)))
}

/// Prints the header, connects (client) or listens and accepts (server)
/// and runs the tests of `p`.
fn run(o: &Options, p: &Plan) -> Result<()> {
    let timeout = o.timeout;
    let server = match &o.server {
        Some(_) => None,
        None => {
            let host = o.bind.as_deref().unwrap_or("0.0.0.0");
            Some(Server::bind(p.transport, host, o.port, timeout)?)
        }
    };
    // Printed once the server listens: a script may wait for it.
    println!("{}", report::header());
    let connect = || -> Result<Stream> {
        match (&server, &o.server) {
            (Some(l), _) => l.accept(timeout),
            (None, Some(host)) => conn::connect(p.transport, host, o.port, timeout),
            (None, None) => unreachable!("a client has a server address"),
        }
    };
    let client = server.is_none();
    let mut counts = Counts::default();
    let tests: Vec<Vec<Shape>> = match &p.custom {
        Some(shape) => vec![vec![shape.clone()]],
        None => {
            let sizes = series_sizes(p.all_sizes);
            vec![
                sizes.iter().map(|&s| latency_shape(s)).collect(),
                sizes.iter().map(|&s| bandwidth_shape(s)).collect(),
            ]
        }
    };
    let largest = tests.iter().flatten().map(|s| s.size).max().unwrap_or(0);
    let mut buf = vec![0u8; largest.max(16)];
    // One connection per group, as rstream: its series connects once for
    // the latency tests and once for the bandwidth tests.
    for group in &tests {
        let mut stream = connect()?;
        let mut side = Side {
            stream: &mut stream,
            client,
            verify: p.verify,
            counts: &mut counts,
            buf: &mut buf,
        };
        for shape in group {
            let took = side.run(shape)?;
            println!("{}", shape.result_line(took));
        }
        stream.close();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(words: &[&str]) -> Options {
        Options::try_parse_from([&["rstream"], words].concat()).expect("rstream's options")
    }

    #[test]
    fn the_custom_test_and_its_defaults() {
        let p = plan(&options(&[
            "-s",
            "10.0.2.15",
            "-S",
            "64",
            "-C",
            "1",
            "-I",
            "5000",
        ]))
        .unwrap();
        assert_eq!(p.transport, Transport::Rdma);
        let shape = p.custom.expect("custom");
        assert_eq!((shape.size, shape.count, shape.iterations), (64, 1, 5000));
        let shape = plan(&options(&["-C", "20"])).unwrap().custom.unwrap();
        assert_eq!((shape.size, shape.count, shape.iterations), (1000, 20, 1));
        let p = plan(&options(&["-T", "s", "-T", "verify", "-S", "4k"])).unwrap();
        assert_eq!((p.transport, p.verify), (Transport::Tcp, true));
        assert_eq!(p.custom.unwrap().size, 4096);
        assert!(plan(&options(&[])).unwrap().custom.is_none(), "the series");
    }

    #[test]
    fn what_this_rstream_lacks_is_refused() {
        for words in [
            &["-T", "a"][..],
            &["-T", "fork"],
            &["-T", "x"],
            &["-k", "10"],
            &["-f", "gid"],
            &["-B", "4096"],
            &["-i", "0"],
            &["-s", "10.0.2.15", "-b", "10.0.2.15"],
            &["-S", "0"],
        ] {
            assert!(plan(&options(words)).is_err(), "{words:?}");
        }
        // rstream's own defaults, spelled out, are fine.
        assert!(plan(&options(&[
            "-B", "524288", "-i", "64", "-T", "b", "-f", "ip"
        ]))
        .is_ok());
    }

    #[test]
    fn the_series_is_rstreams() {
        assert_eq!(series_sizes(false), [64, 4096, 65536, 1 << 20]);
        let all = series_sizes(true);
        assert_eq!(&all[..4], &[64, 128, 192, 256]);
        assert_eq!(all.last(), Some(&(6 << 20)));
        assert_eq!(all.len(), 33);
        assert_eq!(latency_shape(64).name, "64_lat");
        assert_eq!(latency_shape(64).iterations, 100000);
        let bw = bandwidth_shape(3 << 19);
        assert_eq!((bw.name.as_str(), bw.count), ("1.5m_bw", 100));
        assert_eq!(bandwidth_shape(65536).count, 1000);
    }
}
