//! The tracker's transitions, each alone, without a device: completions
//! are synthetic and the "poll" is a closure that hands them over.

use super::*;
use crate::work::owned::probe::Probe;
use crate::work::Held;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};

struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counter() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    (count, waker)
}

fn woken(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

fn attached(notify: Notify) -> Attached {
    Attached {
        held: Held::None,
        notify,
    }
}

fn success(id: u64) -> WorkCompletion {
    WorkCompletion::synthetic(id, WcStatus::Success)
}

fn flushed(id: u64) -> WorkCompletion {
    WorkCompletion::synthetic(id, WcStatus::WrFlushError)
}

/// A poll that returns `wcs` (at most the tracker's buffer).
fn poll_of(
    wcs: &[WorkCompletion],
) -> impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize> + '_ {
    move |buf| {
        buf[..wcs.len()].copy_from_slice(wcs);
        Ok(wcs.len())
    }
}

fn reap(t: &mut Tracker, wcs: &[WorkCompletion]) -> usize {
    t.reap(poll_of(wcs))
        .expect("a synthetic poll does not fail")
}

fn plain(t: &mut Tracker, op: Operation, sq: u32) -> u64 {
    t.track(op, 8, sq, Attached::default())
}

/// The status a claim of `id` sees, if it is complete.
fn status_of(t: &mut Tracker, id: u64) -> Take<WcStatus> {
    t.take(id, |_, _, wc, _| wc.status())
}

#[test]
fn admission_counts_each_queue_and_frees_room_on_completion() {
    let mut t = Tracker::new(4, 2);
    assert!(t.room_for(true, 4) && !t.room_for(true, 5));
    let batch = plain(&mut t, Operation::Write, 3);
    assert!(
        t.room_for(true, 1) && !t.room_for(true, 2),
        "a batch of 3 holds 3"
    );
    plain(&mut t, Operation::Receive, 0);
    let r = plain(&mut t, Operation::Receive, 0);
    assert!(!t.room_for(false, 1) && t.receive_room() == 0);
    assert!(t.room_for(true, 1), "receives do not use send-queue room");
    assert_eq!(t.queue_use(true), (3, 4));
    reap(&mut t, &[success(r)]);
    assert_eq!(t.receive_room(), 1);
    reap(&mut t, &[flushed(batch)]);
    assert!(t.room_for(true, 4), "a failed batch frees all its entries");
}

#[test]
fn ids_are_sequential_and_track_returns_the_id_next_id_promised() {
    let mut t = Tracker::new(8, 8);
    let promised = t.next_id();
    assert_eq!(plain(&mut t, Operation::Send, 1), promised);
    assert_eq!(t.next_id(), promised + 1);
}

#[test]
fn completions_out_of_order_end_their_own_requests() {
    let mut t = Tracker::new(8, 8);
    let w = t.track(Operation::Write, 10, 1, Attached::default());
    let r = t.track(Operation::Receive, 20, 0, Attached::default());
    let rd = t.track(Operation::Read, 30, 1, Attached::default());
    assert_eq!(t.in_flight(), 3);
    reap(&mut t, &[success(rd), success(w)]);
    assert_eq!(t.in_flight(), 1);
    assert_eq!(t.queue_use(true).0, 0);
    assert!(matches!(status_of(&mut t, r), Take::Pending));
    assert!(matches!(t.take(rd, |_, len, _, _| len), Take::Done(30)));
    assert!(matches!(t.take(w, |_, len, _, _| len), Take::Done(10)));
    assert!(t.unusable().is_none());
}

#[test]
fn a_completion_nobody_posted_is_counted_and_changes_nothing_else() {
    let mut t = Tracker::new(8, 8);
    let id = plain(&mut t, Operation::Send, 1);
    reap(&mut t, &[success(id), success(id), success(99)]);
    let c = t.counters();
    assert_eq!((c.posted, c.completed, c.in_flight), (1, 3, 0));
    assert!(matches!(
        status_of(&mut t, id),
        Take::Done(WcStatus::Success)
    ));
}

