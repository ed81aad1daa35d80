//! The tracker against a reference model: random sequences of posts,
//! completions (in any order, batches' members included), abandons,
//! claims and flushes, checked after every step for the properties the
//! safe layer rests on:
//!
//! - no memory is released before its request's completion was seen, and
//!   all of it is released exactly once;
//! - a claim gets its own request's outcome (a batch's first failed
//!   member's), never another's, and only once it completed;
//! - the counts balance: in flight, queue room, posted against completed.

use super::*;
use crate::work::owned::probe::Probe;
use crate::work::Held;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const SQ: usize = 6;
const RQ: usize = 4;

#[derive(Debug, Clone)]
enum Step {
    /// A send-queue request of 1 to 3 entries (a batch), or a receive
    /// (`entries` 0); abandoned at once if `abandon`.
    Post { entries: u32, abandon: bool },
    /// The completion of the `pick`th request in flight, failed or not;
    /// for a batch with `member`, first an error of one of its members.
    Complete {
        pick: usize,
        fail: bool,
        member: bool,
    },
    /// The `pick`th tracked request is abandoned.
    Abandon { pick: usize },
    /// The `pick`th tracked request is claimed (`poll`: through
    /// `poll_take`, its completion polled at the same time if in flight).
    Take { pick: usize, poll: bool },
    /// A spinning wait's look at the `pick`th tracked request
    /// (`spin_take`, with what that wait saw at its last look); its poll
    /// finds its own completion if `own` and it is in flight, else
    /// nothing.
    Spin { pick: usize, own: bool },
    /// Everything in flight is discarded (a reset).
    Flush,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u32..=3, any::<bool>()).prop_map(|(entries, abandon)| Step::Post { entries, abandon }),
        4 => (any::<usize>(), prop::bool::weighted(0.2), any::<bool>())
            .prop_map(|(pick, fail, member)| Step::Complete { pick, fail, member }),
        1 => any::<usize>().prop_map(|pick| Step::Abandon { pick }),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(pick, poll)| Step::Take { pick, poll }),
        3 => (any::<usize>(), prop::bool::weighted(0.3)).prop_map(|(pick, own)| Step::Spin { pick, own }),
        1 => Just(Step::Flush),
    ]
}

/// What the model knows of one request.
#[derive(Debug)]
struct Expected {
    entries: u32,
    /// The status its claim must report, once complete.
    done: Option<WcStatus>,
    /// The first failed member's status, if one failed.
    member: Option<WcStatus>,
    abandoned: bool,
}

struct Model {
    t: Tracker,
    requests: BTreeMap<u64, Expected>,
    released: Arc<Mutex<Vec<u64>>>,
    /// Ids whose memory came back through a claim.
    claimed: Vec<u64>,
    /// Each spinning wait's `seen` (by the id it waits for).
    seen: BTreeMap<u64, u64>,
    posted: u64,
    completed: u64,
}

impl Model {
    fn new() -> Self {
        Model {
            t: Tracker::new(SQ, RQ),
            requests: BTreeMap::new(),
            released: Arc::new(Mutex::new(Vec::new())),
            claimed: Vec::new(),
            seen: BTreeMap::new(),
            posted: 0,
            completed: 0,
        }
    }

    fn in_flight(&self) -> Vec<u64> {
        self.requests
            .iter()
            .filter(|(_, r)| r.done.is_none())
            .map(|(&id, _)| id)
            .collect()
    }

    fn pick(ids: &[u64], pick: usize) -> Option<u64> {
        (!ids.is_empty()).then(|| ids[pick % ids.len()])
    }

