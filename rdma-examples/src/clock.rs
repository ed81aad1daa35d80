//! Cheap timestamps for per-operation timing, as perftest takes them:
//! the CPU's time-stamp counter on x86-64 (no system call; on a VM whose
//! clock source is not the TSC, `Instant::now` costs microseconds and
//! would dominate a small-message measurement), calibrated once against
//! `Instant`. Elsewhere, `Instant` itself.

use std::ops::Sub;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A point in time from [`Stamp::now`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

fn raw() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; it only reads the
        // time-stamp counter (always present on x86-64).
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Ticks per second, measured once (50 ms against `Instant`).
pub fn ticks_per_sec() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        if cfg!(not(target_arch = "x86_64")) {
            return 1e9;
        }
        let (i0, t0) = (Instant::now(), raw());
        std::thread::sleep(Duration::from_millis(50));
        let (i1, t1) = (Instant::now(), raw());
        (t1.wrapping_sub(t0)) as f64 / (i1 - i0).as_secs_f64()
    })
}

fn ticks_to_duration(ticks: u64) -> Duration {
    Duration::from_secs_f64(ticks as f64 / ticks_per_sec())
}

impl Stamp {
    /// The current time.
    #[inline]
    pub fn now() -> Stamp {
        Stamp(raw())
    }
    /// Time since `self`.
    pub fn elapsed(self) -> Duration {
        Stamp::now() - self
    }
    /// Raw ticks from `earlier` to `self`: no conversion, so a timed
    /// loop can keep it and convert afterwards with [`micros`] (as
    /// perftest keeps raw cycle counts).
    #[inline]
    pub fn ticks_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// A latency loop's samples taken as perftest takes them: the time from
/// one iteration's start to the next's (perftest keeps a stamp per post
/// and reports their differences), so that whatever an iteration does
/// after its answer — claiming, re-posting, checking, preparing the next
/// request — is counted. The loop calls [`start`](Laps::start) at the top
/// of each iteration and [`stop`](Laps::stop) right after the last.
#[derive(Debug)]
pub struct Laps {
    stamps: Vec<Stamp>,
}

impl Laps {
    /// Room for `iters` iterations: no allocation while the loop runs.
    pub fn with_capacity(iters: usize) -> Self {
        Laps {
            stamps: Vec::with_capacity(iters + 1),
        }
    }

    /// Marks the start of an iteration (the end of the one before).
    #[inline]
    pub fn start(&mut self) {
        self.stamps.push(Stamp::now());
    }

    /// Marks the end of the last iteration.
    #[inline]
    pub fn stop(&mut self) {
        self.start();
    }

    /// One sample per iteration, in raw ticks (see [`micros`]).
    pub fn ticks(&self) -> Vec<u64> {
        self.stamps
            .windows(2)
            .map(|w| w[1].ticks_since(w[0]))
            .collect()
    }
}

/// When each operation of a bandwidth run was posted and when its
/// completion was seen, in raw ticks since one origin: the measured loop
/// pays a clock read and a store per operation, and the conversion to
/// seconds waits until the run is over (perftest keeps raw cycle counts
/// too). Operation `i` of the run is `posted[i]`/`completed[i]`.
#[derive(Debug)]
pub struct Timeline {
    origin: Stamp,
    posted: Vec<u64>,
    completed: Vec<u64>,
}

impl Timeline {
    /// A run timed from `origin`, with room for `n` operations: no
    /// allocation while the loop runs.
    pub fn with_capacity(origin: Stamp, n: usize) -> Self {
        Timeline {
            origin,
            posted: Vec::with_capacity(n),
            completed: Vec::with_capacity(n),
        }
    }

    /// Records `n` operations posted at `at`.
    #[inline]
    pub fn posted(&mut self, at: Stamp, n: usize) {
        let t = at.ticks_since(self.origin);
        self.posted.extend(std::iter::repeat_n(t, n));
    }

    /// Records `n` operations whose completion is seen now.
    #[inline]
    pub fn completed_now(&mut self, n: usize) {
        let t = Stamp::now().ticks_since(self.origin);
        self.completed.extend(std::iter::repeat_n(t, n));
    }

    /// Operations completed so far.
    #[inline]
    pub fn completed(&self) -> usize {
        self.completed.len()
    }

    /// Every timeline's operations in one, post and completion times each
    /// in order (perftest keeps one array over all its queue pairs), for
    /// runs whose timelines share an origin (many lanes of one run).
    pub fn merged<'a>(parts: impl IntoIterator<Item = &'a Timeline>) -> Timeline {
        let parts: Vec<&Timeline> = parts.into_iter().collect();
        let origin = parts
            .iter()
            .map(|t| t.origin)
            .min()
            .unwrap_or_else(Stamp::now);
        let n = parts.iter().map(|t| t.posted.len()).sum();
        let mut merged = Timeline::with_capacity(origin, n);
        for t in parts {
            let shift = t.origin.ticks_since(origin);
            merged.posted.extend(t.posted.iter().map(|x| x + shift));
            merged
                .completed
                .extend(t.completed.iter().map(|x| x + shift));
        }
        merged.posted.sort_unstable();
        merged.completed.sort_unstable();
        merged
    }