#[test]
fn a_batch_reports_its_first_failed_member() {
    let mut t = Tracker::new(8, 8);
    let id = plain(&mut t, Operation::Write, 3);
    let member = WorkCompletion::synthetic(id | BATCH_MEMBER, WcStatus::RemoteAccessError);
    let second = WorkCompletion::synthetic(id | BATCH_MEMBER, WcStatus::WrFlushError);
    reap(&mut t, &[member, second]);
    assert_eq!(t.in_flight(), 1, "a member does not end the batch");
    reap(&mut t, &[flushed(id)]);
    assert_eq!(
        t.counters().completed,
        3,
        "the batch counts its three entries"
    );
    assert_eq!(t.queue_use(true).0, 0);
    assert!(
        t.unusable().is_some(),
        "a failure makes the channel unusable"
    );
    assert!(matches!(
        status_of(&mut t, id),
        Take::Done(WcStatus::RemoteAccessError)
    ));
}

#[test]
fn a_member_completion_of_an_unknown_batch_is_counted() {
    let mut t = Tracker::new(8, 8);
    reap(
        &mut t,
        &[WorkCompletion::synthetic(
            7 | BATCH_MEMBER,
            WcStatus::WrFlushError,
        )],
    );
    assert_eq!(t.counters().completed, 1);
}

#[test]
fn the_first_failure_names_the_unusable_reason_and_later_ones_keep_it() {
    let mut t = Tracker::new(8, 8);
    let a = plain(&mut t, Operation::Read, 1);
    let b = plain(&mut t, Operation::Send, 1);
    reap(
        &mut t,
        &[
            WorkCompletion::synthetic(a, WcStatus::RemoteAccessError),
            flushed(b),
        ],
    );
    let why = t.unusable().expect("unusable").to_owned();
    assert!(why.contains("RDMA read"), "{why}");
    t.mark_unusable("later");
    assert_eq!(t.unusable(), Some(why.as_str()));
}

#[test]
fn take_gives_the_outcome_and_memory_back_once() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut t = Tracker::new(8, 8);
    let probe = Held::Probe(Probe {
        id: 1,
        log: log.clone(),
    });
    let id = t.track(
        Operation::Receive,
        64,
        0,
        Attached {
            held: probe,
            notify: Notify::Claim,
        },
    );
    assert!(matches!(
        t.take(id, |_, _, _, h| std::mem::take(h)),
        Take::Pending
    ));
    assert!(log.lock().unwrap().is_empty(), "in flight: kept");
    reap(&mut t, &[success(id)]);
    assert!(log.lock().unwrap().is_empty(), "completed, unclaimed: kept");
    let Take::Done(held) = t.take(id, |_, _, _, h| std::mem::take(h)) else {
        panic!("completed");
    };
    assert!(matches!(held, Held::Probe(_)), "the memory comes back");
    drop(held);
    assert_eq!(*log.lock().unwrap(), [1]);
    assert!(
        matches!(status_of(&mut t, id), Take::Unknown),
        "claimed once"
    );
    assert_eq!(t.counters().tracked, 0);
}

#[test]
fn poll_take_claims_its_own_completion_and_delivers_the_rest() {
    let mut t = Tracker::new(8, 8);
    let (count, waker) = counter();
    let other = t.track(Operation::Send, 1, 1, attached(Notify::Waker(waker)));
    let mine = plain(&mut t, Operation::Write, 1);
    let taken = t.poll_take(
        mine,
        poll_of(&[success(other), success(mine)]),
        None,
        |op, _, wc, _| (op, wc.status()),
    );
    assert!(matches!(
        taken,
        Ok(Take::Done((Operation::Write, WcStatus::Success)))
    ));
    assert_eq!(t.in_flight(), 0, "both counted");
    t.later().run_now();
    assert_eq!(woken(&count), 1, "the other request's task is told");
    assert!(
        matches!(status_of(&mut t, other), Take::Done(WcStatus::Success)),
        "a woken slot stays claimable"
    );
}

#[test]
fn poll_take_of_a_completed_request_does_not_poll() {
    let mut t = Tracker::new(8, 8);
    let id = plain(&mut t, Operation::Send, 1);
    reap(&mut t, &[success(id)]);
    let taken = t.poll_take(
        id,
        |_| panic!("no poll needed"),
        None,
        |_, _, wc, _| wc.status(),
    );
    assert!(matches!(taken, Ok(Take::Done(WcStatus::Success))));
}

