//! `one_sided` — libevpl's one-sided pattern on `rdma-safe`: a server
//! exposes a registered buffer; a client RDMA-writes it and reads it back
//! from several local iovecs per operation (multi-SGE gather and scatter
//! lists), with a completion callback per operation, and both sides verify
//! the data.
//!
//! ```text
//! one_sided -d rxe0                      server: expose 256 KiB, wait
//! one_sided -d rxe0 10.0.2.15            client
//! one_sided --size 1M                    server with a bigger buffer
//! one_sided --chunk 8K --iovs 4 -n 10 --depth 32 10.0.2.15
//! ```
//!
//! The server registers its buffer for remote access and hands the client
//! the region (`RemoteMemoryRegion::to_bytes`) over the TCP connection.
//! The client splits the buffer into chunks; per round it
//!
//! 1. writes every chunk with one RDMA WRITE whose gather list takes a
//!    piece from each of `--iovs` separately registered source buffers
//!    (uneven pieces), keeping up to `--depth` writes in flight;
//! 2. once every write's callback has fired, reads every chunk back with one
//!    RDMA READ whose scatter list spreads it over `--iovs` target buffers,
//!    split differently;
//! 3. checks the read-back data against the round's pattern.
//!
//! This mirrors `evpl_rdma_write(evpl, bind, rkey, addr, iov, niov, flags,
//! callback, private)` and `evpl_rdma_read(...)`: [`rdma_write`] and
//! [`rdma_read`] take the remote region, the iovecs and a callback; a small
//! [`Completions`] queue, polled in a loop inside one `rdma-safe` scope,
//! fires the callbacks as completions arrive. The scope is what keeps the
//! iovecs borrowed until the NIC is done with them (libevpl's reference
//! counts), even if a handle were forgotten.
//!
//! Finally the client tells the server `DONE <seed>`; the server checks its
//! whole buffer holds the last round's pattern and answers `OK` or `BAD`.
//! Both print `data verified`, or exit with status 1.

use rdma_examples::args::{self, Opt};
use rdma_examples::shared::SharedBuffer;
use rdma_examples::{flatten_scope, net, open_pd, pattern, BoxError, Result};
use rdma_safe::{
    Channel, GatherElement, PollingScope, ReadWorkRequest, RegisteredBuffer, RemoteMemoryRegion,
    ScatterElement, ScopedPendingWork, TransportResult, WorkSuccess, WriteWorkRequest,
    REMOTE_REGION_ENCODED_LEN,
};
use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const OPTS: &[Opt] = &[
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
        Some('p'),
        "port",
        "port",
        "TCP port to listen on/connect to (default 18517)",
    ),
    Opt::value(
        None,
        "size",
        "bytes",
        "server: bytes to expose (default 256K)",
    ),
    Opt::value(
        None,
        "chunk",
        "bytes",
        "client: bytes per operation (default 4K; divides the server's size)",
    ),
    Opt::value(
        None,
        "iovs",
        "n",
        "client: local iovecs per operation (default 3)",
    ),
    Opt::value(
        None,
        "depth",
        "n",
        "client: operations in flight (default 16)",
    ),
    Opt::value(
        Some('n'),
        "rounds",
        "n",
        "client: write/read-back rounds (default 3)",
    ),
    Opt::flag(Some('h'), "help", "show this help"),
];

const SYNOPSIS: &str = "\
Usage:
  one_sided [options]            server: expose a buffer, wait for one client
  one_sided [options] <host>     client: RDMA-write and read back the server's buffer";

