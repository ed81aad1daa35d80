//! `perf -R -q N` and `perf -R -b`: perftest's rdma_cm mode with many
//! queue pairs or both directions, wire-compatible with `ib_<test> -R -q N`
//! and `-b` of perftest 4.5 (version 6.06), write_bw, read_bw and send_bw
//! (atomic_bw: `-q` only; it goes as write_bw and read_bw do).
//!
//! What changes on the wire against one queue pair one way
//! ([`crate::rdma_cm`]):
//!
//! * one data connection through the CM per queue pair, all made between
//!   the two blank handshakes (the client connects them one after the
//!   other; the server accepts them from its one listener);
//! * the destinations travel once per queue pair, twice over: perftest
//!   exchanges `my_dest[i]` for every `i` before and after connecting
//!   (send_bw: with one handshake between the two rounds, write and read:
//!   with one after), and every later handshake carries `my_dest[0]`;
//! * `-b`: write_bw and read_bw hold one more handshake before the run
//!   (after perftest's warm-up, which posts to our memory), and after the
//!   run both sides exchange their reports and print the sum, as perftest
//!   does; send_bw posts its receives and says "ready" on both sides, then
//!   both send and receive.
//!
//! Each queue pair runs `-n` operations with `-t` in flight (`-r`
//! receives posted), as perftest's; the report counts `-n` × N operations,
//! and its peak and average cover all of them ([`crate::multi_qp`]).
//!
//! Every queue pair's destination names the same exposed memory (one
//! registration in the domain all connections share): perftest's writes
//! and reads from several queue pairs land in one buffer, whose bytes are
//! not checked (`-R` checks statuses and lengths, see [`crate::rdma_cm`]).

use crate::cm_exposed::Exposed;
use crate::cm_loops::run_allowance;
use crate::control::Control;
use crate::multi_qp::{self, Plan, Post, Shape};
use crate::multi_threads;
use crate::options::Options;
use crate::perftest_wire::{Dest, DEST_LEN};
use crate::protocol::Test;
use crate::rdma_cm::{dest, exchange_report, say_clients_report};
use crate::report::{print_report, Out, Report, BW_HEADER, RULE};
use crate::Side;
use rdma_examples::fail;
use rdma_examples::stats::Bandwidth;
use rdma_examples::{pattern, Result};
use rdma_safe::{work::ATOMIC_SIZE, Channel, RegisteredBuffer, RemoteMemoryRegion};
use std::time::{Duration, Instant};

/// What the set-up before the data connections found.
pub(crate) struct SetUp {
    /// The peer's version.
    pub(crate) version: f64,
    /// perftest's cycle buffer (the larger page size of the two sides).
    pub(crate) cycle: usize,
    /// How long the control and data connections took.
    pub(crate) control: Duration,
    pub(crate) data: Duration,
}