#[test]
fn poll_take_in_flight_leaves_a_waker_and_replaces_a_foreign_one_later() {
    let mut t = Tracker::new(8, 8);
    let (first, first_waker) = counter();
    let (second, second_waker) = counter();
    let id = plain(&mut t, Operation::Read, 1);
    let empty = |_: &mut [WorkCompletion]| Ok(0);
    let r = t.poll_take(id, empty, Some(&first_waker), |_, _, _, _| ());
    assert!(matches!(r, Ok(Take::Pending)));
    let r = t.poll_take(id, empty, Some(&second_waker), |_, _, _, _| ());
    assert!(matches!(r, Ok(Take::Pending)));
    // The replaced waker is only dropped (after the lock), never woken.
    assert_eq!(Arc::strong_count(&first), 3);
    t.later().run_now();
    assert_eq!(Arc::strong_count(&first), 2);
    reap(&mut t, &[success(id)]);
    t.later().run_now();
    assert_eq!((woken(&first), woken(&second)), (0, 1));
}

#[test]
fn a_failed_poll_claims_nothing() {
    let mut t = Tracker::new(8, 8);
    let id = plain(&mut t, Operation::Send, 1);
    let failing = |_: &mut [WorkCompletion]| Err(rdma_core::Error::InvalidArgument("poll".into()));
    let r = t.poll_take(id, failing, None, |_, _, _, _| ());
    assert!(matches!(r, Err(Error::Poll(_))));
    assert_eq!(t.in_flight(), 1, "still in flight");
    assert!(t.reap(failing).is_err());
}

#[test]
fn a_post_whose_completion_is_already_there_is_never_tracked() {
    let mut t = Tracker::new(8, 8);
    let before = plain(&mut t, Operation::Send, 1);
    let id = t.next_id();
    let found = t.reap_untracked(poll_of(&[success(id)]), Operation::Send, |wc| wc.wr_id());
    assert_eq!(found, Some(id));
    let c = t.counters();
    assert_eq!(
        (c.posted, c.completed, c.in_flight, c.tracked),
        (2, 1, 1, 1)
    );
    // The id is used: the next request gets the one after, and the
    // earlier one still completes in its place.
    assert_eq!(plain(&mut t, Operation::Send, 1), id + 1);
    reap(&mut t, &[success(before)]);
    assert!(matches!(status_of(&mut t, before), Take::Done(_)));
}

#[test]
fn a_post_whose_completion_is_not_there_is_tracked_under_the_same_id() {
    let mut t = Tracker::new(8, 8);
    let other = plain(&mut t, Operation::Write, 1);
    let id = t.next_id();
    let found = t.reap_untracked(poll_of(&[success(other)]), Operation::Send, |_| ());
    assert!(found.is_none());
    assert_eq!(
        plain(&mut t, Operation::Send, 1),
        id,
        "the caller tracks it now"
    );
    assert!(
        matches!(status_of(&mut t, other), Take::Done(_)),
        "the other was delivered"
    );
}

#[test]
fn an_abandoned_request_releases_its_memory_at_its_completion_not_before() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut t = Tracker::new(8, 8);
    let (count, waker) = counter();
    let held = Held::Probe(Probe {
        id: 5,
        log: log.clone(),
    });
    let id = t.track(
        Operation::Send,
        1,
        1,
        Attached {
            held,
            notify: Notify::Waker(waker),
        },
    );
    t.abandon(id);
    t.later().run_now();
    assert!(log.lock().unwrap().is_empty(), "in flight: kept");
    assert_eq!(Arc::strong_count(&count), 1, "its waker was let go");
    reap(&mut t, &[success(id)]);
    assert!(
        log.lock().unwrap().is_empty(),
        "released only after the lock"
    );
    t.later().run_now();
    assert_eq!(*log.lock().unwrap(), [5]);
    let c = t.counters();
    assert_eq!((c.abandoned, c.tracked, c.in_flight), (1, 0, 0));
    assert_eq!(woken(&count), 0);
}

#[test]
fn abandoning_a_completed_request_releases_at_once() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut t = Tracker::new(8, 8);
    let held = Held::Probe(Probe {
        id: 9,
        log: log.clone(),
    });
    let id = t.track(
        Operation::Read,
        1,
        1,
        Attached {
            held,
            notify: Notify::Claim,
        },
    );
    reap(&mut t, &[success(id)]);
    t.abandon(id);
    t.later().run_now();
    assert_eq!(*log.lock().unwrap(), [9]);
    t.abandon(id);
    assert_eq!(t.counters().abandoned, 1, "a second abandon is a no-op");
}

