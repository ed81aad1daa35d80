//! The atomic tests, both sides: `atomic_bw` (`-t` 64-bit atomics in
//! flight) and `atomic_lat` (one at a time, a whole round trip per sample),
//! fetch-and-add or compare-and-swap (`-A`), beside perftest's
//! `ib_atomic_bw` and `ib_atomic_lat`.
//!
//! The server exposes one word in a [`RemoteAccessBuffer`] (memory peers
//! may update, which Rust reaches only atomically), zeroes it before `GO`
//! and does nothing else until `DONE`. The client runs operation `i` as
//! fetch-and-add of 1, or as compare-and-swap of `i` with `i + 1`. A
//! reliable connection executes its atomics in order, so operation `i`
//! finds the word at `i` either way: every compare-and-swap succeeds, every
//! old value is exactly its index, and the word ends at `-n`. The server
//! checks the final value, the client every old value.
//!
//! The client's old values land in a [`RemoteAccessBuffer`] of its own,
//! registered for local access only, one word per operation in flight: Rust
//! loads a word atomically as soon as its operation has completed, inside
//! the scope, so a slot is free again before the ring comes round to it.

use crate::bandwidth::{batch_size, BwRun, MAX_BATCH};
use crate::measured::measured_loop;
use crate::options::Options;
use crate::protocol::{self, AtomicKind, Params, Test};
use crate::report::{clock_cost, print_report, print_server_size, Out, Report};
use crate::report::{BW_HEADER, LAT_HEADER, RULE};
use crate::watch;
use crate::{recv_region, send_region, Side};
use rdma_examples::clock::{self, Laps, Stamp, Timeline};
use rdma_examples::fail;
use rdma_examples::net::Link;
use rdma_examples::stats::Latency;
use rdma_examples::Result;
use rdma_safe::{
    memory::AccessFlags, scope::ScopedPendingWork, work::ATOMIC_SIZE, AtomicWorkRequest,
    RemoteAccessBuffer, RemoteMemoryRegion, ScatterElement,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The request of operation `i` on `remote`, its old value into `result`.
pub(crate) fn request<'wr, 'd>(
    kind: AtomicKind,
    i: usize,
    remote: RemoteMemoryRegion,
    result: &'wr mut ScatterElement<'d>,
) -> AtomicWorkRequest<'wr, 'd> {
    match kind {
        AtomicKind::FetchAndAdd => AtomicWorkRequest::fetch_and_add(remote, 1, result),
        AtomicKind::CmpAndSwap => {
            AtomicWorkRequest::compare_and_swap(remote, i as u64, i as u64 + 1, result)
        }
    }
}

/// Checks the old values the client's operations returned: operation `i`
/// found `i` (see the module docs).
///
/// # Errors
/// The first operation whose old value is wrong, and what that means.
pub(crate) fn check_old_values(kind: AtomicKind, olds: &[u64]) -> Result<()> {
    match olds.iter().enumerate().find(|&(i, &v)| v != i as u64) {
        None => Ok(()),
        Some((i, &v)) => {
            let meaning = match kind {
                AtomicKind::CmpAndSwap => {
                    "the swap failed: an atomic was lost, repeated or reordered"
                }
                AtomicKind::FetchAndAdd => "an atomic was lost, repeated or reordered",
            };
            Err(fail(format!(
                "atomic {i} returned old value {v}, expected {i}: {meaning}"
            )))
        }
    }
}

/// Checks the server's word after `iters` operations.
///
/// # Errors
/// Any other value.
pub(crate) fn check_final_value(iters: usize, value: u64) -> Result<()> {
    if value == iters as u64 {
        Ok(())
    } else {
        Err(fail(format!(
            "the exposed word is {value} after {iters} atomics, expected {iters}: \
             an atomic was lost or repeated"
        )))
    }
}

/// Serves the atomic tests: exposes the word, and per size zeroes it, says
/// `GO`, waits for `DONE` and checks the word's final value.
pub(crate) fn serve(p: &Params, side: &mut Side, link: &mut Link, out: &Out) -> Result<()> {
    let word = RemoteAccessBuffer::new(side.channel.pd(), ATOMIC_SIZE)
        .map_err(|e| fail(format!("the exposed word: {e}")))?;
    send_region(link, &word.remote())?;
    for &size in &p.sizes {
        let outcome = serve_size(p, size, &word, link);
        // Tell the client either way, then stop on failure.
        protocol::send_verdict(link, size, outcome)?;
        print_server_size(out, p, size);
    }
    link.expect_line("BYE")?;
    out.say("data verified");
    Ok(())
}

fn serve_size(p: &Params, size: usize, word: &RemoteAccessBuffer, link: &mut Link) -> Result<()> {
    word.words()[0].store(0, Ordering::Release);
    link.write_line(&format!("GO {size}"))?;
    protocol::expect_done(link, size)?;
    // The client's atomics have all completed: the word holds their sum.
    check_final_value(p.iters, word.words()[0].load(Ordering::Acquire))
}

/// Runs the atomic test against the server on `link` (after `setup`).
pub(crate) fn client(o: &Options, side: &mut Side, link: &mut Link, out: &Out) -> Result<()> {
    let p = &o.params;
    let remote = recv_region(link, ATOMIC_SIZE)?;
    if remote.address() % ATOMIC_SIZE as u64 != 0 {
        return Err(fail(format!(
            "the server's word at {:#x} is not 8-byte aligned",
            remote.address()
        )));
    }
    // One result word per operation in flight; nobody but our NIC writes it.
    let results = RemoteAccessBuffer::with_access(
        side.channel.pd(),
        p.tx_depth * ATOMIC_SIZE,
        AccessFlags::LOCAL_WRITE,
    )
    .map_err(|e| fail(format!("the result words (-t): {e}")))?;
    if o.verbose {
        out.say(&clock_cost());
    }
    out.say(if p.test.is_bw() {
        BW_HEADER
    } else {
        LAT_HEADER
    });
    for &size in &p.sizes {
        let go = link.expect_line("GO")?;
        protocol::expect_size(&go, size, "the server is ready")?;
        let mut olds = vec![0u64; p.iters];
        let thread = watch::heartbeat_for(p.test, link, &mut side.beat)?;
        let report = match p.test {
            Test::AtomicBw => Report::Bw(run_bw(p, o.verbose, side, &results, remote, &mut olds)?),
            _ => {
                let mut samples = run_lat(p, side, &results, remote, &mut olds)?;
                Report::Lat(Latency::from_samples(&mut samples).ok_or_else(|| fail("no samples"))?)
            }
        };
        side.beat.stop();
        if let Some(t) = thread {
            t.stop();
        }
        link.write_line(&format!("DONE {size}"))?;
        protocol::decode_verdict(&link.read_line("the server's data check")?, size)?;
        check_old_values(p.atomic, &olds).map_err(|e| fail(format!("{size} bytes: {e}")))?;
        print_report(out, p, size, &report, o.verbose);
    }
    link.write_line("BYE")?;
    out.say(RULE);
    out.say("data verified");
    Ok(())
}

/// atomic_bw against a `-R` peer's word at `remote`: as [`client`]'s run,
/// without the value checks (the peer may be perftest, whose word holds
/// arbitrary bytes and takes no part in the order argument of the module
/// docs); every completion's status is still checked.
///
/// # Errors
/// A misaligned word, a failed atomic or the timeout.
pub(crate) fn bw_unchecked(
    p: &Params,
    verbose: bool,
    side: &mut Side,
    remote: RemoteMemoryRegion,
) -> Result<BwRun> {
    let results = unchecked_results(p, side, remote)?;
    run_bw(p, verbose, side, &results, remote, &mut vec![0; p.iters])
}

/// atomic_lat against a `-R` peer's word, as [`bw_unchecked`].
///
/// # Errors
/// As [`bw_unchecked`].
pub(crate) fn lat_unchecked(
    p: &Params,
    side: &mut Side,
    remote: RemoteMemoryRegion,
) -> Result<Latency> {
    let results = unchecked_results(p, side, remote)?;
    let mut samples = run_lat(p, side, &results, remote, &mut vec![0; p.iters])?;
    Latency::from_samples(&mut samples).ok_or_else(|| fail("no samples"))
}

/// The result words of a `-R` run (one per atomic in flight), once the
/// peer's word is known to be aligned.
fn unchecked_results(
    p: &Params,
    side: &Side,
    remote: RemoteMemoryRegion,
) -> Result<RemoteAccessBuffer> {
    if !remote.address().is_multiple_of(ATOMIC_SIZE as u64) {
        return Err(fail(format!(
            "the peer's word at {:#x} is not 8-byte aligned",
            remote.address()
        )));
    }
    RemoteAccessBuffer::with_access(
        side.channel.pd(),
        p.tx_depth.max(1) * ATOMIC_SIZE,
        AccessFlags::LOCAL_WRITE,
    )
    .map_err(|e| fail(format!("the result words (-t): {e}")))
}

/// atomic_bw, client side: up to `-t` atomics in flight in one scope,
/// posted in batches (one `ibv_post_send` call and one completion each, as
/// the other bandwidth tests) with a result word per atomic; the old values
/// of a batch are loaded as soon as it completed.
fn run_bw(
    p: &Params,
    verbose: bool,
    side: &mut Side,
    results: &RemoteAccessBuffer,
    remote: RemoteMemoryRegion,
    olds: &mut [u64],
) -> Result<BwRun> {
    let (iters, depth, kind) = (p.iters, p.tx_depth, p.atomic);
    let batch = batch_size(depth);
    if depth == 0 || results.len() < depth * ATOMIC_SIZE {
        return Err(fail(format!(
            "{} bytes of result words for {depth} atomics in flight",
            results.len()
        )));
    }
    let words = results.words();
    let mut post_time = Duration::ZERO;
    let _ = clock::ticks_per_sec(); // calibrate before timing
    let mut tl = Timeline::with_capacity(Stamp::now(), iters);
    let (tl_ref, post_time_ref) = (&mut tl, &mut post_time);
    let beat = &mut side.beat;
    let closure_end = measured_loop(|| {
        side.channel.scope(|s| -> Result<Instant> {
            // (handle, first operation, operations) of each batch in flight.
            let mut inflight: VecDeque<(ScopedPendingWork<'_>, usize, usize)> =
                VecDeque::with_capacity(depth);
            let (mut next, mut in_ops) = (0, 0);
            while tl_ref.completed() < iters {
                beat.tick();
                // Operation `k` uses word `k % depth`; at most `depth` are in
                // flight, so a word is reused only after its operation completed
                // and its old value was read.
                while next < iters && in_ops < depth {
                    let n = batch.min(iters - next).min(depth - in_ops);
                    // The batch on the stack: a whole array of requests
                    // each time, of which the first `n` are posted.
                    let mut elements: [ScatterElement<'_>; MAX_BATCH] =
                        std::array::from_fn(|j| result_word(results, next + j, depth));
                    let mut k = next;
                    let mut wrs = elements.each_mut().map(|e| {
                        k += 1;
                        request(kind, k - 1, remote, e)
                    });
                    let t0 = Stamp::now();
                    let handle = s.post_batch(&mut wrs[..n])?;
                    if verbose {
                        *post_time_ref += t0.elapsed();
                    }
                    tl_ref.posted(t0, n);
                    inflight.push_back((handle, next, n));
                    next += n;
                    in_ops += n;
                }
                let (oldest, first, n) = inflight.pop_front().expect("a batch is in flight");
                oldest.wait()?;
                tl_ref.completed_now(n);
                for k in first..first + n {
                    olds[k] = words[k % depth].load(Ordering::Acquire);
                }
                in_ops -= n;
            }
            Ok(Instant::now())
        })
    })
    .map_err(rdma_safe::Error::from)?;
    let scope_exit_us = closure_end.elapsed().as_secs_f64() * 1e6;
    let bw = tl
        .bandwidth(ATOMIC_SIZE)
        .ok_or_else(|| fail("no operations"))?;
    Ok(BwRun {
        bw,
        post_ns_avg: if verbose {
            post_time.as_secs_f64() * 1e9 / iters as f64
        } else {
            f64::NAN
        },
        scope_exit_us,
    })
}

/// The result element of operation `k`: word `k % depth` of `results`,
/// which holds `depth` words (checked by the caller).
fn result_word(results: &RemoteAccessBuffer, k: usize, depth: usize) -> ScatterElement<'_> {
    let at = k % depth * ATOMIC_SIZE;
    results
        .scatter(at..at + ATOMIC_SIZE)
        .expect("a result word per atomic in flight")
}

/// atomic_lat, client side: one atomic at a time; returns samples in usec
/// (a whole round trip each, as perftest's `ib_atomic_lat` and `read_lat`,
/// from one iteration's start to the next's: [`Laps`]).
fn run_lat(
    p: &Params,
    side: &mut Side,
    results: &RemoteAccessBuffer,
    remote: RemoteMemoryRegion,
    olds: &mut [u64],
) -> Result<Vec<f64>> {
    let mut laps = Laps::with_capacity(p.iters);
    let word = &results.words()[0];
    let _ = clock::ticks_per_sec();
    measured_loop(|| -> Result<()> {
        // One result element for the run, checked once: each request
        // borrows it for its own call.
        let mut result = results.scatter(..ATOMIC_SIZE)?;
        for (i, old) in olds.iter_mut().enumerate() {
            laps.start();
            side.beat.tick();
            let wr = request(p.atomic, i, remote, &mut result);
            side.channel.run(wr)?;
            *old = word.load(Ordering::Acquire);
        }
        laps.stop();
        Ok(())
    })?;
    Ok(laps.ticks().into_iter().map(clock::micros).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_and_final_values_are_checked() {
        assert!(check_old_values(AtomicKind::FetchAndAdd, &[0, 1, 2, 3]).is_ok());
        let e = check_old_values(AtomicKind::CmpAndSwap, &[0, 1, 1, 3]).unwrap_err();
        assert!(
            e.to_string()
                .contains("atomic 2 returned old value 1, expected 2"),
            "{e}"
        );
        assert!(e.to_string().contains("swap failed"), "{e}");
        assert!(check_old_values(AtomicKind::FetchAndAdd, &[1]).is_err());
        assert!(check_final_value(5000, 5000).is_ok());
        let e = check_final_value(5000, 4999).unwrap_err();
        assert!(e.to_string().contains("is 4999 after 5000 atomics"), "{e}");
    }
}
