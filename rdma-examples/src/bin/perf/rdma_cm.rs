//! `perf -R`: perftest's rdma_cm mode, wire-compatible with `ib_<test> -R`
//! of perftest 4.5 (version 6.06) in either role.
//!
//! What `-R` does on the wire (both sides run with the same options, as
//! with perftest; nothing about the test travels but addresses, except
//! what a `perf` side announces after its version, unseen by perftest:
//! [`crate::perftest_wire::Shape`], so that two `perf` sides started for
//! different tests refuse each other at once):
//!
//! 1. the client connects a *control* RC connection through the RDMA
//!    connection manager to the server's port (no TCP at all); over it
//!    ([`Control`]) the sides exchange versions, page and cache-line
//!    sizes, and MTUs, then one (blank) handshake;
//! 2. the client connects the *data* connection through the CM to the same
//!    port, then another handshake. The server keeps listening on the one
//!    listener it accepted the control connection from, so the request
//!    waits in its backlog: perftest's client connects right after the
//!    handshake and does not retry a rejected request (a listener made
//!    anew for the data connection lost that race across two hosts: the
//!    request was rejected, reason 8, no listener);
//! 3. a handshake of `pingpong_dest`s carries each side's rkey and buffer
//!    address ([`crate::perftest_wire::Dest`], the memory of
//!    [`Exposed`]), two more (three for the send and latency tests) say
//!    "ready" (the receiving side of a send test posts its receives before
//!    the last);
//! 4. the test runs on the data connection; bandwidth tests then exchange
//!    the client's report (write_bw, read_bw, atomic_bw) and every test but
//!    write_lat ends with a handshake (perftest's write_lat exits after its
//!    report).
//!
//! The client prints how long each connection took through the CM (address
//! resolution to `ESTABLISHED`), the line `cargo xtask bench --cm` reads.
//!
//! Status against perftest 6.06 (rxe VM): write_bw, read_bw, send_bw,
//! write_lat, send_lat, read_lat, atomic_bw and atomic_lat (fetch-and-add
//! and compare-and-swap) interoperate in both directions; `perf -R`
//! against `perf -R` follows the same sequence. write_lat's server writes
//! first (perftest's `run_iter_lat_write` skips the server's first wait):
//! with the client writing first instead, as `perf`'s own protocol does,
//! the two sides deadlock or run ahead of each other's flag byte.
//!
//! `-q N` and `-b` take another path once the N data connections are up
//! ([`crate::cm_multi`]).
//!
//! The peer may be perftest, whose buffers hold arbitrary bytes, so `-R`
//! checks completion statuses and message lengths, never data; its JSON
//! lines say so (`"verified": false`, `"checks": "statuses"`).

use crate::atomic;
use crate::bandwidth::{read_chunks, ring_slots, run_bw};
use crate::cm_exposed::Exposed;
use crate::cm_loops::{self, run_allowance};
use crate::cm_multi;
use crate::control::{Control, RETRY_DELAY};
use crate::options::Options;
use crate::perftest_wire::{self as wire, BwReport, Dest, Shape, CACHE_LINE, PAGE_SIZE};
use crate::protocol::Test;
use crate::report::{print_report, Checks, Out, Report, BW_HEADER, LAT_HEADER, RULE};
use crate::Side;
use rdma_core::QpCapabilities;
use rdma_examples::fail;
use rdma_examples::stats::Latency;
use rdma_examples::{pattern, Result};
use rdma_safe::{
    cm::CmOptions, cm::Connector, Channel, Listener, RegisteredBuffer, RemoteMemoryRegion,
};
use std::time::{Duration, Instant};

/// The largest page size a peer may announce (it sizes our exposed buffer).
const MAX_PAGE: i32 = 1 << 24;
/// How long a server waits for its client.
const SERVER_PATIENCE: Duration = Duration::from_secs(3600);