#[test]
fn waiters_are_told_after_the_lock_and_callbacks_wait_their_turn() {
    let mut t = Tracker::new(8, 8);
    let (count, waker) = counter();
    let a = t.track(Operation::Send, 1, 1, attached(Notify::Waker(waker)));
    let b = t.track(Operation::Send, 1, 1, attached(Notify::Abandoned));
    let c = t.track(
        Operation::Write,
        3,
        1,
        attached(Notify::Callback(Box::new(|_, _| {}))),
    );
    reap(&mut t, &[success(a), success(b), success(c)]);
    assert_eq!(woken(&count), 0, "not woken under the lock");
    assert_eq!(t.later().len(), 1);
    t.later().run_now();
    assert_eq!(woken(&count), 1, "one wake for one completion");
    assert!(!t.contains(b), "the abandoned slot is released");
    let ready = t.next_callback().expect("a callback is ready");
    assert_eq!((ready.op, ready.len), (Operation::Write, 3));
    assert!(t.next_callback().is_none());
    assert!(!t.contains(c));
}

#[test]
fn discarding_ends_every_request_in_flight_as_flushed() {
    let mut t = Tracker::new(64, 64);
    let (count, waker) = counter();
    // Enough ids to wrap the slot ring's first capacity.
    let mut ids = Vec::new();
    for k in 0..40u64 {
        let notify = match k % 3 {
            0 => Notify::Claim,
            1 => Notify::Waker(waker.clone()),
            _ => Notify::Abandoned,
        };
        ids.push(t.track(Operation::Read, 8, u32::from(k % 2 == 0), attached(notify)));
    }
    reap(&mut t, &[success(ids[5])]);
    let mut room = None;
    t.wait_for_room(&mut room, &waker);
    assert_eq!(t.discard_in_flight(), 39);
    t.later().run_now();
    assert_eq!(t.in_flight(), 0);
    assert_eq!((t.queue_use(true).0, t.queue_use(false).0), (0, 0));
    for (k, &id) in ids.iter().enumerate() {
        let expected = if k == 5 {
            WcStatus::Success
        } else {
            WcStatus::WrFlushError
        };
        match status_of(&mut t, id) {
            Take::Done(status) => assert_eq!(status, expected, "id {id}"),
            // Abandoned (released at the flush) or woken and still here.
            Take::Unknown => assert_eq!(k % 3, 2, "id {id}"),
            Take::Pending => panic!("id {id} still in flight"),
        }
    }
    // 13 wakers among the discarded, and the task waiting for room.
    assert_eq!(woken(&count), 14);
    assert_eq!(t.counters().room_waiters, 0);
    let c = t.counters();
    assert_eq!(c.posted, c.completed);
}

#[test]
fn freed_send_queue_entries_wake_as_many_room_waiters() {
    let mut t = Tracker::new(2, 2);
    let (count, waker) = counter();
    let a = plain(&mut t, Operation::Send, 1);
    let b = plain(&mut t, Operation::Send, 1);
    let mut tickets = [None, None, None];
    for ticket in &mut tickets {
        // Three tasks (distinct wakers would be distinct tasks; one
        // counter sees all three).
        t.wait_for_room(ticket, &Waker::from(Arc::new(Count(AtomicUsize::new(0)))));
    }
    t.wait_for_room(&mut tickets[0], &waker);
    assert_eq!(
        t.counters().room_waiters,
        3,
        "a second registration replaces the first"
    );
    reap(&mut t, &[success(a)]);
    t.later().run_now();
    assert_eq!(woken(&count), 1, "one entry freed, the first task woken");
    t.pass_room_turn(tickets[0]);
    assert_eq!(t.counters().room_waiters, 1, "its turn went to the second");
    reap(&mut t, &[success(b)]);
    assert_eq!(t.counters().room_waiters, 0);
}

#[test]
fn the_stall_watchdog_counts_from_the_last_progress() {
    let mut t = Tracker::new(8, 8);
    let start = Instant::now();
    let timeout = Duration::from_secs(3);
    assert_eq!(
        t.progress_deadline(start, timeout),
        None,
        "nothing in flight"
    );
    let a = plain(&mut t, Operation::Send, 1);
    plain(&mut t, Operation::Send, 1);
    assert_eq!(t.progress_deadline(start, timeout), Some(start + timeout));
    let later = start + Duration::from_secs(2);
    assert_eq!(
        t.progress_deadline(later, timeout),
        Some(start + timeout),
        "no progress"
    );
    reap(&mut t, &[success(a)]);
    assert_eq!(
        t.progress_deadline(later, timeout),
        Some(later + timeout),
        "progress restarts it"
    );
}

