//! `perf`'s own protocol with many queue pairs (`-q N`) or both directions
//! (`-b`), both sides, every byte checked.
//!
//! The sides connect `-q` queue pairs over the one TCP connection, in order
//! (one `handshake` each). Each queue pair (a *lane*, driven by
//! [`crate::multi_qp`]) has its own part of the exposed memory and its own
//! data pattern, so that the check proves every lane moved its own bytes:
//! lane `i` writes or reads bytes `i·size..(i+1)·size` of the peer's
//! exposed buffer (`-q` × the largest size), and sends the pattern of lane
//! `i`, its messages numbered from 0 in the immediate data.
//!
//! Per size, on top of the one-lane protocol ([`crate::protocol`]):
//!
//! 1. the server prepares (zeroes or fills its parts, zeroes its receive
//!    slots) and posts its receives; the client, idle, prepares what the
//!    server will touch (`-b`);
//! 2. the server says `GO <size>`; with `-b` on send_bw the client answers
//!    `READY <size>` once its receives are posted too, and the server
//!    starts sending only then;
//! 3. both run their lanes; the client says `DONE <size>` when its last
//!    operation has completed; the server, its own run over, checks its
//!    side and answers `OK <size>` (with `-b` followed by
//!    `BW <peak> <avg> <mpps>`, its own measurement, which the client adds
//!    to its own as perftest's `-b` report does) or `BAD <size> <why>`;
//! 4. the client checks what it read, received, or what the server wrote
//!    or left unchanged in its exposed buffer (`-b`).

use crate::bandwidth::{read_chunks, BwRun};
use crate::multi_qp::{self, Plan, Post, Shape};
use crate::multi_threads;
use crate::options::Options;
use crate::protocol::{self, Params, Test};
use crate::report::{self, clock_cost, print_report, Out, Report, BW_HEADER, RULE};
use crate::watch;
use crate::{recv_region, seed, send_region, Side, BY_CLIENT, BY_SERVER};
use rdma_examples::fail;
use rdma_examples::net::{self, Link};
use rdma_examples::stats::Bandwidth;
use rdma_examples::{pattern, shared, Result};
use rdma_safe::{RemoteAccessBuffer, RemoteMemoryRegion};
use std::time::Duration;

/// The pattern seed of lane `lane`'s data written by `writer` at `size`
/// (sizes stay below 2^30, so the lane's bits never meet the size's).
fn lane_seed(size: usize, writer: u64, lane: usize) -> u64 {
    seed(size, writer) | (lane as u64) << 40
}

