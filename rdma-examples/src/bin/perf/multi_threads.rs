//! `--threads`: the lanes of [`crate::multi_qp`] split over threads, each
//! driving its share in turn, on channels of its own.
//!
//! One stop for all: the first thread whose lanes fail raises a flag that
//! the others' turns look at, so they end too (each flushing its queue
//! pairs as it unwinds). The calling thread holds the control connection:
//! it says `ready` between the threads' two meetings, then watches the
//! connection while they run, and raises the flag when the peer is gone.

use crate::multi_qp::{check_lanes, lanes_from, run_lanes, LaneTimes, Plan, Shape, Watch};
use crate::watch::{self, Nobody, Peer};
use crate::Side;
use rdma_examples::clock::{self, Stamp};
use rdma_examples::fail;
use rdma_examples::Result;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

/// As [`run_lanes`], with the lanes split over `threads` threads, each
/// driving its share in turn as `run_lanes` does (nothing is shared
/// between the threads but the clock's origin and the stop flag). `ready`
/// runs on this thread once every thread's lanes have posted their first
/// receives, before any lane posts; then this thread watches `ctl` until
/// every thread is done. One thread: `run_lanes`.
///
/// # Errors
/// As [`run_lanes`]: the peer gone, else the error of the thread that
/// failed first.
pub(crate) fn run_lanes_threaded<C: Peer>(
    sides: &mut [Side],
    plans: &[Plan],
    shape: &Shape,
    threads: usize,
    ctl: &mut C,
    ready: &mut dyn FnMut(&mut C) -> Result<()>,
) -> Result<Vec<LaneTimes>> {
    if threads <= 1 || sides.len() <= 1 {
        return run_lanes(sides, plans, shape, ctl, ready);
    }
    check_lanes(sides, plans)?;
    let per = sides.len().div_ceil(threads);
    let groups = sides.len().div_ceil(per);
    let _ = clock::ticks_per_sec(); // calibrate before timing
    let origin = Stamp::now();
    // Every thread and this one meet twice: once every receive is posted
    // (this thread then says `ready`), and once it has (the lanes post).
    let (posted, go) = (Barrier::new(groups + 1), Barrier::new(groups + 1));
    let abort = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    std::thread::scope(|t| {
        let workers: Vec<_> = sides
            .chunks_mut(per)
            .zip(plans.chunks(per))
            .map(|(sides, plans)| {
                let (posted, go, abort, stop) = (&posted, &go, &abort, &stop);
                t.spawn(move || {
                    let met = Cell::new(false);
                    // Failing (or panicking) before the meeting still meets,
                    // so that nobody waits for this thread, and stops the
                    // others.
                    let _meet = MeetOnExit {
                        met: &met,
                        posted,
                        go,
                        abort,
                    };
                    let mut gate = || -> Result<()> {
                        met.set(true);
                        posted.wait();
                        go.wait();
                        if abort.load(Ordering::Acquire) {
                            return Err(fail(
                                "stopped: another thread's queue pairs failed to start",
                            ));
                        }
                        Ok(())
                    };
                    let mut rest = || Nobody.rest();
                    let watch = Watch {
                        rest: &mut rest,
                        stop,
                    };
                    let run = lanes_from(sides, plans, shape, origin, &mut gate, watch);
                    // The first to fail says so (`false` before).
                    let first = run.is_err() && !stop.swap(true, Ordering::AcqRel);
                    (run, first)
                })
            })
            .collect();
        posted.wait();
        // The threads wait at `go` whatever `ready` does, even unwind.
        let said = if abort.load(Ordering::Acquire) {
            Ok(Ok(()))
        } else {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ready(&mut *ctl)))
        };
        if !matches!(said, Ok(Ok(()))) {
            abort.store(true, Ordering::Release);
        }
        go.wait();
        let said = said.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The run: this thread watches the connection for all of them.
        let mut gone = None;
        while said.is_ok() && !workers.iter().all(|w| w.is_finished()) {
            if stop.load(Ordering::Acquire) {
                break;
            }
            if let Err(e) = ctl.rest() {
                stop.store(true, Ordering::Release);
                gone = Some(e);
                break;
            }
        }
        let mut times = Vec::with_capacity(plans.len());
        let (mut first, mut other) = (None, None);
        for w in workers {
            match w.join() {
                Ok((Ok(t), _)) => times.extend(t),
                Ok((Err(e), true)) => first = Some(e),
                Ok((Err(e), false)) => {
                    other.get_or_insert(e);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        let failed = said
            .err()
            .or(gone)
            .or_else(|| first.or(other).map(|e| watch::explain(e, &mut *ctl)));
        match failed {
            Some(e) => Err(e),
            None => Ok(times),
        }
    })
}

/// A lane thread's side of the meeting in [`run_lanes_threaded`] if it
/// leaves (returns or unwinds) without having met.
struct MeetOnExit<'a> {
    met: &'a Cell<bool>,
    posted: &'a Barrier,
    go: &'a Barrier,
    abort: &'a AtomicBool,
}

impl Drop for MeetOnExit<'_> {
    fn drop(&mut self) {
        if !self.met.get() {
            self.abort.store(true, Ordering::Release);
            self.posted.wait();
            self.go.wait();
        }
    }
}
