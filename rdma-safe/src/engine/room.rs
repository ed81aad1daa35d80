//! Tasks waiting for room in the send queue: a first-in, first-out list of
//! registrations, one per waiting task.
//!
//! A task registers with a ticket it keeps. Tickets are handed out in order
//! and served from the front, so "is my registration still queued?" is one
//! comparison with the front's ticket, and a queued registration is found
//! by subtraction: polling a waiting future again replaces its waker in
//! place instead of adding a second entry. The list therefore holds at most
//! one entry per waiting task, plus the entries of tasks that gave up
//! (emptied in place and dropped as the front passes them, or trimmed from
//! the back at once).

use super::later::Later;
use std::collections::VecDeque;
use std::task::Waker;

/// The waiting list.
#[derive(Debug, Default)]
pub(crate) struct RoomWaiters {
    /// The ticket of `queue[0]`.
    front: u64,
    /// A waker per queued ticket; `None` for a task that gave up.
    queue: VecDeque<Option<Waker>>,
}

impl RoomWaiters {
    /// Registers the task of `waker`, or renews its registration if
    /// `ticket` names one that is still queued (a replaced waker goes to
    /// `later`, dropped once the lock is released).
    pub(crate) fn register(&mut self, ticket: &mut Option<u64>, waker: &Waker, later: &mut Later) {
        if let Some(t) = *ticket {
            if let Some(entry) = self.entry(t) {
                match entry {
                    Some(w) if w.will_wake(waker) => {}
                    e => {
                        if let Some(old) = e.replace(waker.clone()) {
                            later.release(old);
                        }
                    }
                }
                return;
            }
        }
        self.queue.push_back(Some(waker.clone()));
        *ticket = Some(self.front + self.queue.len() as u64 - 1);
    }

    /// The queued entry of ticket `t`, if the front has not passed it.
    fn entry(&mut self, t: u64) -> Option<&mut Option<Waker>> {
        let k = t.checked_sub(self.front)?;
        self.queue.get_mut(usize::try_from(k).ok()?)
    }

    /// Wakes up to `n` waiting tasks, oldest first: their wakers go to
    /// `later`, woken once the lock is released.
    pub(crate) fn wake(&mut self, n: usize, later: &mut Later) {
        let mut woken = 0;
        while woken < n {
            let Some(entry) = self.queue.pop_front() else {
                break;
            };
            self.front += 1;
            if let Some(w) = entry {
                later.wake(w);
                woken += 1;
            }
        }
    }

    /// Wakes every waiting task.
    pub(crate) fn wake_all(&mut self, later: &mut Later) {
        self.wake(usize::MAX, later);
    }

    /// The task of `ticket` gives up waiting (its waker goes to `later`,
    /// dropped once the lock is released). Returns `true` if it had been
    /// woken already (its turn should go to the next task).
    pub(crate) fn cancel(&mut self, ticket: u64, later: &mut Later) -> bool {
        match self.entry(ticket) {
            Some(entry) => {
                if let Some(old) = entry.take() {
                    later.release(old);
                }
                while matches!(self.queue.back(), Some(None)) {
                    self.queue.pop_back();
                }
                while matches!(self.queue.front(), Some(None)) {
                    self.queue.pop_front();
                    self.front += 1;
                }
                false
            }
            None => true,
        }
    }

    /// Entries in the list (for tests and counters).
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Counter(AtomicUsize);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn counter() -> (Arc<Counter>, Waker) {
        let c = Arc::new(Counter(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn a_task_polled_many_times_has_one_entry() {
        let mut room = RoomWaiters::default();
        let mut later = Later::default();
        let (c, w) = counter();
        let mut ticket = None;
        for _ in 0..1000 {
            room.register(&mut ticket, &w, &mut later);
        }
        assert_eq!(room.len(), 1);
        room.wake(1, &mut later);
        later.run_now();
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        assert!(room.is_empty());
        // Served: the next registration is a new entry.
        room.register(&mut ticket, &w, &mut later);
        assert_eq!(room.len(), 1);
    }

    #[test]
    fn a_new_waker_replaces_the_old_in_place() {
        let mut room = RoomWaiters::default();
        let mut later = Later::default();
        let (old, w1) = counter();
        let (new, w2) = counter();
        let mut ticket = None;
        room.register(&mut ticket, &w1, &mut later);
        room.register(&mut ticket, &w2, &mut later);
        assert_eq!(room.len(), 1);
        room.wake_all(&mut later);
        later.run_now();
        assert_eq!(old.0.load(Ordering::SeqCst), 0);
        assert_eq!(new.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn served_in_order_and_cancelled_entries_are_skipped() {
        let mut room = RoomWaiters::default();
        let mut later = Later::default();
        let tasks: Vec<_> = (0..4).map(|_| counter()).collect();
        let mut tickets = [None; 4];
        for (t, (_, w)) in tickets.iter_mut().zip(&tasks) {
            room.register(t, w, &mut later);
        }
        // The second gives up before its turn: not woken, not counted.
        assert!(!room.cancel(tickets[1].unwrap(), &mut later));
        room.wake(2, &mut later);
        later.run_now();
        let woken: Vec<usize> = tasks
            .iter()
            .map(|(c, _)| c.0.load(Ordering::SeqCst))
            .collect();
        assert_eq!(woken, [1, 0, 1, 0]);
        // The first was served: cancelling now says its turn was given.
        assert!(room.cancel(tickets[0].unwrap(), &mut later));
        assert_eq!(room.len(), 1);
    }

    #[test]
    fn cancelling_the_last_trims_the_list() {
        let mut room = RoomWaiters::default();
        let mut later = Later::default();
        let (_, w) = counter();
        let mut tickets = [None; 3];
        for t in tickets.iter_mut() {
            room.register(t, &w, &mut later);
        }
        room.cancel(tickets[2].unwrap(), &mut later);
        room.cancel(tickets[1].unwrap(), &mut later);
        assert_eq!(room.len(), 1);
        room.cancel(tickets[0].unwrap(), &mut later);
        assert!(room.is_empty());
        // Tickets handed out later still find their entries.
        let mut t = None;
        room.register(&mut t, &w, &mut later);
        room.register(&mut t, &w, &mut later);
        assert_eq!(room.len(), 1);
    }
}