/// The client: runs every size of `p` on `sides` (one per queue pair).
pub(crate) fn client(o: &Options, mut sides: Vec<Side>, link: &mut Link, out: &Out) -> Result<()> {
    let p = &o.params;
    let n = sides.len();
    let span = p.max_size() * n;
    let server_region = if p.test.server_exposes() {
        Some(recv_region(link, span)?)
    } else {
        None
    };
    // -b on write_bw and read_bw: the server reaches our buffer too. It
    // does so only between its `GO` and its verdict for a size; this side
    // prepares and checks the buffer only before reading `GO` and after the
    // verdict.
    let exposes = p.bidirectional && p.test.server_exposes();
    let len = if exposes { span } else { 1 };
    let exposed = shared::expose(sides[0].channel.pd(), len, "the exposed buffer")?;
    if exposes {
        send_region(link, &shared::remote(&exposed, len)?)?;
    }
    if o.verbose {
        out.say(&clock_cost());
    }
    out.say(BW_HEADER);
    for &size in &p.sizes {
        // Preparation, while the server waits for nothing from us.
        if exposes {
            // Before `GO` the server touches nothing of ours.
            shared::update(&exposed, 0..size * n, |mine| {
                prepare_exposed(p.test, mine, size, BY_CLIENT)
            })?;
        } else if p.bidirectional {
            sides.iter_mut().for_each(|s| s.rx.fill(0));
        }
        fill_locals(&mut sides, p.test, size, BY_CLIENT);
        let go = link.expect_line("GO")?;
        protocol::expect_size(&go, size, "the server is ready")?;
        // With -b on send_bw we receive too, and say when our receives are
        // posted.
        let answer_ready = p.bidirectional && p.test == Test::SendBw;
        let plans = plans(p, true, answer_ready, server_region, size, n)?;
        // Our heartbeat runs from then until DONE.
        let mut beat = None;
        let mut ready = |link: &mut Link| -> Result<()> {
            if answer_ready {
                link.write_line(&format!("READY {size}"))?;
            }
            beat = Some(watch::heartbeat(link)?);
            Ok(())
        };
        let times = multi_threads::run_lanes_threaded(
            &mut sides,
            &plans,
            &shape(p, size, o.timeout),
            o.threads,
            link,
            &mut ready,
        );
        if let Some(beat) = beat {
            beat.stop();
        }
        let times = times?;
        let mut run = multi_qp::bandwidth(size, &times)?;
        link.write_line(&format!("DONE {size}"))?;
        protocol::decode_verdict(&link.read_line("the server's data check")?, size)?;
        if p.bidirectional {
            let theirs = decode_bw(&link.read_line("the server's measurement")?)?;
            run.bw = Bandwidth {
                peak_mb: run.bw.peak_mb + theirs.peak_mb,
                avg_mb: run.bw.avg_mb + theirs.avg_mb,
                mpps: run.bw.mpps + theirs.mpps,
            };
        }
        // Our checks, now that the server is idle.
        let mine = || -> Result<()> {
            if p.test == Test::ReadBw {
                check_reads(&sides, p, size, BY_SERVER)?;
            }
            if p.bidirectional {
                if p.test == Test::SendBw {
                    check_received(&sides, p, size, BY_SERVER)?;
                } else {
                    // After its verdict the server touches nothing.
                    let data = shared::copy_out(&exposed, 0..size * n)?;
                    check_exposed(p.test, &data, size, BY_CLIENT, BY_SERVER)?;
                }
            }
            Ok(())
        };
        mine().map_err(|e| fail(format!("{size} bytes: {e}")))?;
        print_report(out, p, size, &Report::Bw(run), o.verbose);
    }
    link.write_line("BYE")?;
    out.say(RULE);
    out.say("data verified");
    Ok(())
}

/// The server: serves every size of `p` on `sides` (one per queue pair).
pub(crate) fn serve(
    timeout: Duration,
    p: &Params,
    mut sides: Vec<Side>,
    link: &mut Link,
    out: &Out,
) -> Result<()> {
    let n = sides.len();
    let span = p.max_size() * n;
    // The client reaches this buffer only between our `GO` and its `DONE`;
    // this side prepares and checks it only outside those windows.
    let exposes = p.test.server_exposes();
    let len = if exposes { span } else { 1 };
    let exposed = shared::expose(sides[0].channel.pd(), len, "the exposed buffer")?;
    if exposes {
        send_region(link, &shared::remote(&exposed, len)?)?;
    }
    let client_region = if p.bidirectional && p.test.server_exposes() {
        Some(recv_region(link, span)?)
    } else {
        None
    };
    for &size in &p.sizes {
        let outcome = serve_size(timeout, p, size, &mut sides, &exposed, client_region, link);
        // Tell the client either way, then stop on failure.
        let run = protocol::send_verdict(link, size, outcome)?;
        if let Some(r) = run {
            link.write_line(&format!(
                "BW {} {} {}",
                r.bw.peak_mb, r.bw.avg_mb, r.bw.mpps
            ))?;
        }
        report::print_server_size(out, p, size);
    }
    link.expect_line("BYE")?;
    out.say("data verified");
    Ok(())
}