fn main() -> ExitCode {
    let m = match args::parse(OPTS, std::env::args().skip(1)) {
        Ok(m) if m.flag("help") => {
            print!("{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::SUCCESS;
        }
        Ok(m) if m.positionals.len() <= 1 => m,
        Ok(_) => {
            eprintln!(
                "one_sided: too many arguments\n\n{}",
                args::usage(SYNOPSIS, OPTS)
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("one_sided: {e}\n\n{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::from(2);
        }
    };
    let result = match m.positionals.first() {
        Some(host) => client(&m, host),
        None => server(&m),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("one_sided: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the device, builds a channel and connects it over `stream`.
fn connect(
    m: &args::Matches,
    stream: &mut std::net::TcpStream,
    depth: u32,
    iovs: u32,
) -> Result<Channel> {
    let pd = open_pd(m.value("ib-dev"))?;
    let mut b = pd
        .channel_builder()
        .port(m.uint_in("ib-port", 1, 1, 255)? as u8)
        .send_depth(depth)
        .recv_depth(1)
        .max_send_sge(iovs)
        .max_recv_sge(1);
    if let Some(g) = m.uint("gid-index")? {
        b = b.gid_index(g as u32);
    }
    let mut channel = b.build()?;
    channel.handshake(stream)?;
    Ok(channel)
}

/// The pattern seed the server's buffer starts with (never a round's).
const INITIAL_SEED: u64 = 0xdead_beef;

fn round_seed(round: usize) -> u64 {
    0x5eed_0000 + round as u64
}

// ----- server ------------------------------------------------------------------

fn server(m: &args::Matches) -> Result<()> {
    let size = m.uint_in("size", 256 << 10, 1, 1 << 30)? as usize;
    let port = m.uint_in("port", 18517, 1, 65535)? as u16;
    let listener = net::listen(port).map_err(|e| format!("can't listen on port {port}: {e}"))?;
    println!("one_sided: server exposing {size} bytes, waiting on TCP port {port}");
    let (mut stream, peer) = listener.accept()?;
    drop(listener);
    stream.set_nodelay(true)?;
    let channel = connect(m, &mut stream, 1, 1)?;

    let mut buffer = SharedBuffer::new(size);
    // SAFETY: no peer knows the buffer yet.
    pattern::fill(unsafe { buffer.slice_mut(0..size) }, INITIAL_SEED, 0);
    // `region` is dropped before `buffer` (declared after it, and dropped
    // explicitly below). The client writes and reads the buffer only between
    // receiving the region and sending DONE, after its last operation.
    // SAFETY: lifetime as just described; this side creates no reference to
    // the buffer in the client's window.
    let region = unsafe { buffer.register(channel.pd()) }?;
    stream.write_all(&region.remote().to_bytes())?;
    println!(
        "one_sided: client {peer} connected (QP {:#x}); region rkey {:#x}, {} bytes",
        channel.local_endpoint().qp_num,
        region.rkey(),
        region.length()
    );

    let done = net::expect_line(&mut stream, "DONE")?;
    let seed: u64 = done
        .parse()
        .map_err(|_| format!("bad DONE line from the client: `{done}`"))?;
    // SAFETY: after DONE the client has no operation outstanding.
    let verdict = pattern::check(unsafe { buffer.slice(0..size) }, seed, 0);
    drop(region);
    match verdict {
        Ok(()) => {
            net::write_line(&mut stream, "OK")?;
            println!("one_sided: server checked its buffer ({size} bytes, pattern {seed:#x})");
            println!("data verified");
            Ok(())
        }
        Err(mismatch) => {
            let why = format!("the server's buffer is wrong after the client's writes: {mismatch}");
            net::write_line(&mut stream, &format!("BAD {why}"))?;
            Err(why.into())
        }
    }
}

// ----- client: the libevpl-style API ---------------------------------------------

/// A completion callback (libevpl's `void (*callback)(int status, void
/// *private_data)`, with the private data captured by the closure).
pub type Callback<'cb> = Box<dyn FnOnce(TransportResult<WorkSuccess>) + 'cb>;

/// Operations in flight and their callbacks; [`poll`](Self::poll) fires the
/// callbacks of those that completed.
pub struct Completions<'scope, 'cb> {
    pending: Vec<(ScopedPendingWork<'scope>, Callback<'cb>)>,
    depth: usize,
    timeout: Duration,
}

impl std::fmt::Debug for Completions<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions")
            .field("in_flight", &self.pending.len())
            .field("depth", &self.depth)
            .finish()
    }
}

impl<'scope, 'cb> Completions<'scope, 'cb> {
    /// Room for `depth` operations; a stall longer than `timeout` ends in
    /// a bounded wait that shuts the channel down.
    pub fn new(depth: usize, timeout: Duration) -> Self {
        Completions {
            pending: Vec::with_capacity(depth),
            depth,
            timeout,
        }
    }

    /// Operations in flight.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    fn push(&mut self, work: ScopedPendingWork<'scope>, cb: Callback<'cb>) {
        self.pending.push((work, cb));
    }

    /// Polls every operation once; fires the callbacks of the completed
    /// ones (in posting order). Returns how many fired.
    pub fn poll(&mut self) -> usize {
        let mut fired = 0;
        for (work, cb) in std::mem::take(&mut self.pending) {
            match work.poll() {
                Ok(outcome) => {
                    cb(outcome);
                    fired += 1;
                }
                Err(work) => self.pending.push((work, cb)),
            }
        }
        fired
    }

    /// Polls until at most `n` operations are in flight. After `timeout`
    /// without progress the oldest is waited for with the channel's bounded
    /// wait (which, if it expires, shuts the channel down and flushes
    /// everything, so every callback still fires).
    pub fn poll_until(&mut self, n: usize) {
        let mut last_progress = Instant::now();
        while self.pending.len() > n {
            if self.poll() > 0 {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > self.timeout {
                let (work, cb) = self.pending.remove(0);
                cb(work.wait());
                last_progress = Instant::now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Polls until nothing is in flight.
    pub fn drain(&mut self) {
        self.poll_until(0);
    }
}

/// `evpl_rdma_write`: writes the concatenation of `iov` to `remote`;
/// `callback` fires with the outcome. Waits for room if `depth` operations
/// are in flight.
///
/// # Errors
/// The post failed (the callback then does not fire).
pub fn rdma_write<'scope, 'cb>(
    s: &mut PollingScope<'scope, '_>,
    q: &mut Completions<'scope, 'cb>,
    remote: RemoteMemoryRegion,
    iov: &[GatherElement<'scope>],
    callback: impl FnOnce(TransportResult<WorkSuccess>) + 'cb,
) -> TransportResult<()> {
    q.poll_until(q.depth - 1);
    let work = s.post_write(WriteWorkRequest::new(iov, remote))?;
    q.push(work, Box::new(callback));
    Ok(())
}

/// `evpl_rdma_read`: reads `remote` into the iovecs in order; `callback`
/// fires with the outcome. Waits for room if `depth` operations are in
/// flight.
///
/// # Errors
/// The post failed (the callback then does not fire).
pub fn rdma_read<'scope, 'cb>(
    s: &mut PollingScope<'scope, '_>,
    q: &mut Completions<'scope, 'cb>,
    remote: RemoteMemoryRegion,
    iov: &mut [ScatterElement<'scope>],
    callback: impl FnOnce(TransportResult<WorkSuccess>) + 'cb,
) -> TransportResult<()> {
    q.poll_until(q.depth - 1);
    let work = s.post_read(ReadWorkRequest::new(iov, remote))?;
    q.push(work, Box::new(callback));
    Ok(())
}

// ----- client ------------------------------------------------------------------

/// Splits `total` into `n` uneven pieces (weights 1, 2, ..., n, or reversed),
/// each at least one byte.
fn split(total: usize, n: usize, reversed: bool) -> Vec<usize> {
    let weights: Vec<usize> = (1..=n)
        .map(|w| if reversed { n + 1 - w } else { w })
        .collect();
    let sum: usize = weights.iter().sum();
    let mut parts: Vec<usize> = weights.iter().map(|w| (total * w / sum).max(1)).collect();
    let used: usize = parts[..n - 1].iter().sum();
    parts[n - 1] = total - used;
    parts
}

/// What the callbacks record.
#[derive(Default)]
struct Tally {
    fired: Cell<usize>,
    bytes: Cell<u64>,
    errors: RefCell<Vec<String>>,
}

impl Tally {
    /// The callback for operation `what` of `expected` bytes.
    fn callback<'a>(
        &'a self,
        what: String,
        expected: usize,
    ) -> impl FnOnce(TransportResult<WorkSuccess>) + 'a {
        move |outcome| {
            self.fired.set(self.fired.get() + 1);
            match outcome {
                Ok(done) if done.bytes() == expected => {
                    self.bytes.set(self.bytes.get() + done.bytes() as u64);
                }
                Ok(done) => self.errors.borrow_mut().push(format!(
                    "{what}: {} bytes, expected {expected}",
                    done.bytes()
                )),
                Err(e) => self.errors.borrow_mut().push(format!("{what}: {e}")),
            }
        }
    }
}

fn client(m: &args::Matches, host: &str) -> Result<()> {
    let port = m.uint_in("port", 18517, 1, 65535)? as u16;
    let chunk = m.uint_in("chunk", 4096, 1, 1 << 30)? as usize;
    let iovs = m.uint_in("iovs", 3, 1, 16)? as usize;
    let depth = m.uint_in("depth", 16, 1, 4096)? as usize;
    let rounds = m.uint_in("rounds", 3, 1, 1_000_000)? as usize;
    if chunk < iovs {
        return Err(format!("--chunk {chunk} is smaller than --iovs {iovs}").into());
    }

    let mut stream = net::connect(host, port, net::CONNECT_RETRY)?;
    let mut channel = connect(m, &mut stream, depth as u32, iovs as u32)?;
    let mut rb = [0u8; REMOTE_REGION_ENCODED_LEN];
    stream.read_exact(&mut rb)?;
    let remote = RemoteMemoryRegion::from_bytes(&rb)?;
    let size = usize::try_from(remote.length())?;
    if size % chunk != 0 {
        return Err(
            format!("the server's {size} bytes are not a multiple of --chunk {chunk}").into(),
        );
    }
    let chunks = size / chunk;
    println!(
        "one_sided: connected to {host}:{port} (QP {:#x} -> {:#x}); remote region {size} bytes, rkey {:#x}",
        channel.local_endpoint().qp_num,
        channel.remote_endpoint().map_or(0, |e| e.qp_num),
        remote.rkey()
    );

    // The iovecs: `iovs` source buffers and `iovs` target buffers, each
    // registered on its own; piece j of chunk k lives in buffer j.
    let pd = channel.pd().clone();
    let wparts = split(chunk, iovs, false);
    let rparts = split(chunk, iovs, true);
    let mut src = wparts
        .iter()
        .map(|p| RegisteredBuffer::new(&pd, p * chunks))
        .collect::<Result<Vec<_>, _>>()?;
    let mut dst = rparts
        .iter()
        .map(|p| RegisteredBuffer::new(&pd, p * chunks))
        .collect::<Result<Vec<_>, _>>()?;
    let timeout = channel.timeout();

    for round in 0..rounds {
        let seed = round_seed(round);
        for (j, buf) in src.iter_mut().enumerate() {
            let before: usize = wparts[..j].iter().sum();
            for (k, piece) in buf.chunks_mut(wparts[j]).enumerate() {
                pattern::fill(piece, seed, (k * chunk + before) as u64);
            }
        }
        for buf in dst.iter_mut() {
            buf.fill(0);
        }

        let writes = Tally::default();
        let reads = Tally::default();
        let started = Instant::now();
        let (src_ref, dst_ref) = (&src, &mut dst);
        let (wt, rt) = (&writes, &reads);
        flatten_scope(channel.scope(|s| -> Result<(), BoxError> {
            // Per chunk: a gather list over the sources, a scatter list over
            // the targets.
            let mut gathers: Vec<Vec<GatherElement<'_>>> = vec![Vec::with_capacity(iovs); chunks];
            for (j, buf) in src_ref.iter().enumerate() {
                for (k, piece) in buf.chunks(wparts[j]).enumerate() {
                    gathers[k].push(buf.region().gather_element(piece));
                }
            }
            let mut scatters: Vec<Vec<ScatterElement<'_>>> =
                (0..chunks).map(|_| Vec::with_capacity(iovs)).collect();
            for (j, buf) in dst_ref.iter_mut().enumerate() {
                let (mr, bytes) = buf.split_mut();
                for (k, piece) in bytes.chunks_mut(rparts[j]).enumerate() {
                    scatters[k].push(mr.scatter_element(piece));
                }
            }

            let mut q = Completions::new(depth, timeout);
            for (k, iov) in gathers.iter().enumerate() {
                let target = remote.slice((k * chunk) as u64, chunk as u64)?;
                rdma_write(
                    s,
                    &mut q,
                    target,
                    iov,
                    wt.callback(format!("write {k}"), chunk),
                )?;
            }
            q.drain();
            // Reads start once every write's callback has fired.
            for (k, iov) in scatters.iter_mut().enumerate() {
                let source = remote.slice((k * chunk) as u64, chunk as u64)?;
                rdma_read(
                    s,
                    &mut q,
                    source,
                    iov,
                    rt.callback(format!("read {k}"), chunk),
                )?;
            }
            q.drain();
            Ok(())
        }))?;
        let elapsed = started.elapsed();

        for (what, t) in [("RDMA write", &writes), ("RDMA read", &reads)] {
            let errors = t.errors.borrow();
            if !errors.is_empty() {
                return Err(format!("round {round}: {what} failed: {}", errors.join("; ")).into());
            }
            if t.fired.get() != chunks {
                return Err(format!(
                    "round {round}: {} {what} callbacks fired, expected {chunks}",
                    t.fired.get()
                )
                .into());
            }
        }
        for (j, buf) in dst.iter().enumerate() {
            let before: usize = rparts[..j].iter().sum();
            for (k, piece) in buf.chunks(rparts[j]).enumerate() {
                pattern::check(piece, seed, (k * chunk + before) as u64).map_err(|e| {
                    format!("round {round}: read-back of chunk {k}, iovec {j}: {e}")
                })?;
            }
        }
        println!(
            "round {}: {chunks} RDMA writes (iovecs {wparts:?}) + {chunks} RDMA reads (iovecs {rparts:?}), \
             {} callbacks, {} bytes in {:.1} ms; read-back verified",
            round + 1,
            writes.fired.get() + reads.fired.get(),
            writes.bytes.get() + reads.bytes.get(),
            elapsed.as_secs_f64() * 1e3
        );
    }

    net::write_line(&mut stream, &format!("DONE {}", round_seed(rounds - 1)))?;
    let verdict = net::read_line(&mut stream)?;
    if verdict != "OK" {
        return Err(format!("the server's check failed: {verdict}").into());
    }
    let (posted, completed) = channel.totals();
    if completed > posted {
        return Err(format!("{completed} completions for {posted} posts").into());
    }
    println!("one_sided: server verified its buffer ({size} bytes); {posted} operations, {completed} completions");
    println!("data verified");
    Ok(())
}
