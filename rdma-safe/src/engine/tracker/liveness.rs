//! Liveness: what the stall watchdog and the keepalive decide from the
//! tracker's counts, given the time the watchdog read.
//!
//! Silence alone is not a failure. Receives posted for a quiet peer wait
//! as long as the peer stays quiet; only work on the send queue (sends,
//! RDMA reads and writes, atomics, window operations) can stall, and the
//! transport bounds it anyway (RC's retries). So the stall watchdog counts
//! the user's send-queue work only, and a peer that may have died while
//! nothing of the user's was outstanding is found by the opt-in keepalive:
//! after `keepalive` without a completion, with nothing on the send queue,
//! the engine posts a probe (a zero-length RDMA write) that the peer's NIC
//! acknowledges without its software; a dead peer fails it with
//! [`WcStatus::RetryExceeded`] once the retry budget is spent.
//!
//! The probe is signaled (its completion frees its send-queue entry in the
//! counts) and delivered to nobody: a success is a completion like any
//! other, which starts the next quiet period; a retry failure marks the
//! peer gone (see [`Ending`]). Probes are posted only at the watchdog's
//! looks, which read the clock anyway (the completion driver's rounds, the
//! busy-polling futures' watchdog, a blocking wait's state queries), never
//! from a poll.

use super::Tracker;
use crate::engine::attached::Notify;
use crate::engine::ending::Ending;
use rdma_core::WcStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the keepalive wants at a look of the watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keepalive {
    /// Nothing: no keepalive, the channel is unusable, or the send queue
    /// has work on it (the transport's retries bound it).
    Off,
    /// The queue pair has been quiet for the interval: post a probe now.
    Due,
    /// Quiet since a while: a probe is due at this instant.
    At(Instant),
}

impl Tracker {
    /// The stall watchdog of waits without a timer of their own: the
    /// instant by which the queue pair will have gone `timeout` without a
    /// completion while the user's send-queue work is in flight (at or
    /// before `now`: it has); `None` without such work. Posted receives
    /// alone are not a stall, and neither is the keepalive's probe.
    pub(crate) fn progress_deadline(&mut self, now: Instant, timeout: Duration) -> Option<Instant> {
        if self.sq_in_flight == usize::from(self.probe.is_some()) {
            self.progress_mark = None;
            return None;
        }
        let completed = self.completed_total;
        let since = match self.progress_mark {
            Some((mark, since)) if mark == completed => since,
            _ => {
                self.progress_mark = Some((completed, now));
                now
            }
        };
        Some(since + timeout)
    }

    /// Whether a wait without a timer of its own should ask the device
    /// for the queue pair's state now: work is in flight and the last
    /// look was at least `every` ago (the look is then counted as made).
    pub(crate) fn state_look_due(&mut self, now: Instant, every: Duration) -> bool {
        if self.in_flight == 0 {
            return false;
        }
        match self.state_looked {
            Some(at) if now.saturating_duration_since(at) < every => false,
            _ => {
                self.state_looked = Some(now);
                true
            }
        }
    }

    /// Sets the keepalive interval (`None`: no probes).
    pub(crate) fn set_keepalive(&mut self, interval: Option<Duration>) {
        self.keepalive = interval.filter(|d| !d.is_zero());
        self.quiet_mark = None;
    }

    /// The keepalive interval.
    pub(crate) fn keepalive(&self) -> Option<Duration> {
        self.keepalive
    }

    /// Whether a probe is due at `now`: the queue pair has seen no
    /// completion for the interval (counted from the first look that saw
    /// the current count) and nothing is on its send queue.
    pub(crate) fn keepalive_due(&mut self, now: Instant) -> Keepalive {
        let Some(interval) = self.keepalive else {
            return Keepalive::Off;
        };
        if self.unusable.is_some() || self.sq_in_flight > 0 {
            self.quiet_mark = None;
            return Keepalive::Off;
        }
        let completed = self.completed_total;
        let since = match self.quiet_mark {
            Some((mark, since)) if mark == completed => since,
            _ => {
                self.quiet_mark = Some((completed, now));
                now
            }
        };
        let due = since + interval;
        if now >= due {
            Keepalive::Due
        } else {
            Keepalive::At(due)
        }
    }

    /// `id`, just posted and tracked, is the keepalive's probe: delivered
    /// to nobody, it holds no memory and is not the user's work.
    pub(crate) fn probe_posted(&mut self, id: u64) {
        if let Some(slot) = self.slots.get_mut(id) {
            slot.att.notify = Notify::Keepalive;
        }
        self.probe = Some(id);
        self.quiet_mark = None;
    }

    /// The probe failed with `status` (not a flush): a retry failure means
    /// the peer is gone, and every request failing after it says so.
    #[cold]
    pub(super) fn probe_failed(&mut self, status: WcStatus) {
        if status == WcStatus::RetryExceeded {
            self.ending.peer_gone();
            self.mark_unusable(&format!(
                "the peer did not answer a keepalive probe ({status}): it is gone"
            ));
        } else {
            self.mark_unusable(&format!("a keepalive probe failed with {status}"));
        }
    }

