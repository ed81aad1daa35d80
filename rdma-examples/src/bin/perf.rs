//! `perf` — bandwidth and latency of RDMA write, RDMA read and send/receive
//! over one reliable connection, in perftest's units, with the data checked
//! at the end of every test.
//!
//! ```text
//! perf write_bw                         server (waits for one client)
//! perf write_bw 10.0.2.15               client
//! perf --test read_lat -a 10.0.2.15     client, every size from 2 B to 8 MiB
//! ```
//!
//! Tests: `write_bw`, `read_bw`, `send_bw` (bandwidth: `-t` operations in
//! flight, reported as peak and average MB/sec, MB = 2^20 bytes as in
//! perftest, and message rate in Mpps) and `write_lat`, `read_lat`,
//! `send_lat` (one operation at a time, reported as t_min, t_max,
//! t_typical = median, t_avg, t_stdev, 99% and 99.9% percentiles in usec;
//! write and send latency are half a round trip, read latency a whole read).
//!
//! The client's test parameters (`-s`/`-a`, `-n`, `-t`, `-r`, `-I`) are
//! sent to the server over the TCP connection, so the server needs only
//! the test name and its device options. Per message size:
//!
//! 1. the server prepares its buffers (zeroes the target, or fills the
//!    source with a pattern; posts receives) and says `GO`;
//! 2. the client runs the test and says `DONE` when its last operation
//!    completed;
//! 3. the server checks the data (RDMA write: its exposed buffer holds the
//!    client's pattern; send: every message arrived in order with the right
//!    length and immediate data, and the receive buffers hold the pattern;
//!    read: its buffer is unchanged) and answers `OK` or `BAD`; the client
//!    checks what it read or received.
//!
//! Both print `data verified` at the end, or exit with status 1.
//!
//! Latency tests send messages of up to 220 (write) or 236 (send) bytes
//! inline by default — perftest's defaults on the devices it recognises; it
//! turns inline off on devices it does not know, rxe among them, so pass
//! `-I 0` to compare like with like there. The latency loops answer as soon
//! as the peer's message is seen: write_lat claims its write's completion
//! after posting it, while the peer works on the answer; send_lat keeps
//! receives posted ahead and claims its last send and re-posts used
//! receives while it waits for the answer (`LatRing`).
//!
//! One-sided tests hand the exposed region over the TCP connection as
//! `RemoteMemoryRegion::to_bytes`. The bandwidth loop keeps `-t`
//! operations in flight inside one `rdma-safe` scope (a `VecDeque` of
//! `ScopedPendingWork`, waiting for the oldest when full); `-v` (and
//! `--json`) add the time spent per post and the time the scope took to
//! end, which is the safe API's own overhead.

use rdma_examples::args::{self, Opt};
use rdma_examples::clock::{self, Stamp};
use rdma_examples::shared::SharedBuffer;
use rdma_examples::stats::{Bandwidth, Latency};
use rdma_examples::{flatten_scope, json, net, open_pd, pattern, BoxError, Result};
use rdma_safe::{
    Channel, GatherElement, Mtu, PollingScope, ReadWorkRequest, ReceiveWorkRequest,
    RegisteredBuffer, RemoteMemoryRegion, ScatterElement, ScopedPendingWork, SendWorkRequest,
    TransportResult, WriteWorkRequest, REMOTE_REGION_ENCODED_LEN,
};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const OPTS: &[Opt] = &[
    Opt::value(
        None,
        "test",
        "test",
        "write_bw|read_bw|send_bw|write_lat|read_lat|send_lat",
    ),
    Opt::value(
        Some('d'),
        "ib-dev",
        "dev",
        "use RDMA device <dev> (default first device found)",
    ),
    Opt::value(
        Some('i'),
        "ib-port",
        "port",
        "use port <port> of the device (default 1)",
    ),
    Opt::value(
        Some('x'),
        "gid-index",
        "index",
        "local GID index (default: the port's RoCE v2 IPv4 GID)",
    ),
    Opt::value(
        Some('s'),
        "size",
        "bytes",
        "message size (default 65536 for bandwidth, 2 for latency tests)",
    ),
    Opt::flag(
        Some('a'),
        "all",
        "run every size from 2 bytes to 8 MiB (powers of two)",
    ),
    Opt::value(
        Some('n'),
        "iters",
        "iters",
        "operations per size (default 5000 for bandwidth, 1000 for latency)",
    ),
    Opt::value(
        Some('t'),
        "tx-depth",
        "depth",
        "operations in flight, bandwidth tests (default 128)",
    ),
    Opt::value(
        Some('r'),
        "rx-depth",
        "depth",
        "receives posted at a time by the send_bw server (default 512)",
    ),
    Opt::value(
        Some('I'),
        "inline-size",
        "bytes",
        "largest message sent inline (default: 220 for write_lat, 236 for send_lat — perftest's \
         defaults — or 0 where the device has no inline support; 0 for the other tests)",
    ),
    Opt::value(
        Some('m'),
        "mtu",
        "bytes",
        "path MTU (default: the port's active MTU)",
    ),
    Opt::flag(
        Some('e'),
        "events",
        "sleep on completion events while waiting (default: busy polling)",
    ),
    Opt::value(
        Some('p'),
        "port",
        "port",
        "TCP port to listen on/connect to (default 18515)",
    ),
    Opt::flag(
        None,
        "json",
        "one JSON object per size on stdout (other text goes to stderr)",
    ),
    Opt::flag(
        Some('v'),
        "verbose",
        "also report the per-operation overhead of the safe API",
    ),
    Opt::flag(Some('h'), "help", "show this help"),
];

const SYNOPSIS: &str = "\
Usage:
  perf [options] <test>            server: wait for one client
  perf [options] <test> <host>     client: run <test> against the server at <host>
  perf [options] --test <test> [<host>]

Tests: write_bw read_bw send_bw write_lat read_lat send_lat
The client's -s/-a/-n/-t/-r/-I/-e are sent to the server; both check the data.";

/// Largest size of `-a`.
const MAX_ALL: usize = 8 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    WriteBw,
    ReadBw,
    SendBw,
    WriteLat,
    ReadLat,
    SendLat,
}