#[test]
fn forgetting_and_retaining_ids() {
    let mut t = Tracker::new(8, 8);
    let a = plain(&mut t, Operation::Send, 1);
    let b = plain(&mut t, Operation::Send, 1);
    reap(&mut t, &[success(a), success(b)]);
    assert!(matches!(t.forget(a), Held::None));
    let mut ids = vec![a, b];
    t.retain_tracked(&mut ids);
    assert_eq!(ids, [b]);
    assert_eq!(t.operation_of(b), Some(Operation::Send));
    assert_eq!(t.operation_of(a), None);
}

#[test]
fn a_look_says_what_it_found_and_claims_nothing() {
    let mut t = Tracker::new(8, 8);
    let a = plain(&mut t, Operation::Send, 1);
    let b = plain(&mut t, Operation::Write, 1);
    let empty = |_: &mut [WorkCompletion]| Ok(0);
    // In flight, nothing polled: nothing to claim, nothing changed.
    assert!(matches!(t.look(a, empty, false), Found::Pending));
    // A claimer leaving a waker hears of the empty poll (it leaves the
    // waker there).
    assert!(matches!(t.look(a, empty, true), Found::Polled(_, 0)));
    assert!(matches!(t.look(99, empty, false), Found::Unknown));
    // The poll found another request's completion: still nothing claimed
    // by the look; the claim of what it found delivers it.
    let found = t.look(a, poll_of(&[success(b)]), false);
    assert!(matches!(found, Found::Polled(_, 1)));
    assert_eq!(t.completed(), 0, "a look delivers nothing");
    assert!(matches!(
        t.claim_found(a, found, None, |_, _, _, _| ()),
        Take::Pending
    ));
    assert_eq!(t.completed(), 1);
    // b's completion waits in its slot: found done, without a poll.
    let never = |_: &mut [WorkCompletion]| -> rdma_core::Result<usize> {
        panic!("a completed request is not polled for")
    };
    let found = t.look(b, never, false);
    assert!(matches!(found, Found::Done(_)));
    assert!(matches!(
        t.claim_found(b, found, None, |op, _, wc, _| (op, wc.wr_id())),
        Take::Done((Operation::Write, id)) if id == b
    ));
    // A failed poll is found as such, and its claim takes nothing.
    let failing = |_: &mut [WorkCompletion]| Err(rdma_core::Error::InvalidArgument("poll".into()));
    let found = t.look(a, failing, false);
    assert!(matches!(found, Found::Failed(_)));
    assert!(matches!(
        t.claim_found(a, found, None, |_, _, _, _| ()),
        Take::Pending
    ));
    assert_eq!(t.in_flight(), 1, "a is still in flight");
}

#[test]
fn a_spinning_look_skips_the_lookup_only_while_nothing_was_seen() {
    let mut t = Tracker::new(8, 8);
    let a = plain(&mut t, Operation::Send, 1);
    let b = plain(&mut t, Operation::Send, 1);
    let mut seen = u64::MAX;
    let empty = |_: &mut [WorkCompletion]| Ok(0);
    assert!(matches!(t.look_spin(a, &mut seen, empty), Found::Pending));
    assert_eq!(seen, t.completed(), "the first look remembers the count");
    // Another request completes, seen by someone else's reap: the next
    // spinning look looks `a` up again (and finds it still in flight).
    reap(&mut t, &[success(b)]);
    assert_ne!(seen, t.completed());
    assert!(matches!(t.look_spin(a, &mut seen, empty), Found::Pending));
    assert_eq!(seen, t.completed());
    // Its own completion polled: found at its position.
    let found = t.look_spin(a, &mut seen, poll_of(&[success(a)]));
    assert!(matches!(found, Found::Polled(_, 1)));
    assert!(matches!(
        t.claim_found(a, found, None, |_, _, wc, _| wc.wr_id()),
        Take::Done(id) if id == a
    ));
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn the_queue_pairs_state_is_looked_at_only_with_work_in_flight_and_not_too_often() {
    let mut t = Tracker::new(8, 8);
    let every = Duration::from_millis(10);
    let t0 = Instant::now();
    assert!(!t.state_look_due(t0, every), "nothing in flight");
    let id = plain(&mut t, Operation::Receive, 0);
    assert!(t.state_look_due(t0, every), "work in flight, never looked");
    assert!(!t.state_look_due(t0 + every / 2, every), "looked just now");
    assert!(t.state_look_due(t0 + every, every), "due again");
    reap(&mut t, &[success(id)]);
    assert!(
        !t.state_look_due(t0 + every * 3, every),
        "nothing in flight"
    );
}
