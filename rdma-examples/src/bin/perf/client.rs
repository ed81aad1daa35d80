//! The `perf` client: sends the parameters, runs each size when the
//! server says `GO`, and checks what it read or received once the server
//! has checked its side.

use crate::asynchronous;
use crate::bandwidth::{read_chunks, run_bw};
use crate::latency::run_lat;
use crate::options::Options;
use crate::protocol::{self, Test};
use crate::report::{clock_cost, print_report, Checks, Out, Report, BW_HEADER, LAT_HEADER, RULE};
use crate::watch;
use crate::{mark, recv_region, seed, send_region, setup, setup_lanes, BY_SERVER};
use rdma_examples::fail;
use rdma_examples::net::{self, Link};
use rdma_examples::stats::Latency;
use rdma_examples::{device, pattern, shared, Result};

/// Runs the test against the server at `host`.
pub(crate) fn client(o: &Options, host: &str) -> Result<()> {
    let out = Out {
        json: o.json,
        checks: Checks::Data,
    };
    let p = &o.params;
    let pd = device::open_checked(o.ib_dev.as_deref(), o.ib_port, o.gid_index)?;
    let stream = net::connect(host, o.port, net::CONNECT_RETRY, o.timeout)?;
    let mut link = Link::new(stream, o.timeout)?;
    link.write_line(&p.to_line())?;
    protocol::decode_answer(&link.read_line("the server's answer to our parameters")?)?;
    if p.many_lanes() {
        let sides = setup_lanes(o, p, &pd, &mut link, &out)?;
        if p.test.is_atomic() {
            return crate::atomic_multi::client(o, sides, &mut link, &out);
        }
        return crate::own_multi::client(o, sides, &mut link, &out);
    }
    let mut side = setup(o, p, &pd, &mut link, &out)?;
    if p.test.is_atomic() {
        if o.asynchronous {
            return Err(fail("perf --async: the atomic tests have no async path"));
        }
        return crate::atomic::client(o, &mut side, &mut link, &out);
    }
    let server_region = if p.test.server_exposes() {
        Some(recv_region(&mut link, p.max_size())?)
    } else {
        None
    };
    // write_lat: the client exposes a buffer too (a byte otherwise). The
    // server writes it only in answer to our writes, within a size's run; we
    // prepare it only before our first write of a size and check it after
    // the server's OK for it, and otherwise only spin on a byte.
    let exposes = p.test == Test::WriteLat;
    let len = if exposes { p.max_size() } else { 1 };
    let exposed = shared::expose(side.channel.pd(), len, "the exposed buffer (-s)")?;
    if exposes {
        send_region(&mut link, &shared::remote(&exposed, len)?)?;
    }

    if o.verbose {
        out.say(&clock_cost());
    }
    if p.test.is_bw() {
        out.say(BW_HEADER);
    } else {
        out.say(LAT_HEADER);
    }
    for &size in &p.sizes {
        let go = link.expect_line("GO")?;
        protocol::expect_size(&go, size, "the server is ready")?;
        let thread = watch::heartbeat_for(p.test, &mut link, &mut side.beat)?;
        let report = match p.test {
            Test::WriteBw | Test::ReadBw | Test::SendBw if o.asynchronous => Report::Bw(
                asynchronous::run_bw(p, o.verbose, size, &mut side, server_region)?,
            ),
            Test::WriteLat | Test::ReadLat | Test::SendLat if o.asynchronous => {
                let mut samples =
                    asynchronous::run_lat(p, size, &mut side, server_region, &exposed)?;
                Report::Lat(Latency::from_samples(&mut samples).ok_or_else(|| fail("no samples"))?)
            }
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw => {
                let r = run_bw(p, o.verbose, size, &mut side, server_region)?;
                Report::Bw(r)
            }
            Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat => {
                let mut samples = run_lat(p, size, &mut side, server_region, &exposed)?;
                Report::Lat(Latency::from_samples(&mut samples).ok_or_else(|| fail("no samples"))?)
            }
        };
        side.beat.stop();
        if let Some(t) = thread {
            t.stop();
        }
        link.write_line(&format!("DONE {size}"))?;
        protocol::decode_verdict(&link.read_line("the server's data check")?, size)?;
        // Our own checks, now that the server is idle.
        let mine = match p.test {
            // The async loops checked what they read or received.
            Test::ReadBw | Test::ReadLat | Test::SendLat if o.asynchronous => Ok(()),
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
                        pattern::check(chunk, seed(size, BY_SERVER), 0).map_err(|m| {
                            fail(format!("data read from the server (chunk {c}): {m}"))
                        })
                    })
            }
            Test::SendLat => pattern::check(&side.rx[..size], seed(size, BY_SERVER), 0)
                .map_err(|m| fail(format!("replies received from the server: {m}"))),
            Test::WriteLat => {
                // After the server's OK it writes nothing until our next
                // write.
                shared::copy_out(&exposed, 0..size).and_then(|data| {
                    pattern::check(&data[..size - 1], seed(size, BY_SERVER), 0)
                        .map_err(|m| fail(format!("buffer written by the server: {m}")))
                        .and_then(|()| {
                            (data[size - 1] == mark(p.iters - 1))
                                .then_some(())
                                .ok_or_else(|| fail("last byte written by the server is wrong"))
                        })
                })
            }
            Test::WriteBw | Test::SendBw | Test::AtomicBw | Test::AtomicLat => Ok(()),
        };
        mine.map_err(|e| fail(format!("{size} bytes: {e}")))?;
        print_report(&out, p, size, &report, o.verbose);
    }
    link.write_line("BYE")?;
    out.say(RULE);
    out.say("data verified");
    Ok(())
}