impl Test {
    const ALL: [Test; 6] = [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
    ];

    fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
            Test::SendBw => "send_bw",
            Test::WriteLat => "write_lat",
            Test::ReadLat => "read_lat",
            Test::SendLat => "send_lat",
        }
    }

    fn parse(s: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == s)
    }

    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::SendBw => "Send BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendLat => "Send Latency Test",
        }
    }

    fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }

    /// Whether the server exposes a buffer to the client.
    fn server_exposes(self) -> bool {
        !matches!(self, Test::SendBw | Test::SendLat)
    }

    fn uses_receives(self) -> bool {
        matches!(self, Test::SendBw | Test::SendLat)
    }

    /// Inline size when none is asked for: perftest's values for latency
    /// tests (which it uses on the devices it knows), none for bandwidth.
    fn default_inline(self) -> u32 {
        match self {
            Test::WriteLat => 220,
            Test::SendLat => 236,
            _ => 0,
        }
    }
}

/// Test parameters, decided by the client and sent to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Params {
    test: Test,
    sizes: Vec<usize>,
    iters: usize,
    tx_depth: usize,
    rx_depth: usize,
    /// `None`: the test's default, reduced to 0 where the device refuses.
    inline: Option<u32>,
    events: bool,
}

impl Params {
    fn to_line(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(usize::to_string).collect();
        format!(
            "PERF1 test={} iters={} tx_depth={} rx_depth={} inline={} events={} sizes={}",
            self.test.name(),
            self.iters,
            self.tx_depth,
            self.rx_depth,
            self.inline.map_or("auto".to_owned(), |n| n.to_string()),
            u8::from(self.events),
            sizes.join(",")
        )
    }

    fn from_line(line: &str) -> Result<Params> {
        let mut words = line.split_whitespace();
        if words.next() != Some("PERF1") {
            return Err(format!("not a perf client (got `{line}`)").into());
        }
        let (mut test, mut sizes) = (None, Vec::new());
        let (mut iters, mut tx_depth, mut rx_depth, mut inline) = (0, 0, 0, None);
        let mut events = false;
        for w in words {
            let (k, v) = w.split_once('=').ok_or("malformed parameter")?;
            let num = || v.parse::<usize>().map_err(|_| format!("bad {k}={v}"));
            match k {
                "test" => test = Test::parse(v),
                "iters" => iters = num()?,
                "tx_depth" => tx_depth = num()?,
                "rx_depth" => rx_depth = num()?,
                "inline" if v == "auto" => inline = None,
                "inline" => inline = Some(num()? as u32),
                "events" => events = num()? != 0,
                "sizes" => {
                    for s in v.split(',') {
                        sizes.push(s.parse().map_err(|_| format!("bad size {s}"))?);
                    }
                }
                _ => {} // newer clients may add parameters
            }
        }
        let test = test.ok_or("unknown test in the client's parameters")?;
        if sizes.is_empty() || iters == 0 || tx_depth == 0 || rx_depth == 0 {
            return Err(format!("incomplete parameters `{line}`").into());
        }
        Ok(Params {
            test,
            sizes,
            iters,
            tx_depth,
            rx_depth,
            inline,
            events,
        })
    }

    fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(1).max(1)
    }
}

#[derive(Debug)]
struct Options {
    params: Params,
    server: Option<String>,
    ib_dev: Option<String>,
    ib_port: u8,
    gid_index: Option<u32>,
    mtu: Option<Mtu>,
    port: u16,
    json: bool,
    verbose: bool,
}

fn options(m: &args::Matches) -> Result<Options, args::ArgError> {
    let err = |s: String| args::ArgError(s);
    let mut pos = m.positionals.iter();
    let test_name = match m.value("test") {
        Some(t) => t.to_owned(),
        None => pos
            .next()
            .cloned()
            .ok_or_else(|| err("no test given".into()))?,
    };
    let test = Test::parse(&test_name).ok_or_else(|| err(format!("unknown test `{test_name}`")))?;
    let server = pos.next().cloned();
    if pos.next().is_some() {
        return Err(err("too many arguments".into()));
    }
    let lat = !test.is_bw();
    let sizes = if m.flag("all") {
        if m.value("size").is_some() {
            return Err(err("-a and -s exclude each other".into()));
        }
        (1..=23).map(|k| 1usize << k).collect()
    } else {
        let default = if lat { 2 } else { 65536 };
        vec![m.uint_in("size", default, 1, MAX_ALL as u64 * 64)? as usize]
    };
    let mtu = match m.uint("mtu")? {
        None => None,
        Some(b) => Some(
            Mtu::from_bytes(b as u32).ok_or_else(|| err(format!("--mtu: {b} is not an IB MTU")))?,
        ),
    };
    Ok(Options {
        params: Params {
            test,
            sizes,
            iters: m.uint_in("iters", if lat { 1000 } else { 5000 }, 1, 100_000_000)? as usize,
            tx_depth: if lat {
                1
            } else {
                m.uint_in("tx-depth", 128, 1, 16384)? as usize
            },
            rx_depth: m.uint_in("rx-depth", 512, 1, 16384)? as usize,
            inline: match m.uint("inline-size")? {
                None => None,
                Some(_) => Some(m.uint_in("inline-size", 0, 0, 4096)? as u32),
            },
            events: m.flag("events"),
        },
        server,
        ib_dev: m.value("ib-dev").map(str::to_owned),
        ib_port: m.uint_in("ib-port", 1, 1, 255)? as u8,
        gid_index: m.uint("gid-index")?.map(|g| g as u32),
        mtu,
        port: m.uint_in("port", 18515, 1, 65535)? as u16,
        json: m.flag("json"),
        verbose: m.flag("verbose"),
    })
}

