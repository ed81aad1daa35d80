//! The engine's clock: when a polling loop looks at the time. Every wait
//! of the engine — blocking waits, the no-reactor futures' spin, the
//! stall watchdog, the shutdown drain — reads the time through here, each
//! at the cadence this file sets.
//!
//! A clock read is dear where the clock source is not the TSC (a VM's HPET:
//! a system call and an emulated device access, microseconds), and a wait
//! that polls the completion queue must not pay one per poll. But a short
//! timeout must still fire on time. So a wait with a short timeout reads
//! the clock when it starts and every [`SHORT_EVERY`] polls; a long one
//! reads it first after [`LONG_EVERY`] polls (late by a few milliseconds
//! at most, nothing next to seconds) and then every [`LONG_EVERY`].

use std::time::{Duration, Instant};

/// Timeouts up to this are short: the clock is read from the start.
const SHORT: Duration = Duration::from_millis(100);
/// Polls between clock reads of a short wait, or of one sleeping on
/// completion events (where a poll is followed by a sleep anyway).
const SHORT_EVERY: u32 = 64;
/// Polls between clock reads of a long busy-polling wait.
const LONG_EVERY: u32 = 4096;
/// Polls between clock reads of a future's spin, and between two looks of
/// the stall watchdog of busy-polling futures.
pub(super) const SPIN_EVERY: u32 = 256;
/// Polls between clock reads of a drain (which yields between reads).
const DRAIN_EVERY: u32 = 64;

/// The clock of one wait.
#[derive(Debug)]
pub(super) struct WaitClock {
    start: Option<Instant>,
    every: u32,
    /// Polls left before the next read.
    left: u32,
}

impl WaitClock {
    /// The clock of a wait bounded by `timeout`; `events`: the wait sleeps
    /// on completion events between polls.
    pub(super) fn new(timeout: Duration, events: bool) -> Self {
        let short = timeout <= SHORT;
        let every = if short || events {
            SHORT_EVERY
        } else {
            LONG_EVERY
        };
        WaitClock {
            start: short.then(Instant::now),
            every,
            left: every,
        }
    }

    /// The clock of a future's spin: first read after a run of polls (a
    /// read at the start would put one on every awaited operation), so the
    /// spin may run one run of polls long.
    pub(super) fn spin() -> Self {
        WaitClock {
            start: None,
            every: SPIN_EVERY,
            left: SPIN_EVERY,
        }
    }

    /// The clock of a shutdown's drain.
    pub(super) fn drain() -> Self {
        WaitClock {
            start: Some(Instant::now()),
            every: DRAIN_EVERY,
            left: DRAIN_EVERY,
        }
    }

    /// The instant `elapsed` (a value [`tick`](Self::tick) returned) after
    /// the wait's start: the time of that read, without reading the clock
    /// again.
    pub(super) fn at(&self, elapsed: Duration) -> Instant {
        self.start
            .map_or_else(Instant::now, |start| start + elapsed)
    }

    /// Counts one poll that found nothing; the time waited so far when the
    /// clock is due to be read, `None` between reads.
    #[inline]
    pub(super) fn tick(&mut self) -> Option<Duration> {
        self.left -= 1;
        if self.left != 0 {
            return None;
        }
        self.left = self.every;
        Some(self.start.get_or_insert_with(Instant::now).elapsed())
    }
}

/// Now, for the stall watchdog and the completion driver's deadlines
/// (read once per driver round, or once per [`SPIN_EVERY`] idle polls).
pub(super) fn now() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_timeout_is_timed_from_the_start() {
        let mut clock = WaitClock::new(Duration::from_millis(1), false);
        std::thread::sleep(Duration::from_millis(3));
        let elapsed = (0..SHORT_EVERY).find_map(|_| clock.tick()).expect("due");
        assert!(elapsed >= Duration::from_millis(3), "{elapsed:?}");
    }

    #[test]
    fn a_long_busy_wait_reads_the_clock_rarely() {
        let mut clock = WaitClock::new(Duration::from_secs(30), false);
        let reads = (0..LONG_EVERY * 3)
            .filter(|_| clock.tick().is_some())
            .count();
        assert_eq!(reads, 3);
        let mut sleeping = WaitClock::new(Duration::from_secs(30), true);
        let reads = (0..SHORT_EVERY * 3)
            .filter(|_| sleeping.tick().is_some())
            .count();
        assert_eq!(reads, 3);
    }

    #[test]
    fn a_spin_starts_its_clock_at_its_first_read() {
        let mut clock = WaitClock::spin();
        std::thread::sleep(Duration::from_millis(3));
        let first = (0..SPIN_EVERY).find_map(|_| clock.tick()).expect("due");
        assert!(
            first < Duration::from_millis(3),
            "the sleep before is not counted: {first:?}"
        );
    }

    #[test]
    fn a_drain_is_timed_from_its_start() {
        let mut clock = WaitClock::drain();
        std::thread::sleep(Duration::from_millis(2));
        let elapsed = (0..DRAIN_EVERY).find_map(|_| clock.tick()).expect("due");
        assert!(elapsed >= Duration::from_millis(2));
    }
}
