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
//! Tests: `write_bw`, `read_bw`, `send_bw`, `atomic_bw` (bandwidth: `-t` operations in
//! flight, reported as peak and average MB/sec, MB = 2^20 bytes as in
//! perftest, and message rate in Mpps) and `write_lat`, `read_lat`,
//! `send_lat`, `atomic_lat` (one operation at a time, reported as t_min, t_max,
//! t_typical = median, t_avg, t_stdev, 99% and 99.9% percentiles in usec;
//! write and send latency are half a round trip, read and atomic latency a
//! whole operation). The atomic tests run 8-byte fetch-and-add or
//! compare-and-swap (`-A`) on a word the server exposes; see [`atomic`].
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
//! Both print `data verified` at the end, or exit with status 1. Every wait
//! for the peer is bounded (`--timeout`, 30 s by default: the client says
//! `ALIVE` every 250 ms during a run, so a server that only exposes memory
//! waits that long after the last; with `-R`, which has no heartbeat, it
//! allows the client's run the time it takes at a floor rate on top); a
//! quiet wait sleeps on the control connection and ends when the peer
//! closes it ([`watch`]). Every number the client sends is checked against
//! the command line's limits before the server allocates anything
//! ([`protocol`]).
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
//!
//! `-R` (both sides) speaks perftest's rdma_cm protocol instead, so that
//! either side may be `ib_<test> -R` ([`rdma_cm`]).
//!
//! `-q N` (client, or both sides with `-R`) runs the bandwidth tests on N
//! queue pairs, one connection each, `-n` operations with `-t` in flight
//! on each, as perftest's `-q`; `-b` (write_bw, read_bw, send_bw) makes
//! both sides post and each report the sum of both directions, as
//! perftest's `-b`. One thread drives every queue pair's scope in turn
//! ([`multi_qp`]); perf's own protocol checks every lane's bytes
//! ([`own_multi`]) or atomics ([`atomic_multi`]), `-R` speaks perftest's
//! sequence for N queue pairs ([`cm_multi`]).
//!
//! `--async` (client) runs the bandwidth and latency tests through the
//! owned-buffer futures instead ([`asynchronous`]); the server and the
//! output are the same.

mod asynchronous;
mod atomic;
mod atomic_multi;
mod bandwidth;
mod client;
mod cm_exposed;
mod cm_loops;
mod cm_multi;
mod control;
mod latency;
mod measured;
mod multi_plan;
mod multi_qp;
mod multi_threads;
mod options;
mod own_multi;
mod perftest_wire;
mod protocol;
mod rdma_cm;
mod report;
mod server;
mod watch;

use bandwidth::{read_chunks, ring_slots};
use options::Options;
use protocol::{Params, Test};
use rdma_examples::fail;
use rdma_examples::net::{self, Link};
use rdma_examples::{cli, Result};
use rdma_safe::{
    channel::ConnectOptions, Channel, ProtectionDomain, RegisteredBuffer, RemoteMemoryRegion,
};
use report::{Out, RULE};
use std::process::ExitCode;

/// The decoders' fuzzing helpers (test code, shared with the library's
/// tests).
#[cfg(test)]
#[path = "../../fuzz.rs"]
mod fuzz;

fn main() -> ExitCode {
    let opts = Options::from_command_line();
    let result = match &opts.server {
        _ if opts.rdma_cm => rdma_cm::run(&opts),
        Some(host) => client::client(&opts, host),
        None => server::server(&opts),
    };
    cli::finish("perf", result)
}

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

/// Checks message `i` of a send test: its length and immediate data.
/// Inlined into the loops: two comparisons, the message out of line.
#[inline]
fn check_message(i: usize, size: usize, bytes: usize, imm: Option<u32>) -> Result<()> {
    if bytes == size && imm == Some(i as u32) {
        Ok(())
    } else {
        Err(wrong_message(i, size, bytes, imm))
    }
}

/// What [`check_message`] found wrong.
#[cold]
#[inline(never)]
fn wrong_message(i: usize, size: usize, bytes: usize, imm: Option<u32>) -> rdma_safe::Error {
    if bytes != size {
        fail(format!("message {i} has {bytes} bytes, expected {size}"))
    } else {
        fail(format!(
            "message {i} carries immediate {imm:?}: lost or reordered"
        ))
    }
}

/// Everything one side needs: device, channel, buffers.
struct Side {
    channel: Channel,
    /// Local source/target of the side's own operations.
    local: RegisteredBuffer,
    /// Receive buffers (send tests): `slots` slots of `max_size` bytes.
    rx: RegisteredBuffer,
    slots: usize,
    /// The heartbeat the side's loops send (a client of `perf`'s own
    /// protocol during a run; silent otherwise).
    beat: watch::Beat,
}