/// Runs the rest of a `-R` test with `channels` (one per queue pair)
/// connected, from the destinations on.
pub(crate) fn run(
    o: &Options,
    out: &Out,
    mut ctl: Control,
    channels: Vec<Channel>,
    setup: SetUp,
) -> Result<()> {
    let p = &o.params;
    let size = p.sizes[0];
    let client = o.server.is_some();
    let n = channels.len();
    let send = p.test == Test::SendBw;
    if !p.test.takes_many_qps() {
        return Err(fail(format!(
            "{} runs on one queue pair one way",
            p.test.name()
        )));
    }
    let pd = channels[0].pd().clone();
    let exposed = Exposed::new(&pd, p.test, size, setup.cycle)?;
    let posts = client || p.bidirectional;
    let receives = send && (!client || p.bidirectional);
    let mut sides = Vec::with_capacity(n);
    for channel in channels {
        sides.push(lane_side(channel, p.test, size, p, receives)?);
    }
    let mine: Vec<[u8; DEST_LEN]> = sides
        .iter()
        .map(|s| dest(&s.channel, &exposed).encode())
        .collect();

    // The destinations, every queue pair's, twice (see the module docs).
    // atomic_bw: one word of results per atomic in flight, per lane.
    let results = if p.test == Test::AtomicBw && posts {
        crate::atomic_multi::result_words(&sides, p.tx_depth)?
    } else {
        Vec::new()
    };
    let mut theirs = Vec::with_capacity(n);
    for m in &mine {
        theirs.push(Dest::decode(&ctl.hand_shake(m)?)?);
    }
    if send {
        ctl.hand_shake(&mine[0])?;
    }
    for m in &mine {
        ctl.hand_shake(m)?;
    }
    if !send {
        // After moving to RTR; with -b, after the warm-up.
        ctl.hand_shake(&mine[0])?;
        if p.bidirectional {
            ctl.hand_shake(&mine[0])?;
        }
    }
    header(out, o, &sides, &theirs, &exposed, &setup, client);

    let allowance = run_allowance(p.iters * n, size, o.timeout);
    if !posts && !send {
        // write_bw or read_bw server, one way: the client's "done", then
        // its report.
        say_clients_report(&mut ctl, &mine[0], allowance, out)?;
    } else {
        let plans = theirs
            .iter()
            .enumerate()
            .map(|(lane, d)| {
                let remote = RemoteMemoryRegion::new(d.vaddr, size as u64, d.rkey);
                let post = match (posts, p.test) {
                    (false, _) => Post::Nothing,
                    (true, Test::WriteBw) => Post::Write(remote),
                    (true, Test::ReadBw) => Post::Read(remote),
                    (true, Test::AtomicBw) => {
                        if !d.vaddr.is_multiple_of(ATOMIC_SIZE as u64) {
                            return Err(fail(format!(
                                "the peer's word at {:#x} is not 8-byte aligned",
                                d.vaddr
                            )));
                        }
                        Post::Atomic {
                            kind: p.atomic,
                            remote,
                            results: &results[lane],
                        }
                    }
                    (true, _) => Post::Send,
                };
                Ok(Plan {
                    post,
                    receive: receives,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let shape = Shape {
            size,
            iters: p.iters,
            depth: p.tx_depth,
            rx_depth: p.rx_depth,
            stride: size,
            check_immediate: false,
            timeout: o.timeout,
        };
        let started = Instant::now();
        // send_bw's go-ahead: every receive is posted.
        let mut ready = |ctl: &mut Control| -> Result<()> {
            if send {
                ctl.hand_shake(&mine[0])?;
            }
            Ok(())
        };
        let times = multi_threads::run_lanes_threaded(
            &mut sides, &plans, &shape, o.threads, &mut ctl, &mut ready,
        )?;
        if posts {
            let mut r = multi_qp::bandwidth(size, &times)?;
            let total = p.iters * n;
            if p.bidirectional {
                // Both report; each side prints the sum (perftest's
                // print_full_bw_report with the remote report).
                let peer = exchange_report(&mut ctl, &r.bw, size, total)?;
                r.bw = Bandwidth {
                    peak_mb: r.bw.peak_mb + peer.peak_mb,
                    avg_mb: r.bw.avg_mb + peer.avg_mb,
                    mpps: r.bw.mpps + peer.mpps,
                };
            } else if !send {
                ctl.hand_shake(&mine[0])?;
                exchange_report(&mut ctl, &r.bw, size, total)?;
            }
            out.say(BW_HEADER);
            print_report(out, p, size, &Report::Bw(r), o.verbose);
        }
        if receives && !p.bidirectional {
            let got: usize = times.iter().map(|t| t.received).sum();
            out.say(&format!(
                " received {got} messages of {size} bytes on {n} queue pairs in {:.3} s",
                started.elapsed().as_secs_f64()
            ));
        }
    }
    // ctx_close_connection.
    ctl.exchange_within(&mine[0], allowance)?;
    out.say(RULE);
    Ok(())
}

/// One lane's buffers: the message buffer (read_bw: a batch of chunks) with
/// this side's pattern, and the receive slots when it receives.
fn lane_side(
    channel: Channel,
    test: Test,
    size: usize,
    p: &crate::protocol::Params,
    receives: bool,
) -> Result<Side> {
    let pd = channel.pd().clone();
    let local_len = match test {
        Test::ReadBw => size * crate::bandwidth::read_chunks(usize::MAX, size, p.tx_depth),
        _ => size,
    };
    let mut local = RegisteredBuffer::new(&pd, local_len)
        .map_err(|e| fail(format!("the message buffer (-s): {e}")))?;
    pattern::fill(&mut local, size as u64, 0);
    let slots = if receives {
        p.rx_depth
            .min(crate::bandwidth::ring_slots(size))
            .clamp(1, p.iters)
    } else {
        0
    };
    let rx = RegisteredBuffer::new(&pd, (slots * size).max(1))
        .map_err(|e| fail(format!("the receive buffers (-s, -r): {e}")))?;
    Ok(Side {
        channel,
        local,
        rx,
        slots,
        beat: crate::watch::Beat::silent(),
    })
}

/// The header: device, queue pairs, and every pair's numbers.
fn header(
    out: &Out,
    o: &Options,
    sides: &[Side],
    theirs: &[Dest],
    exposed: &Exposed,
    setup: &SetUp,
    client: bool,
) {
    let p = &o.params;
    let channel = &sides[0].channel;
    out.say(RULE);
    out.say(&format!(
        "                    {} (rdma_cm){}",
        p.title(),
        if p.bidirectional {
            ", bidirectional"
        } else {
            ""
        }
    ));
    out.say(&format!(
        " Device: {}  GID: {}  MTU: {}  peer version: {}  QPs: {}",
        channel.pd().context().name(),
        channel.gid().gid.to_ip(),
        channel.local_endpoint().mtu.bytes(),
        setup.version,
        sides.len()
    ));
    out.say(&format!(
        " local RKey {:#08x} VAddr {:#016x}",
        exposed.remote().rkey(),
        exposed.remote().address()
    ));
    for (side, theirs) in sides.iter().zip(theirs) {
        out.say(&format!(
            " local QPN {:#08x}  remote QPN {:#08x} RKey {:#08x} VAddr {:#016x}",
            side.channel.qp_num(),
            theirs.qpn,
            theirs.rkey,
            theirs.vaddr
        ));
    }
    if client {
        out.say(&format!(
            " rdma_cm set-up [ms]: control {:.3}  data {:.3}  (resolve -> established)",
            setup.control.as_secs_f64() * 1e3,
            setup.data.as_secs_f64() * 1e3
        ));
    }
    out.say(RULE);
}