    /// The run's bandwidth for operations of `size` bytes (see
    /// [`Bandwidth::from_times`](crate::stats::Bandwidth::from_times));
    /// `None` if nothing completed.
    pub fn bandwidth(&self, size: usize) -> Option<crate::stats::Bandwidth> {
        let secs = |v: &[u64]| -> Vec<f64> {
            let rate = ticks_per_sec();
            v.iter().map(|&t| t as f64 / rate).collect()
        };
        crate::stats::Bandwidth::from_times(size, &secs(&self.posted), &secs(&self.completed))
    }
}

/// Microseconds in `ticks` (from [`Stamp::ticks_since`]).
pub fn micros(ticks: u64) -> f64 {
    ticks as f64 / ticks_per_sec() * 1e6
}

impl Sub for Stamp {
    type Output = Duration;
    fn sub(self, earlier: Stamp) -> Duration {
        ticks_to_duration(self.ticks_since(earlier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_time_each_iteration_to_the_next() {
        let mut laps = Laps::with_capacity(3);
        for _ in 0..3 {
            laps.start();
            std::thread::sleep(Duration::from_millis(2));
        }
        laps.stop();
        let ticks = laps.ticks();
        assert_eq!(ticks.len(), 3);
        for t in ticks {
            assert!(micros(t) >= 2000.0, "{} us", micros(t));
        }
        assert!(Laps::with_capacity(0).ticks().is_empty());
    }

    #[test]
    fn agrees_with_instant() {
        let _ = ticks_per_sec();
        let (s, i) = (Stamp::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let ticks = Stamp::now().ticks_since(s);
        let (ds, di) = (s.elapsed().as_secs_f64(), i.elapsed().as_secs_f64());
        assert!(
            (micros(ticks) / 1e6 - ds).abs() < 0.001 + ds * 0.01,
            "ticks {ticks} as {} us vs stamp {ds} s",
            micros(ticks)
        );
        assert!(
            (ds - di).abs() < 0.01 + di * 0.1,
            "stamp {ds} s vs instant {di} s"
        );
    }

    /// Two lanes, interleaved: the report is that of one timeline with
    /// every post and every completion in order, as perftest keeps it
    /// (this was perf's many-queue-pair test before the lanes kept ticks).
    #[test]
    fn lanes_merge_into_one_timeline() {
        let rate = ticks_per_sec();
        let ticks = |secs: &[f64]| -> Vec<u64> { secs.iter().map(|s| (s * rate) as u64).collect() };
        let lane = |posted: &[f64], completed: &[f64]| Timeline {
            origin: Stamp(0),
            posted: ticks(posted),
            completed: ticks(completed),
        };
        let lanes = [
            lane(&[0.0, 0.0, 2.0], &[1.0, 1.0, 3.0]),
            lane(&[0.5, 2.5], &[1.5, 4.0]),
        ];
        let merged = Timeline::merged(&lanes).bandwidth(1 << 20).unwrap();
        let one = lane(&[0.0, 0.0, 0.5, 2.0, 2.5], &[1.0, 1.0, 1.5, 3.0, 4.0])
            .bandwidth(1 << 20)
            .unwrap();
        assert_eq!(merged, one);
        // Five 1 MiB operations from 0 to 4 s.
        assert!((merged.avg_mb - 1.25).abs() < 1e-6, "{merged:?}");
        assert!((merged.mpps - 5.0 / 4.0 / 1e6).abs() < 1e-12, "{merged:?}");
    }

    #[test]
    fn a_timeline_keeps_order_and_merges_lanes_from_their_origins() {
        let origin = Stamp(1_000);
        let mut a = Timeline::with_capacity(origin, 4);
        a.posted(Stamp(1_010), 2);
        a.completed.extend([30, 30]);
        let mut b = Timeline::with_capacity(Stamp(1_005), 2);
        b.posted(Stamp(1_015), 1);
        b.completed.push(5);
        assert_eq!((a.posted.as_slice(), a.completed()), (&[10, 10][..], 2));
        // b's ticks count from 1005: shifted by 5 onto the earliest origin.
        let m = Timeline::merged([&a, &b]);
        assert_eq!(m.origin, origin);
        assert_eq!(m.posted, [10, 10, 15]);
        assert_eq!(m.completed, [10, 30, 30]);
        assert!(m.bandwidth(64).is_some());
        assert!(Timeline::with_capacity(origin, 0).bandwidth(64).is_none());
    }
}
