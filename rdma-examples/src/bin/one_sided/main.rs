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

mod evpl;
mod protocol;

use clap::Parser;
use evpl::{rdma_read, rdma_write, Completions};
use protocol::{CHUNK, DEPTH, IOVS, ROUNDS, SIZE};
use rdma_examples::fail;
use rdma_examples::flags::{DeviceFlags, GidIndex, Timeout};
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Heartbeat, Link};
use rdma_examples::{cli, device, pattern, shared, Result};
use rdma_safe::{
    Channel, GatherElement, ProtectionDomain, RegisteredBuffer, ScatterElement, WorkSuccess,
};
use std::cell::{Cell, RefCell};
use std::process::ExitCode;
use std::time::Instant;

/// The decoders' fuzzing helpers (test code, shared with the library's
/// tests).
#[cfg(test)]
#[path = "../../fuzz.rs"]
mod fuzz;

#[derive(Debug, Parser)]
#[command(
    name = "one_sided",
    override_usage = "one_sided [options]          server: expose a buffer, wait for one client\n       \
                      one_sided [options] <host>   client: RDMA-write and read back the server's buffer"
)]
struct Options {
    #[command(flatten)]
    device: DeviceFlags,
    #[command(flatten)]
    gid: GidIndex,
    /// TCP port to listen on/connect to (default 18517)
    #[arg(short = 'p', long = "port", value_name = "port", hide_default_value = true, default_value = "18517",
          value_parser = cli::number::<u16>(Limit::new("-p/--port", 1, 65535)))]
    port: u16,
    /// server: bytes to expose (default 256K)
    #[arg(long = "size", value_name = "bytes", hide_default_value = true, default_value = "256K",
          value_parser = cli::number::<usize>(SIZE))]
    size: usize,
    /// client: bytes per operation (default 4K; divides the server's size)
    #[arg(long = "chunk", value_name = "bytes", hide_default_value = true, default_value = "4K",
          value_parser = cli::number::<usize>(CHUNK))]
    chunk: usize,
    /// client: local iovecs per operation (default 3)
    #[arg(long = "iovs", value_name = "n", hide_default_value = true, default_value = "3",
          value_parser = cli::number::<usize>(IOVS))]
    iovs: usize,
    /// client: operations in flight (default 16)
    #[arg(long = "depth", value_name = "n", hide_default_value = true, default_value = "16",
          value_parser = cli::number::<usize>(DEPTH))]
    depth: usize,
    /// client: write/read-back rounds (default 3)
    #[arg(short = 'n', long = "rounds", value_name = "n", hide_default_value = true, default_value = "3",
          value_parser = cli::number::<usize>(ROUNDS))]
    rounds: usize,
    #[command(flatten)]
    timeout: Timeout,
    /// the server to connect to (none: be the server)
    #[arg(value_name = "host")]
    host: Option<String>,
}

fn main() -> ExitCode {
    let o = Options::parse();
    let result = match &o.host {
        Some(host) => client(&o, host),
        None => server(&o),
    };
    cli::finish("one_sided", result)
}

/// Builds a channel on `pd` and connects it over `link`.
fn connect(
    o: &Options,
    pd: &ProtectionDomain,
    link: &mut Link,
    depth: u32,
    iovs: u32,
) -> Result<Channel> {
    let mut b = pd
        .channel_builder()
        .port(o.device.ib_port)
        .send_depth(depth)
        .recv_depth(1)
        .max_send_sge(iovs)
        .max_recv_sge(1)
        .timeout(o.timeout.timeout);
    if let Some(g) = o.gid.gid_index {
        b = b.gid_index(g);
    }
    let mut channel = b.build()?;
    net::handshake(&mut channel, link)?;
    Ok(channel)
}

/// The pattern seed the server's buffer starts with (never a round's).
const INITIAL_SEED: u64 = 0xdead_beef;

fn round_seed(round: usize) -> u64 {
    0x5eed_0000 + round as u64
}

// ----- server ------------------------------------------------------------------