    fn run(&mut self, step: Step) {
        match step {
            Step::Post { entries, abandon } => {
                let send = entries > 0;
                if !self.t.room_for(send, entries.max(1) as usize) {
                    return;
                }
                let id = self.t.next_id();
                let held = Held::Probe(Probe {
                    id,
                    log: self.released.clone(),
                });
                let att = Attached {
                    held,
                    notify: Notify::Claim,
                };
                let op = if send {
                    Operation::Write
                } else {
                    Operation::Receive
                };
                assert_eq!(self.t.track(op, 1, entries, att), id);
                self.posted += u64::from(entries.max(1));
                self.requests.insert(
                    id,
                    Expected {
                        entries,
                        done: None,
                        member: None,
                        abandoned: false,
                    },
                );
                if abandon {
                    self.abandon(id);
                }
            }
            Step::Complete { pick, fail, member } => {
                let Some(id) = Self::pick(&self.in_flight(), pick) else {
                    return;
                };
                let mut wcs = Vec::new();
                let entries = self.requests[&id].entries;
                if member && entries > 1 {
                    let status = WcStatus::RemoteAccessError;
                    wcs.push(WorkCompletion::synthetic(id | BATCH_MEMBER, status));
                    self.requests.get_mut(&id).unwrap().member = Some(status);
                }
                let status = if fail {
                    WcStatus::RemoteOperationError
                } else {
                    WcStatus::Success
                };
                wcs.push(WorkCompletion::synthetic(id, status));
                let r = self.requests.get_mut(&id).unwrap();
                r.done = Some(r.member.unwrap_or(status));
                self.completed += u64::from(entries.max(1));
                let n = wcs.len();
                let polled = self.t.reap(|buf| {
                    buf[..n].copy_from_slice(&wcs);
                    Ok(n)
                });
                assert_eq!(polled.ok(), Some(n));
                self.forget_abandoned_done();
            }
            Step::Abandon { pick } => {
                let ids: Vec<u64> = self.requests.keys().copied().collect();
                if let Some(id) = Self::pick(&ids, pick) {
                    self.abandon(id);
                }
            }
            Step::Take { pick, poll } => {
                let ids: Vec<u64> = self.requests.keys().copied().collect();
                let Some(id) = Self::pick(&ids, pick) else {
                    return;
                };
                if self.requests[&id].abandoned {
                    return;
                }
                let outcome = |_: Operation, _: usize, wc: &WorkCompletion, held: &mut Held| {
                    (wc.status(), std::mem::take(held))
                };
                let taken = if poll {
                    // Nothing new on the CQ: a claim of a request in flight
                    // stays pending.
                    self.t
                        .poll_take(id, |_| Ok(0), None, outcome)
                        .expect("a poll of nothing")
                } else {
                    self.t.take(id, outcome)
                };
                self.settle_take(id, taken);
            }
            Step::Spin { pick, own } => {
                let ids: Vec<u64> = self.requests.keys().copied().collect();
                let Some(id) = Self::pick(&ids, pick) else {
                    return;
                };
                if self.requests[&id].abandoned {
                    return;
                }
                let mut wcs = Vec::new();
                if own && self.requests[&id].done.is_none() {
                    wcs.push(WorkCompletion::synthetic(id, WcStatus::Success));
                    let r = self.requests.get_mut(&id).unwrap();
                    r.done = Some(r.member.unwrap_or(WcStatus::Success));
                    self.completed += u64::from(r.entries.max(1));
                }
                let n = wcs.len();
                let mut seen = self.seen.get(&id).copied().unwrap_or(u64::MAX);
                let taken = self
                    .t
                    .spin_take(
                        id,
                        &mut seen,
                        |buf| {
                            buf[..n].copy_from_slice(&wcs);
                            Ok(n)
                        },
                        |_, _, wc, held| (wc.status(), std::mem::take(held)),
                    )
                    .expect("a synthetic poll");
                self.seen.insert(id, seen);
                self.settle_take(id, taken);
            }
            Step::Flush => {
                for id in self.in_flight() {
                    let r = self.requests.get_mut(&id).unwrap();
                    r.done = Some(r.member.unwrap_or(WcStatus::WrFlushError));
                    self.completed += u64::from(r.entries.max(1));
                }
                self.t.discard_in_flight();
                self.forget_abandoned_done();
            }
        }
        self.t.later().run_now();
        self.check();
    }

    /// Checks a claim of `id` against the model: its own outcome and
    /// memory once complete, pending while in flight.
    fn settle_take(&mut self, id: u64, taken: Take<(WcStatus, Held)>) {
        match (taken, self.requests[&id].done) {
            (Take::Done((status, held)), Some(expected)) => {
                assert_eq!(status, expected, "id {id} got another outcome");
                assert!(
                    matches!(&held, Held::Probe(p) if p.id == id),
                    "id {id}'s memory"
                );
                drop(held);
                self.claimed.push(id);
                self.requests.remove(&id);
                self.seen.remove(&id);
            }
            (Take::Pending, None) => {}
            (taken, expected) => panic!("id {id}: took {taken:?}, expected {expected:?}"),
        }
    }

    fn abandon(&mut self, id: u64) {
        self.t.abandon(id);
        self.requests.get_mut(&id).unwrap().abandoned = true;
        self.forget_abandoned_done();
    }

    /// Abandoned requests whose completion was seen are gone (released).
    fn forget_abandoned_done(&mut self) {
        self.requests
            .retain(|_, r| !(r.abandoned && r.done.is_some()));
    }

    fn check(&self) {
        let released = self.released.lock().unwrap();
        let mut seen = released.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen.len(),
            released.len(),
            "memory released twice: {released:?}"
        );
        for id in released.iter() {
            assert!(
                !self.requests.contains_key(id),
                "id {id}'s memory released while it is tracked: {:?}",
                self.requests.get(id)
            );
        }
        let c = self.t.counters();
        let in_flight = self.in_flight();
        assert_eq!(c.in_flight, in_flight.len());
        assert_eq!(c.tracked, self.requests.len());
        assert_eq!((c.posted, c.completed), (self.posted, self.completed));
        let sq: u32 = in_flight.iter().map(|id| self.requests[id].entries).sum();
        let rq = in_flight
            .iter()
            .filter(|id| self.requests[id].entries == 0)
            .count();
        assert_eq!(self.t.queue_use(true), (sq as usize, SQ));
        assert_eq!(self.t.queue_use(false), (rq, RQ));
    }

    /// Flushes, claims what is left: every request's memory was released
    /// exactly once.
    fn finish(mut self) {
        self.run(Step::Flush);
        let ids: Vec<u64> = self.requests.keys().copied().collect();
        for id in ids {
            assert!(matches!(
                self.t.take(id, |_, _, _, held| drop(std::mem::take(held))),
                Take::Done(())
            ));
            self.claimed.push(id);
            self.requests.remove(&id);
        }
        self.t.later().run_now();
        let released = self.released.lock().unwrap().len() as u64;
        assert_eq!(
            released,
            self.t.next_id() - 1,
            "every request's memory came back"
        );
        assert_eq!(self.posted, self.completed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_tracker_keeps_memory_until_completion_and_counts_balance(
        steps in prop::collection::vec(step(), 1..120)
    ) {
        let mut model = Model::new();
        for step in steps {
            model.run(step);
        }
        model.finish();
    }
}