fn main() -> ExitCode {
    let m = match args::parse(OPTS, std::env::args().skip(1)) {
        Ok(m) if m.flag("help") => {
            print!("{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::SUCCESS;
        }
        Ok(m) => m,
        Err(e) => {
            eprintln!("perf: {e}\n\n{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::from(2);
        }
    };
    let opts = match options(&m) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("perf: {e}\n\n{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::from(2);
        }
    };
    let result = match &opts.server {
        Some(host) => client(&opts, host),
        None => server(&opts),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("perf: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where human-readable text goes: stdout, or stderr with `--json`.
struct Out {
    json: bool,
}

impl Out {
    fn say(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
}

const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Seeds of the data patterns: different per size and per writer.
fn seed(size: usize, writer: u64) -> u64 {
    (size as u64) << 8 | writer
}
const BY_CLIENT: u64 = 1;
const BY_SERVER: u64 = 2;

/// The flag byte of write_lat iteration `i`: never 0, never equal for
/// consecutive iterations.
fn mark(i: usize) -> u8 {
    (i % 255) as u8 + 1
}

/// Everything one side needs: device, channel, buffers.
struct Side {
    channel: Channel,
    /// Local source/target of the side's own operations.
    local: RegisteredBuffer,
    /// Receive buffers (send tests): `slots` slots of `max_size` bytes.
    rx: RegisteredBuffer,
    slots: usize,
}

fn setup(o: &Options, p: &Params, stream: &mut TcpStream, out: &Out) -> Result<Side> {
    let pd = open_pd(o.ib_dev.as_deref())?;
    let build = |inline: u32| {
        let mut b = pd
            .channel_builder()
            .port(o.ib_port)
            .send_depth(p.tx_depth as u32)
            .recv_depth(if p.test.uses_receives() {
                p.rx_depth.max(2) as u32
            } else {
                1
            })
            .max_send_sge(1)
            .max_recv_sge(1)
            .max_inline_data(inline)
            .completion_events(p.events);
        if let Some(g) = o.gid_index {
            b = b.gid_index(g);
        }
        if let Some(m) = o.mtu {
            b = b.mtu(m);
        }
        b.build()
    };
    let (mut channel, asked) = match p.inline {
        Some(n) => (build(n)?, n),
        // A device without (enough) inline space refuses the queue pair;
        // the default then falls back to no inline data.
        None => {
            let n = p.test.default_inline();
            match build(n) {
                Ok(c) => (c, n),
                Err(_) => (build(0)?, 0),
            }
        }
    };
    // Providers may grant more than asked (rxe raises 0 to 16); the channel
    // inlines only up to what was asked.
    let inline = channel.capabilities().max_inline_data.min(asked);
    let remote = channel.handshake(stream)?;
    let local_ep = channel.local_endpoint();
    let gid = channel.gid();
    out.say(RULE);
    out.say(&format!("                    {}", p.test.title()));
    out.say(&format!(
        " Device: {}  Port: {}  GID index: {} ({})  MTU: {}",
        pd.context().name(),
        o.ib_port,
        gid.index,
        gid.gid.to_ip(),
        local_ep.mtu.min(remote.mtu).bytes()
    ));
    out.say(&format!(
        " Iterations: {}  TX depth: {}  RX depth: {}  Inline: {}  Completions: {}",
        p.iters,
        p.tx_depth,
        if p.test.uses_receives() {
            p.rx_depth
        } else {
            0
        },
        inline,
        if p.events { "events" } else { "polling" }
    ));
    out.say(&format!(
        " local address:  QPN {:#08x} PSN {:#08x}\n remote address: QPN {:#08x} PSN {:#08x}",
        local_ep.qp_num, local_ep.psn, remote.qp_num, remote.psn
    ));
    out.say(RULE);

    let max = p.max_size();
    // read_bw reads each batch into separate chunks (every in-flight read
    // needs its own exclusively borrowed buffer).
    let local_len = match p.test {
        Test::ReadBw => max * read_chunks(usize::MAX, max, p.tx_depth),
        _ => max,
    };
    let local = RegisteredBuffer::new(&pd, local_len)?;
    // Receive slots: send_bw rotates over up to rx_depth of them (within
    // RING_BYTES; more receives than slots are posted, a slot is reused
    // while an earlier receive into it is still posted: Rust reads none of
    // them until the scope has drained every receive); send_lat receives
    // into one.
    let slots = match p.test {
        Test::SendBw => p.rx_depth.min(ring_slots(max)).clamp(1, p.iters),
        Test::SendLat => 1,
        _ => 0,
    };
    let rx = RegisteredBuffer::new(&pd, (slots * max).max(1))?;
    Ok(Side {
        channel,
        local,
        rx,
        slots,
    })
}

fn send_region(stream: &mut TcpStream, r: &RemoteMemoryRegion) -> Result<()> {
    stream.write_all(&r.to_bytes())?;
    Ok(())
}

fn recv_region(stream: &mut TcpStream) -> Result<RemoteMemoryRegion> {
    let mut b = [0u8; REMOTE_REGION_ENCODED_LEN];
    stream.read_exact(&mut b)?;
    Ok(RemoteMemoryRegion::from_bytes(&b)?)
}

// ----- server ------------------------------------------------------------------

fn server(o: &Options) -> Result<()> {
    let out = Out { json: o.json };
    let listener =
        net::listen(o.port).map_err(|e| format!("can't listen on port {}: {e}", o.port))?;
    out.say(&format!(
        "perf: {} server waiting for a client on TCP port {}",
        o.params.test.name(),
        o.port
    ));
    let (mut stream, peer) = listener.accept()?;
    drop(listener);
    stream.set_nodelay(true)?;
    let p = Params::from_line(&net::read_line(&mut stream)?)?;
    if p.test != o.params.test {
        let why = format!(
            "the client runs {} but this server was started for {}",
            p.test.name(),
            o.params.test.name()
        );
        net::write_line(&mut stream, &format!("ERR {why}"))?;
        return Err(why.into());
    }
    net::write_line(&mut stream, "OK")?;
    out.say(&format!("perf: client {peer}"));
    let mut side = setup(o, &p, &mut stream, &out)?;

    // The exposed buffer (one-sided tests). Declared before its region so
    // that the region is dropped first.
    let mut exposed = SharedBuffer::new(p.max_size());
    let exposed_mr = if p.test.server_exposes() {
        // `exposed_mr` is dropped before `exposed` (declared after it). The
        // client accesses the buffer only between our `GO` and its `DONE`
        // (sent once its last operation has completed); this side creates
        // Rust references to the buffer only outside those windows (in
        // `prepare_exposed` and `verify_exposed`).
        // SAFETY: lifetime and aliasing as just described; inside the windows
        // this side reads the buffer only with atomic single-byte loads.
        let mr = unsafe { exposed.register(side.channel.pd()) }?;
        send_region(&mut stream, &mr.remote())?;
        Some(mr)
    } else {
        None
    };
    let client_region = if p.test == Test::WriteLat {
        Some(recv_region(&mut stream)?)
    } else {
        None
    };

    for &size in &p.sizes {
        let outcome = server_size(
            &p,
            size,
            &mut side,
            &mut exposed,
            client_region,
            &mut stream,
        );
        let (reply, result) = match outcome {
            Ok(()) => (format!("OK {size}"), Ok(())),
            Err(e) => (format!("BAD {size} {e}"), Err(e)),
        };
        // Tell the client either way, then stop on failure.
        let _ = net::write_line(&mut stream, &reply.replace('\n', " "));
        result.map_err(|e| format!("{} bytes: {e}", size))?;
        if o.json {
            println!(
                "{}",
                json::Object::new()
                    .str("test", p.test.name())
                    .str("role", "server")
                    .uint("bytes", size as u64)
                    .uint("iterations", p.iters as u64)
                    .bool("verified", true)
                    .finish()
            );
        }
    }
    net::expect_line(&mut stream, "BYE")?;
    drop(exposed_mr);
    out.say("data verified");
    Ok(())
}

/// One size, server side: prepare, `GO`, serve, wait for `DONE`, verify.
fn server_size(
    p: &Params,
    size: usize,
    side: &mut Side,
    exposed: &mut SharedBuffer,
    client_region: Option<RemoteMemoryRegion>,
    stream: &mut TcpStream,
) -> Result<()> {
    // Preparation: the client is idle (it waits for GO).
    match p.test {
        Test::WriteBw | Test::WriteLat => {
            // SAFETY: the client accesses the buffer only between GO and DONE.
            unsafe { exposed.slice_mut(0..size) }.fill(0);
        }
        Test::ReadBw | Test::ReadLat => {
            // SAFETY: as above.
            pattern::fill(
                unsafe { exposed.slice_mut(0..size) },
                seed(size, BY_SERVER),
                0,
            );
        }
        Test::SendBw | Test::SendLat => side.rx.fill(0),
    }
    pattern::fill(&mut side.local[..size], seed(size, BY_SERVER), 0);

    match p.test {
        Test::WriteBw | Test::ReadBw | Test::ReadLat => {
            net::write_line(stream, &format!("GO {size}"))?;
        }
        Test::SendBw => serve_send_bw(p, size, side, stream)?,
        Test::SendLat => serve_send_lat(p, size, side, stream)?,
        Test::WriteLat => {
            let remote = client_region.ok_or("no client region")?;
            net::write_line(stream, &format!("GO {size}"))?;
            serve_write_lat(p, size, side, exposed, remote)?;
        }
    }
    let done = net::expect_line(stream, "DONE")?;
    if done != size.to_string() {
        return Err(format!("client finished size {done}, expected {size}").into());
    }

    // Verification: the client's operations have all completed.
    let check = |what: &str, data: &[u8], seed: u64| -> Result<()> {
        pattern::check(data, seed, 0).map_err(|m| format!("{what}: {m}").into())
    };
    match p.test {
        Test::WriteBw => check(
            "exposed buffer after RDMA writes",
            // SAFETY: after DONE the client has no operation outstanding.
            unsafe { exposed.slice(0..size) },
            seed(size, BY_CLIENT),
        )?,
        Test::WriteLat => {
            // SAFETY: as above.
            let data = unsafe { exposed.slice(0..size) };
            check(
                "exposed buffer after RDMA writes",
                &data[..size - 1],
                seed(size, BY_CLIENT),
            )?;
            let want = mark(p.iters - 1);
            if data[size - 1] != want {
                return Err(format!(
                    "last byte of the exposed buffer is {:#04x}, expected {want:#04x}",
                    data[size - 1]
                )
                .into());
            }
        }
        Test::ReadBw | Test::ReadLat => check(
            "exposed buffer after RDMA reads (must be unchanged)",
            // SAFETY: as above.
            unsafe { exposed.slice(0..size) },
            seed(size, BY_SERVER),
        )?,
        Test::SendBw | Test::SendLat => {
            let used = side.slots.min(p.iters);
            let stride = p.max_size();
            for slot in 0..used {
                check(
                    &format!("receive buffer {slot}"),
                    &side.rx[slot * stride..slot * stride + size],
                    seed(size, BY_CLIENT),
                )?;
            }
        }
    }
    Ok(())
}

/// send_bw, server side: receives posted in a ring of slots, `GO`, then
/// every message is checked for order (immediate data) and length. Used
/// receives are re-posted in batches (one `ibv_post_recv` call each).
fn serve_send_bw(p: &Params, size: usize, side: &mut Side, stream: &mut TcpStream) -> Result<()> {
    let (iters, slots, stride) = (p.iters, side.slots, p.max_size());
    let (rx_mr, rx) = side.rx.split_mut();
    let refill = batch_size(p.rx_depth);
    flatten_scope(side.channel.scope(|s| -> Result<(), BoxError> {
        let mut lists: Vec<[rdma_safe::ScatterElement<'_>; 1]> = rx
            .chunks_mut(stride)
            .take(slots)
            .map(|c| [rx_mr.scatter_element(&mut c[..size])])
            .collect();
        let mut recvs = VecDeque::with_capacity(p.rx_depth);
        let mut posted = 0;
        while posted < p.rx_depth.min(iters) {
            let n = p.rx_depth.min(iters) - posted;
            posted += post_ring(s, &mut lists, posted, n, &mut recvs)?;
        }
        net::write_line(stream, &format!("GO {size}"))?;
        let mut used = 0;
        for i in 0..iters {
            let got = recvs.pop_front().ok_or("no receive posted")?.wait()?;
            check_message(i, size, got.bytes(), got.immediate())?;
            used += 1;
            if used >= refill && posted < iters {
                let n = post_ring(s, &mut lists, posted, used.min(iters - posted), &mut recvs)?;
                posted += n;
                used -= n;
            }
        }
        Ok(())
    }))
}

/// Posts up to `n` receives, as one batch, into the ring `lists` from slot
/// `posted % lists.len()` on (fewer where the ring wraps); their handles go
/// to the back of `recvs`. Returns how many were posted.
fn post_ring<'scope, 'd: 'scope>(
    s: &mut PollingScope<'scope, '_>,
    lists: &mut [[ScatterElement<'d>; 1]],
    posted: usize,
    n: usize,
    recvs: &mut VecDeque<ScopedPendingWork<'scope>>,
) -> Result<usize> {
    let at = posted % lists.len();
    let n = n.min(lists.len() - at);
    let mut wrs: Vec<ReceiveWorkRequest<'_, 'd>> = lists[at..at + n]
        .iter_mut()
        .map(|l| ReceiveWorkRequest::new(l))
        .collect();
    recvs.extend(s.post_receive_batch(&mut wrs)?);
    Ok(n)
}

fn check_message(i: usize, size: usize, bytes: usize, imm: Option<u32>) -> Result<()> {
    if bytes != size {
        return Err(format!("message {i} has {bytes} bytes, expected {size}").into());
    }
    if imm != Some(i as u32) {
        return Err(format!("message {i} carries immediate {imm:?}: lost or reordered").into());
    }
    Ok(())
}

/// send_lat, server side: answer every ping with a pong.
fn serve_send_lat(p: &Params, size: usize, side: &mut Side, stream: &mut TcpStream) -> Result<()> {
    let (rx_mr, rx) = side.rx.split_mut();
    let rx = &mut rx[..size];
    let (local, local_mr) = (&side.local[..size], side.local.region());
    flatten_scope(side.channel.scope(|s| -> Result<(), BoxError> {
        let mut scatter = [rx_mr.scatter_element(rx)];
        let gather = [local_mr.gather_element(local)];
        let mut ring = LatRing::new(s, &mut scatter, p.iters)?;
        net::write_line(stream, &format!("GO {size}"))?;
        for i in 0..p.iters {
            let got = ring.next_message(s, &mut scatter)?;
            check_message(i, size, got.bytes(), got.immediate())?;
            ring.send(s, &mut scatter, &gather, i as u32)?;
        }
        ring.finish()
    }))
}

/// Receives a send_lat side keeps posted ahead of the message it waits for.
const LAT_RECEIVES_AHEAD: usize = 8;
/// Fewest receives posted when a send goes out (the answer needs one).
const LAT_RECEIVES_MIN: usize = 2;

/// One side of send_lat: its receives (all into the one slot: one message
/// is in flight at a time) and the bookkeeping it owes — the last send's
/// completion to claim, used receives to re-post.
///
/// On rxe the send's system call runs until the peer's answer is nearly
/// there, so whatever a side does between its send and looking for the
/// answer delays it. The bookkeeping is therefore done while the answer has
/// not arrived yet (idle time), and only what a send cannot go without (a
/// free send-queue slot, a receive for the answer) is settled before it.
struct LatRing<'scope> {
    recvs: VecDeque<ScopedPendingWork<'scope>>,
    sent: Option<ScopedPendingWork<'scope>>,
    posted: usize,
    owed: usize,
    iters: usize,
}

impl<'scope> LatRing<'scope> {
    fn new(
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
        iters: usize,
    ) -> Result<Self> {
        let mut ring = LatRing {
            recvs: VecDeque::with_capacity(LAT_RECEIVES_AHEAD),
            sent: None,
            posted: 0,
            owed: LAT_RECEIVES_AHEAD.min(iters),
            iters,
        };
        while ring.repost(s, scatter)? {}
        Ok(ring)
    }

    /// Re-posts one owed receive; false if none is owed.
    fn repost(
        &mut self,
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
    ) -> Result<bool> {
        if self.owed == 0 || self.posted == self.iters {
            return Ok(false);
        }
        self.recvs
            .push_back(s.post_receive(ReceiveWorkRequest::new(scatter))?);
        self.posted += 1;
        self.owed -= 1;
        Ok(true)
    }

    /// Claims the last send's completion, waiting for it; false if there
    /// is none.
    fn claim_send(&mut self) -> Result<bool> {
        match self.sent.take() {
            Some(sent) => sent.wait().map(|_| true).map_err(Into::into),
            None => Ok(false),
        }
    }

    /// Claims the last send's completion if it is there; false if not (or
    /// there is none).
    fn try_claim_send(&mut self) -> Result<bool> {
        match self.sent.take().map(ScopedPendingWork::poll) {
            Some(Ok(outcome)) => outcome.map(|_| true).map_err(Into::into),
            Some(Err(still)) => {
                self.sent = Some(still);
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// Waits for the next message, doing owed bookkeeping while it has not
    /// arrived.
    fn next_message(
        &mut self,
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
    ) -> Result<rdma_safe::WorkSuccess> {
        let mut pending = self.recvs.pop_front().ok_or("no receive posted")?;
        self.owed += 1;
        loop {
            match pending.poll() {
                Ok(outcome) => return Ok(outcome?),
                Err(still) => pending = still,
            }
            if !(self.try_claim_send()? || self.repost(s, scatter)?) {
                // Nothing left to do: a bounded blocking wait.
                return Ok(pending.wait()?);
            }
        }
    }

    /// Sends `gather` with immediate `imm`, after claiming the previous
    /// send (one in flight) and making sure receives wait for the answer.
    fn send(
        &mut self,
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
        gather: &[GatherElement<'scope>],
        imm: u32,
    ) -> Result<()> {
        self.claim_send()?;
        while self.recvs.len() < LAT_RECEIVES_MIN && self.repost(s, scatter)? {}
        self.sent = Some(s.post_send(SendWorkRequest::new(gather).with_immediate(imm))?);
        Ok(())
    }

    /// Claims the last send.
    fn finish(mut self) -> Result<()> {
        self.claim_send().map(|_| ())
    }
}

/// write_lat, server side: wait for the client's write to land (its last
/// byte becomes the iteration's mark), then write back.
fn serve_write_lat(
    p: &Params,
    size: usize,
    side: &mut Side,
    exposed: &SharedBuffer,
    remote: RemoteMemoryRegion,
) -> Result<()> {
    let timeout = side.channel.timeout();
    for i in 0..p.iters {
        wait_for_byte(exposed, size - 1, mark(i), timeout)?;
        side.local[size - 1] = mark(i);
        write_and_claim(side, size, remote)?;
    }
    Ok(())
}

/// One write of `side.local[..size]` to `remote`, claiming its completion
/// before returning (a blocking write: no scope to set up and check per
/// iteration). perftest's latency loop has the same order — answer at once,
/// then poll the send completion while the peer is busy with the answer —
/// which keeps the completion off the critical path.
fn write_and_claim(side: &mut Side, size: usize, remote: RemoteMemoryRegion) -> Result<()> {
    let (local, local_mr) = (&side.local[..size], side.local.region());
    side.channel.write(WriteWorkRequest::new(
        &[local_mr.gather_element(local)],
        remote,
    ))?;
    Ok(())
}

/// Spins until byte `i` of `buf` (written by the peer) equals `want`.
fn wait_for_byte(buf: &SharedBuffer, i: usize, want: u8, timeout: Duration) -> Result<()> {
    // The timeout is checked with the TSC (`Stamp`), once the wait has spun
    // a while: `Instant::now` is a system call and an emulated HPET read on
    // a VM whose clock source is not the TSC, microseconds each.
    let mut start = None;
    let mut spins: u32 = 0;
    while buf.load(i) != want {
        spins = spins.wrapping_add(1);
        if spins & 1023 == 0 {
            if start.get_or_insert_with(Stamp::now).elapsed() > timeout {
                return Err(
                    format!("the peer's RDMA write did not arrive within {timeout:?}").into(),
                );
            }
            if spins & 0xffff == 0 {
                // Both sides spin; on a machine with few CPUs (a VM running
                // rxe) other work on this CPU gets a turn now and then.
                std::thread::yield_now();
            }
        }
        // No PAUSE (`spin_loop`) between loads, as in perftest's own spin:
        // under emulation it leaves translated code on every iteration and
        // the peer's byte is seen late (the same cost the channel's
        // completion wait had, see rdma-safe's poller).
    }
    Ok(())
}

// ----- client ------------------------------------------------------------------

fn client(o: &Options, host: &str) -> Result<()> {
    let out = Out { json: o.json };
    let p = &o.params;
    let mut stream = net::connect(host, o.port, net::CONNECT_RETRY)?;
    net::write_line(&mut stream, &p.to_line())?;
    let answer = net::read_line(&mut stream)?;
    if answer != "OK" {
        return Err(format!("the server refused: {answer}").into());
    }
    let mut side = setup(o, p, &mut stream, &out)?;
    let server_region = if p.test.server_exposes() {
        Some(recv_region(&mut stream)?)
    } else {
        None
    };
    // write_lat: the client exposes a buffer too (declared before its region
    // so that the region is dropped first).
    let mut exposed = SharedBuffer::new(p.max_size());
    let exposed_mr = if p.test == Test::WriteLat {
        // `exposed_mr` is dropped before `exposed`. The server writes the
        // buffer only in answer to our writes, within a size's run; we create
        // references to it only before our first write of a size and after
        // the server's OK for it.
        // SAFETY: lifetime and aliasing as just described; otherwise we read
        // the buffer only with atomic single-byte loads.
        let mr = unsafe { exposed.register(side.channel.pd()) }?;
        send_region(&mut stream, &mr.remote())?;
        Some(mr)
    } else {
        None
    };

    if o.verbose {
        out.say(&clock_cost());
    }
    if p.test.is_bw() {
        out.say(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
    } else {
        out.say(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]");
    }
    for &size in &p.sizes {
        let go = net::expect_line(&mut stream, "GO")?;
        if go != size.to_string() {
            return Err(format!("the server is ready for size {go}, expected {size}").into());
        }
        let report = match p.test {
            Test::WriteBw | Test::ReadBw | Test::SendBw => {
                let r = run_bw(p, o.verbose, size, &mut side, server_region)?;
                Report::Bw(r)
            }
            Test::WriteLat | Test::ReadLat | Test::SendLat => {
                let mut samples = run_lat(p, size, &mut side, server_region, &mut exposed)?;
                Report::Lat(Latency::from_samples(&mut samples).ok_or("no samples")?)
            }
        };
        net::write_line(&mut stream, &format!("DONE {size}"))?;
        let verdict = net::read_line(&mut stream)?;
        if verdict != format!("OK {size}") {
            return Err(format!("the server's data check failed: {verdict}").into());
        }
        // Our own checks, now that the server is idle.
        let mine = match p.test {
            Test::ReadBw | Test::ReadLat => {
                // Every chunk a read landed in (read_bw spreads a batch).
                let chunks = match p.test {
                    Test::ReadBw => read_chunks(side.local.len(), size, p.tx_depth).min(p.iters),
                    _ => 1,
                };
                side.local[..size * chunks]
                    .chunks(size)
                    .enumerate()
                    .try_for_each(|(c, chunk)| {
                        pattern::check(chunk, seed(size, BY_SERVER), 0)
                            .map_err(|m| format!("data read from the server (chunk {c}): {m}"))
                    })
            }
            Test::SendLat => pattern::check(&side.rx[..size], seed(size, BY_SERVER), 0)
                .map_err(|m| format!("replies received from the server: {m}")),
            Test::WriteLat => {
                // SAFETY: after the server's OK it writes nothing until our
                // next write.
                let data = unsafe { exposed.slice(0..size) };
                pattern::check(&data[..size - 1], seed(size, BY_SERVER), 0)
                    .map_err(|m| format!("buffer written by the server: {m}"))
                    .and_then(|()| {
                        (data[size - 1] == mark(p.iters - 1))
                            .then_some(())
                            .ok_or_else(|| "last byte written by the server is wrong".to_owned())
                    })
            }
            Test::WriteBw | Test::SendBw => Ok(()),
        };
        mine.map_err(|e| format!("{size} bytes: {e}"))?;
        print_report(&out, p, size, &report, o.verbose);
    }
    net::write_line(&mut stream, "BYE")?;
    drop(exposed_mr);
    out.say(RULE);
    out.say("data verified");
    Ok(())
}

/// What a timestamp costs here (on a VM without a TSC clocksource,
/// `Instant::now` is a system call).
fn clock_cost() -> String {
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

enum Report {
    Bw(BwRun),
    Lat(Latency),
}

fn print_report(out: &Out, p: &Params, size: usize, r: &Report, verbose: bool) {
    let obj = json::Object::new()
        .str("test", p.test.name())
        .uint("bytes", size as u64)
        .uint("iterations", p.iters as u64);
    match r {
        Report::Bw(b) => {
            if out.json {
                println!(
                    "{}",
                    obj.uint("tx_depth", p.tx_depth as u64)
                        .num("bw_peak_mb_s", b.bw.peak_mb)
                        .num("bw_avg_mb_s", b.bw.avg_mb)
                        .num("msg_rate_mpps", b.bw.mpps)
                        .num("post_ns_avg", b.post_ns_avg)
                        .num("scope_exit_us", b.scope_exit_us)
                        .bool("verified", true)
                        .finish()
                );
                return;
            }
            out.say(&format!(
                " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
                size, p.iters, b.bw.peak_mb, b.bw.avg_mb, b.bw.mpps
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
                println!(
                    "{}",
                    obj.num("t_min_us", l.min)
                        .num("t_max_us", l.max)
                        .num("t_typical_us", l.typical)
                        .num("t_avg_us", l.avg)
                        .num("t_stdev_us", l.stdev)
                        .num("p99_us", l.p99)
                        .num("p99_9_us", l.p999)
                        .bool("verified", true)
                        .finish()
                );
                return;
            }
            out.say(&format!(
                " {:<6} {:<11} {:<14.2} {:<14.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                size, p.iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
            ));
        }
    }
}

/// One bandwidth run as the client saw it.
struct BwRun {
    bw: Bandwidth,
    post_ns_avg: f64,
    scope_exit_us: f64,
}

/// Bandwidth, client side: `tx_depth` operations in flight in one scope.
fn run_bw(
    p: &Params,
    verbose: bool,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
) -> Result<BwRun> {
    let chunks = match p.test {
        Test::ReadBw => read_chunks(side.local.len(), size, p.tx_depth),
        _ => 1,
    };
    let (mr, buf) = side.local.split_mut();
    let buf = &mut buf[..size * chunks];
    match p.test {
        Test::ReadBw => buf.fill(0),
        _ => pattern::fill(buf, seed(size, BY_CLIENT), 0),
    }
    let (iters, depth, test) = (p.iters, p.tx_depth, p.test);
    let _ = clock::ticks_per_sec(); // calibrate before timing
    let origin = Stamp::now();
    let mut tl = Timeline::with_capacity(iters);
    let tl_ref = &mut tl;
    let closure_end = flatten_scope(side.channel.scope(|s| -> Result<Instant, BoxError> {
        match test {
            Test::WriteBw => {
                let remote = remote.ok_or("no remote region")?;
                let g = [mr.gather_element(buf)];
                let batch = vec![WriteWorkRequest::new(&g, remote); batch_size(depth)];
                pump(
                    verbose,
                    tl_ref,
                    origin,
                    iters,
                    depth,
                    size,
                    batch.len(),
                    &mut |_, n| s.post_write_batch(&batch[..n]),
                )?;
            }
            Test::ReadBw => {
                let remote = remote.ok_or("no remote region")?;
                // One exclusive chunk per read of a batch.
                let mut elems: Vec<[ScatterElement<'_>; 1]> = buf
                    .chunks_mut(size)
                    .map(|c| [mr.scatter_element(c)])
                    .collect();
                pump(
                    verbose,
                    tl_ref,
                    origin,
                    iters,
                    depth,
                    size,
                    elems.len(),
                    &mut |_, n| {
                        let mut reqs: Vec<ReadWorkRequest<'_, '_>> = elems[..n]
                            .iter_mut()
                            .map(|e| ReadWorkRequest::new(e, remote))
                            .collect();
                        s.post_read_batch(&mut reqs)
                    },
                )?;
            }
            _ => {
                let g = [mr.gather_element(buf)];
                let mut batch = vec![SendWorkRequest::new(&g); batch_size(depth)];
                pump(
                    verbose,
                    tl_ref,
                    origin,
                    iters,
                    depth,
                    size,
                    batch.len(),
                    &mut |first, n| {
                        for (k, wr) in batch[..n].iter_mut().enumerate() {
                            *wr = SendWorkRequest::new(&g).with_immediate((first + k) as u32);
                        }
                        s.post_send_batch(&batch[..n])
                    },
                )?;
            }
        }
        Ok(Instant::now())
    }))?;
    let scope_exit_us = closure_end.elapsed().as_secs_f64() * 1e6;
    let bw = Bandwidth::from_times(size, &tl.posted, &tl.completed).ok_or("no operations")?;
    Ok(BwRun {
        bw,
        post_ns_avg: if verbose {
            tl.post_time.as_secs_f64() * 1e9 / iters as f64
        } else {
            f64::NAN
        },
        scope_exit_us,
    })
}

/// Post and completion times of a bandwidth run (seconds since its start).
struct Timeline {
    posted: Vec<f64>,
    completed: Vec<f64>,
    post_time: Duration,
}

impl Timeline {
    fn with_capacity(n: usize) -> Self {
        Timeline {
            posted: Vec::with_capacity(n),
            completed: Vec::with_capacity(n),
            post_time: Duration::ZERO,
        }
    }
}

/// The most memory a bandwidth test's rotating buffers span (send_bw's
/// receive slots, read_bw's chunks), but never fewer than two messages —
/// perftest's buffers are two messages (or a page) long. Registering 64 MiB
/// of slots, as before, needed a memlock limit far above the common 8 MiB
/// default; its speed was the same (send_bw 1 MiB / 64 KiB, 8 alternations
/// on rxe: within the runs' ±10% either way).
const RING_BYTES: usize = 2 << 20;

/// Buffers of `size` bytes a rotating ring holds within [`RING_BYTES`]
/// (at least two).
fn ring_slots(size: usize) -> usize {
    (RING_BYTES / size.max(1)).max(2)
}

/// Chunks of `size` bytes read_bw reads a batch into: a batch's worth (the
/// reads of one batch need distinct buffers; later batches reuse them), at
/// most what `local_len` bytes hold, at most [`ring_slots`].
fn read_chunks(local_len: usize, size: usize, depth: usize) -> usize {
    let size = size.max(1);
    batch_size(depth)
        .min(local_len / size)
        .min(ring_slots(size))
        .max(1)
}

/// Requests per batch in the bandwidth loop: one `ibv_post_send` call and
/// one completion per batch (perftest signals every 100th request by
/// default), at most 8, with at least eight batches in flight to keep the
/// pipe full. On rxe, batches of 8 beat batches of 32 at every size (64 B:
/// 1.53 vs 1.17 MB/s, 4 KiB: 15.1 vs 13.6, 64 KiB: 16.2 vs 15.6, median of
/// 4-5 runs at depth 128): the requester stops at 64 packets in flight, and
/// smaller batches keep the queue from draining while the oldest is awaited.
fn batch_size(depth: usize) -> usize {
    (depth / 8).clamp(1, 8)
}

/// The bandwidth loop: keeps up to `depth` operations in flight, posted in
/// batches of up to `batch` (`post(first, n)` posts operations
/// `first..first + n` with one handle), waiting for the oldest batch when
/// full; checks every completion's length. Timestamps are taken per batch
/// (cheap TSC reads, as perftest).
#[allow(clippy::too_many_arguments)]
fn pump<'scope>(
    measure_posts: bool,
    tl: &mut Timeline,
    origin: Stamp,
    iters: usize,
    depth: usize,
    size: usize,
    batch: usize,
    post: &mut dyn FnMut(usize, usize) -> TransportResult<ScopedPendingWork<'scope>>,
) -> Result<()> {
    let mut inflight: VecDeque<(ScopedPendingWork<'scope>, usize)> = VecDeque::with_capacity(depth);
    let (mut next, mut outstanding) = (0, 0);
    while tl.completed.len() < iters {
        while next < iters && outstanding + batch.min(iters - next) <= depth.max(batch) {
            let n = batch.min(iters - next);
            let t0 = Stamp::now();
            inflight.push_back((post(next, n)?, n));
            if measure_posts {
                tl.post_time += t0.elapsed();
            }
            let at = (t0 - origin).as_secs_f64();
            tl.posted.extend(std::iter::repeat_n(at, n));
            next += n;
            outstanding += n;
        }
        let (oldest, n) = inflight.pop_front().expect("an operation is in flight");
        let done = oldest.wait()?;
        let at = (Stamp::now() - origin).as_secs_f64();
        tl.completed.extend(std::iter::repeat_n(at, n));
        outstanding -= n;
        if done.bytes() != size * n {
            return Err(format!(
                "operations {}..{} completed with {} bytes, expected {}",
                tl.completed.len() - n,
                tl.completed.len(),
                done.bytes(),
                size * n
            )
            .into());
        }
    }
    Ok(())
}

/// Latency, client side: one operation at a time; returns samples in usec.
/// The loops keep raw clock ticks (a round trip each, or a read) and convert
/// them afterwards, so that no conversion sits between an answer and the
/// next request.
fn run_lat(
    p: &Params,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
    exposed: &mut SharedBuffer,
) -> Result<Vec<f64>> {
    let iters = p.iters;
    let mut samples: Vec<u64> = Vec::with_capacity(iters);
    // One-way latency is half a round trip (write and send); a read is one.
    let per_sample = if p.test == Test::ReadLat { 1.0 } else { 2.0 };
    match p.test {
        Test::ReadLat => {
            let remote = remote.ok_or("no remote region")?;
            side.local[..size].fill(0);
            let _ = clock::ticks_per_sec();
            for _ in 0..iters {
                let t0 = Stamp::now();
                let (mr, local) = side.local.split_mut();
                side.channel.read(ReadWorkRequest::new(
                    &mut [mr.scatter_element(&mut local[..size])],
                    remote,
                ))?;
                samples.push(Stamp::now().ticks_since(t0));
            }
        }
        Test::WriteLat => {
            let remote = remote.ok_or("no remote region")?;
            let timeout = side.channel.timeout();
            pattern::fill(&mut side.local[..size], seed(size, BY_CLIENT), 0);
            let _ = clock::ticks_per_sec();
            // SAFETY: the server writes our buffer only in answer to our
            // writes of this size, none of which has been posted yet.
            unsafe { exposed.slice_mut(0..size) }.fill(0);
            for i in 0..iters {
                side.local[size - 1] = mark(i);
                let t0 = Stamp::now();
                write_and_claim(side, size, remote)?;
                wait_for_byte(exposed, size - 1, mark(i), timeout)?;
                samples.push(Stamp::now().ticks_since(t0));
            }
        }
        Test::SendLat => {
            pattern::fill(&mut side.local[..size], seed(size, BY_CLIENT), 0);
            let _ = clock::ticks_per_sec();
            side.rx[..size].fill(0);
            let (rx_mr, rx) = side.rx.split_mut();
            let rx = &mut rx[..size];
            let (local, local_mr) = (&side.local[..size], side.local.region());
            let samples_ref = &mut samples;
            flatten_scope(side.channel.scope(|s| -> Result<(), BoxError> {
                let mut scatter = [rx_mr.scatter_element(rx)];
                let gather = [local_mr.gather_element(local)];
                let mut ring = LatRing::new(s, &mut scatter, iters)?;
                for i in 0..iters {
                    let t0 = Stamp::now();
                    ring.send(s, &mut scatter, &gather, i as u32)?;
                    let got = ring.next_message(s, &mut scatter)?;
                    samples_ref.push(Stamp::now().ticks_since(t0));
                    check_message(i, size, got.bytes(), got.immediate())?;
                }
                ring.finish()
            }))?;
        }
        _ => unreachable!("not a latency test"),
    }
    Ok(samples
        .into_iter()
        .map(|t| clock::micros(t) / per_sample)
        .collect())
}