/// Builds the channel for `p` on `pd`, connects it over `link`, prints the
/// header, and allocates and registers the buffers (`p` is within the
/// protocol's limits; an allocation that fails is an error).
fn setup(
    o: &Options,
    p: &Params,
    pd: &ProtectionDomain,
    link: &mut Link,
    out: &Out,
) -> Result<Side> {
    setup_lane(o, p, pd, link, out, 0)
}

/// [`setup`] for every queue pair of `-q`, in order (both sides connect
/// them in the same order over the one TCP connection).
fn setup_lanes(
    o: &Options,
    p: &Params,
    pd: &ProtectionDomain,
    link: &mut Link,
    out: &Out,
) -> Result<Vec<Side>> {
    (0..p.qps)
        .map(|lane| setup_lane(o, p, pd, link, out, lane))
        .collect()
}

/// [`setup`] of queue pair `lane`: the whole header for the first, one
/// line of addresses for the others.
fn setup_lane(
    o: &Options,
    p: &Params,
    pd: &ProtectionDomain,
    link: &mut Link,
    out: &Out,
    lane: usize,
) -> Result<Side> {
    let qp = perftest_qp(o.qp_timeout, pd)?;
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
            .timeout(o.timeout)
            .connect_options(qp)
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
    let remote = net::handshake(&mut channel, link)?;
    let local_ep = channel.local_endpoint();
    let gid = channel.gid();
    if lane > 0 {
        out.say(&format!(
            " QP {lane}: local QPN {:#08x} PSN {:#08x}  remote QPN {:#08x} PSN {:#08x}",
            local_ep.qp_num, local_ep.psn, remote.qp_num, remote.psn
        ));
    } else {
        out.say(RULE);
        out.say(&format!("                    {}", p.title()));
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
        if p.qps > 1 || p.bidirectional {
            out.say(&format!(
                " Queue pairs: {}  {}",
                p.qps,
                if p.bidirectional {
                    "bidirectional"
                } else {
                    "one way"
                }
            ));
        }
        out.say(RULE);
    }

    let max = p.max_size();
    // read_bw reads each batch into separate chunks (every in-flight read
    // needs its own exclusively borrowed buffer).
    let local_len = match p.test {
        Test::ReadBw => max * read_chunks(usize::MAX, max, p.tx_depth),
        _ => max,
    };
    let local = RegisteredBuffer::new(pd, local_len)
        .map_err(|e| fail(format!("the message buffer (-s): {e}")))?;
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
    let rx = RegisteredBuffer::new(pd, (slots * max).max(1))
        .map_err(|e| fail(format!("the receive slots (-s, -r): {e}")))?;
    Ok(Side {
        channel,
        local,
        rx,
        slots,
        beat: watch::Beat::silent(),
    })
}

/// Sends our region to the peer (rdma-safe's 24-byte encoding).
fn send_region(link: &mut Link, r: &RemoteMemoryRegion) -> Result<()> {
    net::send_region(link, r)
}

/// Receives the peer's region, which must hold `needed` bytes.
fn recv_region(link: &mut Link, needed: usize) -> Result<RemoteMemoryRegion> {
    protocol::check_region(
        net::receive_region(link, "the peer's memory region")?,
        needed,
    )
}

/// The queue pair attributes perftest connects with: ACK timeout `-u`
/// (default 14) and 7 transport retries, so that across a link that drops
/// packets both tools recover from a loss after the same wait (with the
/// safe API's default of 17, a lost read response costs 0.54 s instead of
/// 67 ms: read_bw of 64 KiB across two hosts fell to a quarter, and so did
/// perftest's with `-u 17`); and as many outstanding RDMA reads and
/// atomics as the device allows, perftest's default `-o` (the safe API's
/// 16 held 64 B reads across a link to two thirds of perftest's rate).
fn perftest_qp(qp_timeout: u8, pd: &ProtectionDomain) -> Result<ConnectOptions> {
    let attr = pd.context().query_device()?;
    let clamp = |n: i32| u8::try_from(n.max(1)).unwrap_or(u8::MAX);
    Ok(ConnectOptions {
        timeout: qp_timeout,
        retry_count: 7,
        max_rd_atomic: clamp(attr.max_qp_init_rd_atom()),
        max_dest_rd_atomic: clamp(attr.max_qp_rd_atom()),
        ..ConnectOptions::default()
    })
}