/// One size, server side; returns this side's measurement with `-b`.
fn serve_size(
    timeout: Duration,
    p: &Params,
    size: usize,
    sides: &mut [Side],
    exposed: &RemoteAccessBuffer,
    client_region: Option<RemoteMemoryRegion>,
    link: &mut Link,
) -> Result<Option<BwRun>> {
    let n = sides.len();
    if p.test == Test::SendBw {
        sides.iter_mut().for_each(|s| s.rx.fill(0));
    } else {
        // The client reaches the buffer only between GO and DONE.
        shared::update(exposed, 0..size * n, |parts| {
            prepare_exposed(p.test, parts, size, BY_SERVER)
        })?;
    }
    let receives = p.test == Test::SendBw;
    let mine = if p.bidirectional || receives {
        if p.bidirectional {
            fill_locals(sides, p.test, size, BY_SERVER);
        }
        let plans = plans(p, p.bidirectional, receives, client_region, size, n)?;
        // Every receive is posted: GO (and with -b on send_bw, wait until
        // the client's are posted too).
        let wait_ready = p.bidirectional && receives;
        let mut ready = |link: &mut Link| -> Result<()> {
            link.write_line(&format!("GO {size}"))?;
            if wait_ready {
                let r = link.expect_line("READY")?;
                protocol::expect_size(&r, size, "the client is ready")?;
            }
            Ok(())
        };
        let times = multi_qp::run_lanes(sides, &plans, &shape(p, size, timeout), link, &mut ready)?;
        if p.bidirectional {
            Some(multi_qp::bandwidth(size, &times)?)
        } else {
            None
        }
    } else {
        link.write_line(&format!("GO {size}"))?;
        None
    };
    protocol::expect_done(link, size)?;

    // The client's operations have all completed, and so have ours.
    if p.test == Test::SendBw {
        check_received(sides, p, size, BY_CLIENT)?;
    } else {
        // After DONE the client has no operation outstanding.
        let data = shared::copy_out(exposed, 0..size * n)?;
        check_exposed(p.test, &data, size, BY_SERVER, BY_CLIENT)?;
    }
    if p.bidirectional && p.test == Test::ReadBw {
        check_reads(sides, p, size, BY_CLIENT)?;
    }
    Ok(mine)
}

/// What every lane does: posts (towards its part of `remote` for the
/// one-sided tests) and/or receives.
fn plans(
    p: &Params,
    posts: bool,
    receives: bool,
    remote: Option<RemoteMemoryRegion>,
    size: usize,
    n: usize,
) -> Result<Vec<Plan<'static>>> {
    (0..n)
        .map(|lane| {
            let part = || -> Result<RemoteMemoryRegion> {
                let r = remote.ok_or_else(|| fail("no remote region"))?;
                r.slice((lane * size) as u64, size as u64)
            };
            let post = match (posts, p.test) {
                (false, _) => Post::Nothing,
                (true, Test::WriteBw) => Post::Write(part()?),
                (true, Test::ReadBw) => Post::Read(part()?),
                (true, _) => Post::Send,
            };
            Ok(Plan {
                post,
                receive: receives,
            })
        })
        .collect()
}

fn shape(p: &Params, size: usize, timeout: Duration) -> Shape {
    Shape {
        size,
        iters: p.iters,
        depth: p.tx_depth,
        rx_depth: p.rx_depth,
        stride: p.max_size(),
        check_immediate: true,
        timeout,
    }
}

/// Before a run: the exposed buffer of the side `owner` — zeroed for
/// writes to land in, each lane's part filled with `owner`'s pattern for
/// reads (send_bw exposes nothing).
fn prepare_exposed(test: Test, parts: &mut [u8], size: usize, owner: u64) {
    match test {
        Test::WriteBw => parts.fill(0),
        Test::ReadBw => {
            for (lane, part) in parts.chunks_mut(size).enumerate() {
                pattern::fill(part, lane_seed(size, owner, lane), 0);
            }
        }
        _ => {}
    }
}

