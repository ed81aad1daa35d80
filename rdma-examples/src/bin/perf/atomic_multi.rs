//! `atomic_bw -q N` in `perf`'s own protocol, both sides, every value
//! checked.
//!
//! The server exposes one word per queue pair (a [`RemoteAccessBuffer`] of
//! N words), zeroes them before `GO` and checks after `DONE` that each holds
//! `-n`. Lane `i` of the client runs its `-n` atomics on word `i` only, one
//! per post, with `-t` in flight ([`crate::multi_qp`]): a reliable
//! connection executes its atomics in order, so the argument of
//! [`crate::atomic`] holds per lane — atomic `k` of a lane finds its word
//! at `k` — and the client checks every old value of every lane.
//!
//! `-b` does not apply to the atomic tests.

use crate::atomic::{check_final_value, check_old_values};
use crate::multi_qp::{self, Plan, Post, Shape};
use crate::multi_threads;
use crate::options::Options;
use crate::protocol::{self, Params};
use crate::report::{clock_cost, print_report, print_server_size, Out, Report, BW_HEADER, RULE};
use crate::watch;
use crate::{recv_region, send_region, Side};
use rdma_examples::fail;
use rdma_examples::net::Link;
use rdma_examples::Result;
use rdma_safe::{memory::AccessFlags, work::ATOMIC_SIZE, RemoteAccessBuffer};
use std::sync::atomic::Ordering;

/// The result words of each lane: one per atomic in flight (`-t`), written
/// only by our NIC, read atomically once their atomic has completed.
pub(crate) fn result_words(sides: &[Side], depth: usize) -> Result<Vec<RemoteAccessBuffer>> {
    sides
        .iter()
        .map(|s| {
            RemoteAccessBuffer::with_access(
                s.channel.pd(),
                depth.max(1) * ATOMIC_SIZE,
                AccessFlags::LOCAL_WRITE,
            )
            .map_err(|e| fail(format!("the result words (-t): {e}")))
        })
        .collect()
}

/// The client: every lane on its own word of the server's.
pub(crate) fn client(o: &Options, mut sides: Vec<Side>, link: &mut Link, out: &Out) -> Result<()> {
    let p = &o.params;
    let n = sides.len();
    let words = recv_region(link, n * ATOMIC_SIZE)?;
    if !words.address().is_multiple_of(ATOMIC_SIZE as u64) {
        return Err(fail(format!(
            "the server's words at {:#x} are not 8-byte aligned",
            words.address()
        )));
    }
    let results = result_words(&sides, p.tx_depth)?;
    if o.verbose {
        out.say(&clock_cost());
    }
    out.say(BW_HEADER);
    for &size in &p.sizes {
        let go = link.expect_line("GO")?;
        protocol::expect_size(&go, size, "the server is ready")?;
        let plans = (0..n)
            .map(|lane| {
                Ok(Plan {
                    post: Post::Atomic {
                        kind: p.atomic,
                        remote: words.slice((lane * ATOMIC_SIZE) as u64, ATOMIC_SIZE as u64)?,
                        results: &results[lane],
                    },
                    receive: false,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let shape = Shape {
            size: ATOMIC_SIZE,
            iters: p.iters,
            depth: p.tx_depth,
            rx_depth: 1,
            stride: ATOMIC_SIZE,
            check_immediate: false,
            timeout: o.timeout,
        };
        // Our heartbeat runs from the start of the run until DONE.
        let mut beat = None;
        let mut ready = |link: &mut Link| -> Result<()> {
            beat = Some(watch::heartbeat(link)?);
            Ok(())
        };
        let times = multi_threads::run_lanes_threaded(
            &mut sides, &plans, &shape, o.threads, link, &mut ready,
        );
        if let Some(beat) = beat {
            beat.stop();
        }
        let times = times?;
        let run = multi_qp::bandwidth(ATOMIC_SIZE, &times)?;
        link.write_line(&format!("DONE {size}"))?;
        protocol::decode_verdict(&link.read_line("the server's data check")?, size)?;
        for (lane, t) in times.iter().enumerate() {
            check_old_values(p.atomic, &t.olds)
                .map_err(|e| fail(format!("{size} bytes, queue pair {lane}: {e}")))?;
        }
        print_report(out, p, size, &Report::Bw(run), o.verbose);
    }
    link.write_line("BYE")?;
    out.say(RULE);
    out.say("data verified");
    Ok(())
}

/// The server: exposes one word per lane, checks each after every size.
pub(crate) fn serve(p: &Params, sides: Vec<Side>, link: &mut Link, out: &Out) -> Result<()> {
    let n = sides.len();
    let words = RemoteAccessBuffer::new(sides[0].channel.pd(), n * ATOMIC_SIZE)
        .map_err(|e| fail(format!("the exposed words: {e}")))?;
    send_region(link, &words.remote())?;
    for &size in &p.sizes {
        let outcome = serve_size(p, size, &words, link);
        // Tell the client either way, then stop on failure.
        protocol::send_verdict(link, size, outcome)?;
        print_server_size(out, p, size);
    }
    link.expect_line("BYE")?;
    out.say("data verified");
    Ok(())
}

fn serve_size(p: &Params, size: usize, words: &RemoteAccessBuffer, link: &mut Link) -> Result<()> {
    for w in words.words() {
        w.store(0, Ordering::Release);
    }
    link.write_line(&format!("GO {size}"))?;
    protocol::expect_done(link, size)?;
    // Every atomic has completed: each word holds its lane's count.
    for (lane, w) in words.words().iter().enumerate() {
        check_final_value(p.iters, w.load(Ordering::Acquire))
            .map_err(|e| fail(format!("word of queue pair {lane}: {e}")))?;
    }
    Ok(())
}