/// Runs the test in `-R` mode, as the client when `o.server` names one.
pub(crate) fn run(o: &Options) -> Result<()> {
    // The peer may be perftest: its bytes are arbitrary, so only statuses
    // and lengths are checked.
    let out = Out {
        json: o.json,
        checks: Checks::Statuses,
    };
    let p = &o.params;
    let size = p.sizes[0];
    let client = o.server.is_some();
    let trace = |what: &str| {
        if o.verbose {
            eprintln!("perf -R: {what}");
        }
    };
    // The device options are checked before anything listens or connects
    // (the connection manager picks the device by address and would
    // otherwise ignore a wrong -d, -i or -x until a client came).
    rdma_examples::device::open_checked(o.ib_dev.as_deref(), o.ib_port, o.gid_index)?;
    let started = Instant::now();
    // The server's one listener, for both connections (see the module's
    // documentation, step 2).
    let mut listener = None;
    let mut ctl = match &o.server {
        Some(host) => Control::connect(host, o.port, o.timeout)?,
        None => {
            let l = Listener::bind_with(("0.0.0.0", o.port), &data_options(o))
                .map_err(|e| fail(format!("rdma_cm listen on port {}: {e}", o.port)))?;
            out.say(&format!(
                "perf -R: {} server waiting for a client on rdma_cm port {}",
                p.test.name(),
                o.port
            ));
            let ctl = Control::accept(&l, SERVER_PATIENCE)?;
            listener = Some(l);
            ctl
        }
    };
    let control_setup = started.elapsed();
    ctl.trace(o.verbose);
    trace("control connection established");

    // exchange_versions, check_sys_data, check_mtu. A `perf` peer says
    // what it runs after its version; one that runs something else is
    // refused here, by both sides at once.
    let shape = Shape::of(p);
    let (version, peer_shape) = wire::decode_version(&ctl.exchange(&wire::version(&shape))?)?;
    trace(&format!(
        "peer version {version}, perf peer: {peer_shape:?}"
    ));
    if let Some(theirs) = peer_shape {
        shape.accept_peer(&theirs, client)?;
    }
    let page = wire::decode_int(&ctl.exchange(&wire::int(PAGE_SIZE))?)?;
    wire::decode_int(&ctl.exchange(&wire::int(CACHE_LINE))?)?;
    if !(1..=MAX_PAGE).contains(&page) {
        return Err(fail(format!("the peer's page size {page} is out of range")));
    }
    let cycle = page.max(PAGE_SIZE) as usize;
    let our_mtu = ctl.channel().local_endpoint().mtu;
    let mtu_code = (our_mtu.bytes() / 256).trailing_zeros() as u8 + 1;
    let their_mtu = wire::decode_mtu(&ctl.exchange(&wire::mtu(mtu_code))?);
    trace(&format!("peer page size {page}, MTU code {their_mtu:?}"));

    // The data connection, between two handshakes.
    let blank = Dest::default().encode();
    ctl.hand_shake(&blank)?;
    // The data connections, then the second handshake. The client sends
    // that handshake as soon as its connections are made, while the server
    // may still wait for one's ESTABLISHED (a lost RTU: seconds), so the
    // server accepts them with the handshake's receive already posted.
    let mut data_setup = Duration::ZERO;
    let limit = ctl.channel().timeout();
    let (_, mut channels) = ctl.exchange_with(&blank, limit, || {
        let data_started = Instant::now();
        // `-q`: one connection per queue pair, as perftest connects them.
        let mut channels = Vec::with_capacity(p.qps);
        for _ in 0..p.qps {
            channels.push(data_connection(o, listener.as_ref())?);
        }
        data_setup = data_started.elapsed();
        trace("data connection established");
        Ok(channels)
    })?;
    if p.many_lanes() {
        let setup = cm_multi::SetUp {
            version,
            cycle,
            control: control_setup,
            data: data_setup,
        };
        return cm_multi::run(o, &out, ctl, channels, setup);
    }
    let channel = channels.pop().ok_or_else(|| fail("no data connection"))?;

    let pd = channel.pd().clone();
    let local_len = match p.test {
        Test::ReadBw => size * read_chunks(usize::MAX, size, p.tx_depth),
        _ => size,
    };
    let mut local = RegisteredBuffer::new(&pd, local_len)
        .map_err(|e| fail(format!("the message buffer (-s): {e}")))?;
    pattern::fill(&mut local, size as u64, 0);
    let slots = match p.test {
        Test::SendBw => p.rx_depth.min(ring_slots(size)).clamp(1, p.iters),
        Test::SendLat => 1,
        _ => 0,
    };
    let rx = RegisteredBuffer::new(&pd, (slots * size).max(1))
        .map_err(|e| fail(format!("the receive buffers (-s, -r): {e}")))?;
    let exposed = Exposed::new(&pd, p.test, size, cycle)?;

    let gid = channel.gid();
    let mine = dest(&channel, &exposed).encode();
    let theirs_raw = ctl.hand_shake(&mine)?;
    trace(&format!("peer destination {theirs_raw:02x?}"));
    let theirs = Dest::decode(&theirs_raw)?;
    let remote = RemoteMemoryRegion::new(theirs.vaddr, size as u64, theirs.rkey);

    out.say(RULE);
    out.say(&format!("                    {} (rdma_cm)", p.title()));
    out.say(&format!(
        " Device: {}  GID: {}  MTU: {}  peer version: {version}",
        pd.context().name(),
        gid.gid.to_ip(),
        our_mtu.bytes()
    ));
    out.say(&format!(
        " local:  QPN {:#08x} RKey {:#08x} VAddr {:#016x}\n remote: QPN {:#08x} RKey {:#08x} VAddr {:#016x}",
        channel.qp_num(),
        exposed.remote().rkey(),
        exposed.remote().address(),
        theirs.qpn,
        theirs.rkey,
        theirs.vaddr
    ));
    if client {
        out.say(&format!(
            " rdma_cm set-up [ms]: control {:.3}  data {:.3}  (resolve -> established)",
            control_setup.as_secs_f64() * 1e3,
            data_setup.as_secs_f64() * 1e3
        ));
    }
    out.say(RULE);

    // More handshakes before the run: two for write_bw and read_bw, three
    // for the others (perftest 6.06, seen on the wire); the send tests post
    // their receives before the last one, inside their loops.
    ctl.hand_shake(&mine)?;
    let bw_report = matches!(p.test, Test::WriteBw | Test::ReadBw | Test::AtomicBw);
    if !bw_report {
        // perftest 6.06's send and latency tests hold one handshake more
        // before their run (seen on the wire).
        ctl.hand_shake(&mine)?;
    }
    if !matches!(p.test, Test::SendBw | Test::SendLat) {
        ctl.hand_shake(&mine)?;
    }
    let mut side = Side {
        channel,
        local,
        rx,
        slots,
        beat: crate::watch::Beat::silent(),
    };
    let allowance = run_allowance(p.iters, size, o.timeout);
    match (p.test, client) {
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, true) => {
            out.say(BW_HEADER);
            let r = if p.test == Test::AtomicBw {
                atomic::bw_unchecked(p, o.verbose, &mut side, remote)?
            } else {
                run_bw(p, o.verbose, size, &mut side, Some(remote))?
            };
            ctl.hand_shake(&mine)?;
            exchange_report(&mut ctl, &r.bw, size, p.iters)?;
            print_report(&out, p, size, &Report::Bw(r), o.verbose);
        }
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, false) => {
            say_clients_report(&mut ctl, &mine, allowance, &out)?;
        }
        (Test::SendBw, true) => {
            out.say(BW_HEADER);
            ctl.hand_shake(&mine)?;
            let r = run_bw(p, o.verbose, size, &mut side, None)?;
            print_report(&out, p, size, &Report::Bw(r), o.verbose);
        }
        (Test::SendBw, false) => {
            let started = Instant::now();
            cm_loops::receive_bw(
                &mut side.channel,
                &mut side.rx,
                size,
                p.iters,
                p.rx_depth,
                &mut ctl,
                &mine,
            )?;
            out.say(&format!(
                " received {} messages of {size} bytes in {:.3} s",
                p.iters,
                started.elapsed().as_secs_f64()
            ));
        }
        (Test::WriteLat, _) => {
            let mut samples = cm_loops::write_lat(
                &mut side.channel,
                &mut side.local,
                exposed
                    .bytes()
                    .ok_or_else(|| fail("write_lat exposes bytes"))?,
                remote,
                size,
                p.iters,
                client,
            )?;
            report_lat(&out, p, size, &mut samples)?;
        }
        (Test::SendLat, _) => {
            let mut samples = cm_loops::send_lat(
                &mut side.channel,
                &side.local,
                &mut side.rx,
                size,
                p.iters,
                client,
                &mut ctl,
                &mine,
            )?;
            report_lat(&out, p, size, &mut samples)?;
        }
        (Test::ReadLat, true) => {
            let mut samples =
                cm_loops::read_lat(&mut side.channel, &mut side.local, remote, size, p.iters)?;
            report_lat(&out, p, size, &mut samples)?;
        }
        (Test::AtomicLat, true) => {
            let l = atomic::lat_unchecked(p, &mut side, remote)?;
            out.say(LAT_HEADER);
            print_report(&out, p, size, &Report::Lat(l), false);
        }
        (Test::ReadLat | Test::AtomicLat, false) => report_lat(&out, p, size, &mut [])?,
    }
    // ctx_close_connection: the last handshake (the server waits through
    // the client's run for it when it had nothing to do). perftest 6.06's
    // write_lat has none: it exits after its report (seen on the wire).
    if p.test != Test::WriteLat {
        ctl.exchange_within(&mine, allowance)?;
    }
    out.say(RULE);
    Ok(())
}