/// After a run: the exposed buffer of `owner` holds `writer`'s pattern of
/// each lane (write_bw), or `owner`'s own, unchanged (read_bw).
fn check_exposed(test: Test, parts: &[u8], size: usize, owner: u64, writer: u64) -> Result<()> {
    let (who, what) = match test {
        Test::WriteBw => (writer, "after RDMA writes"),
        _ => (owner, "after RDMA reads (must be unchanged)"),
    };
    parts.chunks(size).enumerate().try_for_each(|(lane, part)| {
        pattern::check(part, lane_seed(size, who, lane), 0)
            .map_err(|m| fail(format!("exposed part of queue pair {lane} {what}: {m}")))
    })
}

/// Before a run: each lane's message buffer holds its pattern (writes,
/// sends), or its read chunks are zeroed.
fn fill_locals(sides: &mut [Side], test: Test, size: usize, writer: u64) {
    for (lane, side) in sides.iter_mut().enumerate() {
        match test {
            Test::ReadBw => side.local.fill(0),
            _ => pattern::fill(&mut side.local[..size], lane_seed(size, writer, lane), 0),
        }
    }
}

/// After a read run: every chunk a lane's reads landed in holds the
/// exposing side's (`owner`'s) pattern of that lane.
fn check_reads(sides: &[Side], p: &Params, size: usize, owner: u64) -> Result<()> {
    for (lane, side) in sides.iter().enumerate() {
        let chunks = read_chunks(side.local.len(), size, p.tx_depth).min(p.iters);
        for (c, chunk) in side.local[..size * chunks].chunks(size).enumerate() {
            pattern::check(chunk, lane_seed(size, owner, lane), 0)
                .map_err(|m| fail(format!("data read by queue pair {lane} (chunk {c}): {m}")))?;
        }
    }
    Ok(())
}

/// After a send run: every receive slot a lane used holds the sender's
/// pattern of that lane (order and lengths were checked as they came).
fn check_received(sides: &[Side], p: &Params, size: usize, sender: u64) -> Result<()> {
    let stride = p.max_size();
    for (lane, side) in sides.iter().enumerate() {
        for slot in 0..side.slots.min(p.iters) {
            let data = &side.rx[slot * stride..slot * stride + size];
            pattern::check(data, lane_seed(size, sender, lane), 0)
                .map_err(|m| fail(format!("receive slot {slot} of queue pair {lane}: {m}")))?;
        }
    }
    Ok(())
}

/// The server's measurement with `-b`: `BW <peak> <avg> <mpps>`, each a
/// finite number, not negative.
fn decode_bw(line: &str) -> Result<Bandwidth> {
    let bad = || {
        fail(format!(
            "expected `BW <peak> <avg> <mpps>` from the server, got `{}`",
            line.chars().take(80).collect::<String>().escape_debug()
        ))
    };
    let rest = net::rest_after(line, "BW").ok_or_else(bad)?;
    let v: Vec<f64> = rest
        .split_whitespace()
        .take(4)
        .map(|w| w.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    match v[..] {
        [peak_mb, avg_mb, mpps] => Ok(Bandwidth {
            peak_mb,
            avg_mb,
            mpps,
        }),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_measurement_is_checked() {
        let b = decode_bw("BW 12.5 10 0.0025").unwrap();
        assert_eq!((b.peak_mb, b.avg_mb, b.mpps), (12.5, 10.0, 0.0025));
        for bad in [
            "BW 1 2",
            "BW 1 2 3 4",
            "BW 1 NaN 3",
            "BW -1 2 3",
            "OK 1 2 3",
            "BW x y z",
        ] {
            assert!(decode_bw(bad).is_err(), "{bad}");
        }
        assert_ne!(lane_seed(4096, BY_CLIENT, 0), lane_seed(4096, BY_CLIENT, 1));
        assert_ne!(
            lane_seed(1 << 29, BY_CLIENT, 1),
            lane_seed(1 << 29, BY_SERVER, 1)
        );
    }
}