fn server(o: &Options) -> Result<()> {
    let size = o.size;
    // Everything that can fail on our side fails before a client is awaited.
    let pd = device::open_checked(
        o.device.ib_dev.as_deref(),
        o.device.ib_port,
        o.gid.gid_index,
    )?;
    // The client writes and reads the buffer only between receiving the
    // region and sending DONE, after its last operation; this side fills it
    // before and checks it after.
    let buffer = shared::expose(&pd, size, "the exposed buffer (--size)")?;
    shared::update(&buffer, 0..size, |b| pattern::fill(b, INITIAL_SEED, 0))?;
    let region = shared::remote(&buffer, size)?;
    let listener =
        net::listen(o.port).map_err(|e| fail(format!("can't listen on port {}: {e}", o.port)))?;
    println!(
        "one_sided: server exposing {size} bytes, waiting on TCP port {}",
        o.port
    );
    let (stream, peer) = listener.accept()?;
    drop(listener);
    let mut link = Link::new(stream, o.timeout.timeout)?;
    let channel = connect(o, &pd, &mut link, 1, 1)?;
    net::send_region(&mut link, &region)?;
    println!(
        "one_sided: client {peer} connected (QP {:#x}); region rkey {:#x}, {} bytes",
        channel.local_endpoint().qp_num,
        region.rkey(),
        region.length()
    );

    let seed = protocol::read_done(&mut link)?;
    // After DONE the client has no operation outstanding.
    let verdict = pattern::check(&shared::copy_out(&buffer, 0..size)?, seed, 0);
    drop(buffer);
    match verdict {
        Ok(()) => {
            link.write_line("OK")?;
            println!("one_sided: server checked its buffer ({size} bytes, pattern {seed:#x})");
            println!("data verified");
            Ok(())
        }
        Err(mismatch) => {
            let why = format!("the server's buffer is wrong after the client's writes: {mismatch}");
            link.write_line(&format!("BAD {why}"))?;
            Err(fail(why))
        }
    }
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
    ) -> impl FnOnce(rdma_safe::Result<WorkSuccess>) + 'a {
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

fn client(o: &Options, host: &str) -> Result<()> {
    let (port, chunk, iovs, depth, rounds) = (o.port, o.chunk, o.iovs, o.depth, o.rounds);
    if chunk < iovs {
        return Err(fail(format!(
            "--chunk {chunk} is smaller than --iovs {iovs}"
        )));
    }

    let pd = device::open_checked(
        o.device.ib_dev.as_deref(),
        o.device.ib_port,
        o.gid.gid_index,
    )?;
    let stream = net::connect(host, port, net::CONNECT_RETRY, o.timeout.timeout)?;
    let mut link = Link::new(stream, o.timeout.timeout)?;
    let mut channel = connect(o, &pd, &mut link, depth as u32, iovs as u32)?;
    let region = net::receive_region(&mut link, "the server's region")?;
    let (remote, size) = protocol::check_region(region, chunk)?;
    let chunks = size / chunk;
    println!(
        "one_sided: connected to {host}:{port} (QP {:#x} -> {:#x}); remote region {size} bytes, rkey {:#x}",
        channel.local_endpoint().qp_num,
        channel.remote_endpoint().map_or(0, |e| e.qp_num),
        remote.rkey()
    );

    // The iovecs: `iovs` source buffers and `iovs` target buffers, each
    // registered on its own; piece j of chunk k lives in buffer j.
    let wparts = split(chunk, iovs, false);
    let rparts = split(chunk, iovs, true);
    let iovecs = |parts: &[usize], what: &str| -> Result<Vec<RegisteredBuffer>> {
        let mut v = Vec::new();
        v.try_reserve_exact(parts.len()).map_err(fail)?;
        for p in parts {
            v.push(
                RegisteredBuffer::new(&pd, p * chunks).map_err(|e| fail(format!("{what}: {e}")))?,
            );
        }
        Ok(v)
    };
    let mut src = iovecs(&wparts, "the source iovecs (the server's region size)")?;
    let mut dst = iovecs(&rparts, "the target iovecs (the server's region size)")?;
    let timeout = channel.timeout();

    // The server hears from us at least every HEARTBEAT until DONE.
    let heartbeat = Heartbeat::start(&link, protocol::HEARTBEAT)?;
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
        channel
            .scope(|s| -> Result<()> {
                // Per chunk: a gather list over the sources, a scatter list over
                // the targets.
                let mut gathers: Vec<Vec<GatherElement<'_>>> =
                    vec![Vec::with_capacity(iovs); chunks];
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
            })
            .map_err(rdma_safe::Error::from)?;
        let elapsed = started.elapsed();

        for (what, t) in [("RDMA write", &writes), ("RDMA read", &reads)] {
            let errors = t.errors.borrow();
            if !errors.is_empty() {
                return Err(fail(format!(
                    "round {round}: {what} failed: {}",
                    errors.join("; ")
                )));
            }
            if t.fired.get() != chunks {
                return Err(fail(format!(
                    "round {round}: {} {what} callbacks fired, expected {chunks}",
                    t.fired.get()
                )));
            }
        }
        for (j, buf) in dst.iter().enumerate() {
            let before: usize = rparts[..j].iter().sum();
            for (k, piece) in buf.chunks(rparts[j]).enumerate() {
                pattern::check(piece, seed, (k * chunk + before) as u64).map_err(|e| {
                    fail(format!(
                        "round {round}: read-back of chunk {k}, iovec {j}: {e}"
                    ))
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

    heartbeat.stop();
    link.write_line(&protocol::done_line(round_seed(rounds - 1)))?;
    protocol::decode_verdict(&link.read_line("the server's verdict")?)?;
    let (posted, completed) = channel.totals();
    if completed > posted {
        return Err(fail(format!("{completed} completions for {posted} posts")));
    }
    println!("one_sided: server verified its buffer ({size} bytes); {posted} operations, {completed} completions");
    println!("data verified");
    Ok(())
}