/// This side's `pingpong_dest` for the queue pair of `channel`: its
/// number, GID and the exposed memory.
pub(crate) fn dest(channel: &Channel, exposed: &Exposed) -> Dest {
    let gid = channel.gid();
    Dest {
        lid: channel.local_endpoint().lid.into(),
        out_reads: 16,
        qpn: channel.qp_num(),
        psn: 0,
        rkey: exposed.remote().rkey(),
        vaddr: exposed.remote().address(),
        gid: *gid.gid.as_bytes(),
        srqn: 0,
        gid_index: gid.index,
    }
}

/// The options of the data connection; on the server also those of its
/// one listener, which the control connection is accepted from too (its
/// queue pair gets the data connection's capabilities: more than it needs).
fn data_options(o: &Options) -> CmOptions {
    let p = &o.params;
    let caps = QpCapabilities {
        max_send_wr: p.tx_depth.max(1) as u32,
        max_recv_wr: p.rx_depth.max(8) as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut opts = CmOptions::default().timeout(o.timeout).capabilities(caps);
    // `-u` is the data connection's ACK timeout here too (the CM sets it
    // with rdma_set_option), with perftest's 7 transport retries as on the
    // TCP path: with 14 and the safe API's bounded 6 the retry budget is
    // 0.47 s, less than a loaded TCG host's round trips (0.3-1.2 s seen).
    // rxe takes 7 as "retry forever": the run's timeout bounds the waits.
    opts.ack_timeout = o.qp_timeout;
    opts.retry_count = 7;
    opts
}

/// The data connection: the client connects (retrying every
/// [`RETRY_DELAY`] while the server is not listening yet), the server
/// accepts it from `listener`, the one its control connection came from.
fn data_connection(o: &Options, listener: Option<&Listener>) -> Result<Channel> {
    let opts = data_options(o);
    match (listener, &o.server) {
        // The server: the client's data connection request waits in the
        // listener's backlog if it came before this call.
        (Some(listener), _) => listener
            .incoming_within(o.timeout)?
            .ok_or_else(|| fail(format!("no data connection request within {:?}", o.timeout)))?
            .accept(&[]),
        (None, Some(host)) => {
            let start = Instant::now();
            loop {
                match Connector::resolve((host.as_str(), o.port), &opts)
                    .and_then(|c| c.connect(&[]))
                {
                    Ok(c) => return Ok(c),
                    Err(_) if start.elapsed() < o.timeout => std::thread::sleep(RETRY_DELAY),
                    Err(e) => return Err(fail(format!("the rdma_cm data connection: {e}"))),
                }
            }
        }
        (None, None) => Err(fail(
            "perf -R: neither a server's listener nor a server to connect to",
        )),
    }
}

/// A one-way server's end of a run: waits (within `allowance`) for the
/// client's "done", takes its report and prints it.
///
/// # Errors
/// The exchanges' errors: the client is gone, silent past `allowance`, or
/// sends what is not a report.
pub(crate) fn say_clients_report(
    ctl: &mut Control,
    mine: &[u8],
    allowance: Duration,
    out: &Out,
) -> Result<()> {
    ctl.exchange_within(mine, allowance)?;
    let nothing = rdma_examples::stats::Bandwidth {
        peak_mb: 0.0,
        avg_mb: 0.0,
        mpps: 0.0,
    };
    let r = exchange_report(ctl, &nothing, 0, 0)?;
    out.say(BW_HEADER);
    out.say(&format!(
        " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}   (the client's report)",
        r.size, r.iters, r.peak_mb, r.avg_mb, r.mpps
    ));
    Ok(())
}

/// xchg_bw_reports: five exchanges, the client's report going to the
/// server; returns the peer's.
pub(crate) fn exchange_report(
    ctl: &mut Control,
    bw: &rdma_examples::stats::Bandwidth,
    size: usize,
    iters: usize,
) -> Result<BwReport> {
    let mine = BwReport {
        size: size as u64,
        iters: iters as u64,
        peak_mb: bw.peak_mb,
        avg_mb: bw.avg_mb,
        mpps: bw.mpps,
    };
    let mut got: [Vec<u8>; 5] = Default::default();
    for (field, slot) in mine.encode().iter().zip(got.iter_mut()) {
        *slot = ctl.exchange(field)?;
    }
    BwReport::decode(&got)
}

fn report_lat(
    out: &Out,
    p: &crate::protocol::Params,
    size: usize,
    samples: &mut [f64],
) -> Result<()> {
    if samples.is_empty() {
        out.say(&format!(
            " {size} bytes x {}: done (the client measures)",
            p.iters
        ));
        return Ok(());
    }
    out.say(LAT_HEADER);
    let l = Latency::from_samples(samples).ok_or_else(|| fail("no samples"))?;
    print_report(out, p, size, &Report::Lat(l), false);
    Ok(())
}