    /// Why the queue pair was ended (shared with the engine).
    pub(in crate::engine) fn ending(&self) -> &Arc<Ending> {
        &self.ending
    }

    /// Whether the peer is known to be gone (disconnected, or silent to a
    /// probe).
    #[inline]
    pub(crate) fn peer_gone(&self) -> bool {
        self.ending.is_peer_gone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attached::Attached;
    use crate::error::Operation;
    use rdma_core::WorkCompletion;

    /// The engine's post of a probe, as the tracker sees it.
    fn post_probe(t: &mut Tracker) {
        let id = t.track(Operation::Write, 0, 1, Attached::default());
        t.probe_posted(id);
    }

    fn reap(t: &mut Tracker, wc: WorkCompletion) {
        t.reap(|buf| {
            buf[0] = wc;
            Ok(1)
        })
        .expect("a synthetic poll does not fail");
    }

    #[test]
    fn posted_receives_alone_are_not_a_stall() {
        let mut t = Tracker::new(8, 8);
        let now = Instant::now();
        let timeout = Duration::from_millis(300);
        t.track(Operation::Receive, 64, 0, Attached::default());
        t.track(Operation::Receive, 64, 0, Attached::default());
        assert_eq!(t.progress_deadline(now, timeout), None);
        assert_eq!(
            t.progress_deadline(now + timeout * 10, timeout),
            None,
            "however long the peer is quiet"
        );
        let send = t.track(Operation::Send, 8, 1, Attached::default());
        let later = now + timeout * 10;
        assert_eq!(t.progress_deadline(later, timeout), Some(later + timeout));
        reap(&mut t, WorkCompletion::synthetic(send, WcStatus::Success));
        assert_eq!(t.progress_deadline(later + timeout * 2, timeout), None);
    }

    #[test]
    fn a_probe_is_due_after_a_quiet_interval_and_is_not_a_stall() {
        let mut t = Tracker::new(8, 8);
        let now = Instant::now();
        let interval = Duration::from_millis(100);
        assert_eq!(t.keepalive_due(now), Keepalive::Off, "no keepalive set");
        t.set_keepalive(Some(interval));
        t.track(Operation::Receive, 64, 0, Attached::default());
        assert_eq!(t.keepalive_due(now), Keepalive::At(now + interval));
        assert_eq!(
            t.keepalive_due(now + interval / 2),
            Keepalive::At(now + interval)
        );
        assert_eq!(t.keepalive_due(now + interval), Keepalive::Due);
        let probe = t.next_id();
        post_probe(&mut t);
        let then = now + interval * 30;
        assert_eq!(t.keepalive_due(then), Keepalive::Off, "one probe at a time");
        assert_eq!(
            t.progress_deadline(then, interval),
            None,
            "the transport bounds the probe, not the watchdog"
        );
        assert_eq!(t.counters().tracked, 1, "the probe is not the user's work");
        reap(&mut t, WorkCompletion::synthetic(probe, WcStatus::Success));
        assert!(t.unusable().is_none() && !t.peer_gone());
        assert_eq!(t.counters().in_flight, 1, "the receive only");
        assert_eq!(
            t.keepalive_due(then),
            Keepalive::At(then + interval),
            "its completion starts the next quiet period"
        );
    }

    #[test]
    fn send_queue_work_holds_the_probe_off() {
        let mut t = Tracker::new(8, 8);
        let now = Instant::now();
        let interval = Duration::from_millis(100);
        t.set_keepalive(Some(interval));
        let send = t.track(Operation::Write, 8, 1, Attached::default());
        assert_eq!(t.keepalive_due(now + interval * 5), Keepalive::Off);
        reap(&mut t, WorkCompletion::synthetic(send, WcStatus::Success));
        let then = now + interval * 5;
        assert_eq!(t.keepalive_due(then), Keepalive::At(then + interval));
    }

    #[test]
    fn an_unanswered_probe_marks_the_peer_gone_but_a_flushed_one_does_not() {
        for (status, gone) in [
            (WcStatus::RetryExceeded, true),
            (WcStatus::WrFlushError, false),
        ] {
            let mut t = Tracker::new(8, 8);
            t.set_keepalive(Some(Duration::from_millis(1)));
            let probe = t.next_id();
            post_probe(&mut t);
            reap(&mut t, WorkCompletion::synthetic(probe, status));
            assert_eq!(t.peer_gone(), gone, "{status}");
            assert_eq!(t.ending().is_peer_gone(), gone);
            assert_eq!(t.counters().in_flight, 0);
            assert_eq!(t.counters().tracked, 0, "nobody claims a probe");
            if gone {
                let why = t.unusable().expect("unusable");
                assert!(why.contains("keepalive"), "{why}");
            }
        }
    }
}
