//! The `perf` server: checks the client's parameters, serves each size
//! (prepare, `GO`, serve or stay passive, wait for `DONE`), and verifies the
//! data the client's operations left behind.

use crate::bandwidth::serve_send_bw;
use crate::latency::{serve_send_lat, serve_write_lat};
use crate::options::Options;
use crate::protocol::{self, Params, Test};
use crate::report::{self, Checks, Out};
use crate::{mark, recv_region, seed, send_region, setup, setup_lanes, Side, BY_CLIENT, BY_SERVER};
use rdma_examples::fail;
use rdma_examples::net::{self, Link};
use rdma_examples::{device, pattern, shared, Result};
use rdma_safe::{RemoteAccessBuffer, RemoteMemoryRegion};

/// Serves one client.
pub(crate) fn server(o: &Options) -> Result<()> {
    let out = Out {
        json: o.json,
        checks: Checks::Data,
    };
    // Device, port and GID are checked before a client is awaited; buffers
    // are allocated when the client's parameters say how large.
    let pd = device::open_checked(o.ib_dev.as_deref(), o.ib_port, o.gid_index)?;
    let listener =
        net::listen(o.port).map_err(|e| fail(format!("can't listen on port {}: {e}", o.port)))?;
    out.say(&format!(
        "perf: {} server waiting for a client on TCP port {}",
        o.params.test.name(),
        o.port
    ));
    let (stream, peer) = listener.accept()?;
    drop(listener);
    let mut link = Link::new(stream, o.timeout)?;
    let p = match Params::from_line(&link.read_line("the client's parameters")?) {
        Ok(p) => p,
        Err(e) => {
            let _ = link.write_line(&format!("ERR {e}"));
            return Err(fail(format!("client {peer}: {e}")));
        }
    };
    if p.test != o.params.test {
        let why = format!(
            "the client runs {} but this server was started for {}",
            p.test.name(),
            o.params.test.name()
        );
        link.write_line(&format!("ERR {why}"))?;
        return Err(fail(why));
    }
    link.write_line("OK")?;
    out.say(&format!("perf: client {peer}"));
    if p.many_lanes() {
        let sides = setup_lanes(o, &p, &pd, &mut link, &out)?;
        if p.test.is_atomic() {
            return crate::atomic_multi::serve(&p, sides, &mut link, &out);
        }
        return crate::own_multi::serve(o.timeout, &p, sides, &mut link, &out);
    }
    let mut side = setup(o, &p, &pd, &mut link, &out)?;
    if p.test.is_atomic() {
        return crate::atomic::serve(&p, &mut side, &mut link, &out);
    }

    // The exposed buffer (one-sided tests; a byte otherwise). The client
    // accesses it only between our `GO` and its `DONE` (sent once its last
    // operation has completed); this side prepares and checks it only
    // outside those windows (in `server_size`, before `GO` and after
    // `DONE`), and inside them only spins on a byte.
    let exposes = p.test.server_exposes();
    let len = if exposes { p.max_size() } else { 1 };
    let exposed = shared::expose(side.channel.pd(), len, "the exposed buffer (-s)")?;
    if exposes {
        send_region(&mut link, &shared::remote(&exposed, len)?)?;
    }
    let client_region = if p.test == Test::WriteLat {
        Some(recv_region(&mut link, p.max_size())?)
    } else {
        None
    };

    for &size in &p.sizes {
        let outcome = server_size(&p, size, &mut side, &exposed, client_region, &mut link);
        // Tell the client either way, then stop on failure.
        protocol::send_verdict(&mut link, size, outcome)?;
        report::print_server_size(&out, &p, size);
    }
    link.expect_line("BYE")?;
    out.say("data verified");
    Ok(())
}

/// The atomic tests have their own server loop ([`crate::atomic::serve`]).
const ATOMIC_ELSEWHERE: &str = "the atomic tests are served by the atomic module";

/// One size, server side: prepare, `GO`, serve, wait for `DONE`, verify.
fn server_size(
    p: &Params,
    size: usize,
    side: &mut Side,
    exposed: &RemoteAccessBuffer,
    client_region: Option<RemoteMemoryRegion>,
    link: &mut Link,
) -> Result<()> {
    // Preparation: the client is idle (it waits for GO).
    match p.test {
        Test::WriteBw | Test::WriteLat => shared::zero(exposed, 0..size)?,
        Test::ReadBw | Test::ReadLat => shared::update(exposed, 0..size, |b| {
            pattern::fill(b, seed(size, BY_SERVER), 0)
        })?,
        Test::SendBw | Test::SendLat => side.rx.fill(0),
        Test::AtomicBw | Test::AtomicLat => return Err(fail(ATOMIC_ELSEWHERE)),
    }
    pattern::fill(&mut side.local[..size], seed(size, BY_SERVER), 0);

    match p.test {
        Test::WriteBw | Test::ReadBw | Test::ReadLat => {
            link.write_line(&format!("GO {size}"))?;
        }
        Test::SendBw => serve_send_bw(p, size, side, link)?,
        Test::SendLat => serve_send_lat(p, size, side, link)?,
        Test::WriteLat => {
            let remote = client_region.ok_or_else(|| fail("no client region"))?;
            link.write_line(&format!("GO {size}"))?;
            serve_write_lat(p, size, side, exposed, remote)?;
        }
        Test::AtomicBw | Test::AtomicLat => return Err(fail(ATOMIC_ELSEWHERE)),
    }
    // A server that only exposes memory sees nothing of the client's run
    // but its heartbeats and DONE.
    protocol::expect_done(link, size)?;

    // Verification: the client's operations have all completed.
    let check = |what: &str, data: &[u8], seed: u64| -> Result<()> {
        pattern::check(data, seed, 0).map_err(|m| fail(format!("{what}: {m}")))
    };
    match p.test {
        Test::WriteBw => check(
            "exposed buffer after RDMA writes",
            &shared::copy_out(exposed, 0..size)?,
            seed(size, BY_CLIENT),
        )?,
        Test::WriteLat => {
            let data = shared::copy_out(exposed, 0..size)?;
            check(
                "exposed buffer after RDMA writes",
                &data[..size - 1],
                seed(size, BY_CLIENT),
            )?;
            let want = mark(p.iters - 1);
            if data[size - 1] != want {
                return Err(fail(format!(
                    "last byte of the exposed buffer is {:#04x}, expected {want:#04x}",
                    data[size - 1]
                )));
            }
        }
        Test::ReadBw | Test::ReadLat => check(
            "exposed buffer after RDMA reads (must be unchanged)",
            &shared::copy_out(exposed, 0..size)?,
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
        Test::AtomicBw | Test::AtomicLat => return Err(fail(ATOMIC_ELSEWHERE)),
    }
    Ok(())
}
