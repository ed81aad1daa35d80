//! The memory oracle: which byte ranges each posted request may still read
//! or write, from its post until the layer delivers its completion, and the
//! checks that fail a test when memory is handed back while a request on it
//! is still in the NIC's hands.
//!
//! One oracle for the process (a completion may be polled on another
//! thread than its post): queue pairs are told apart by number, which no two
//! live queue pairs share. A queue pair's requests leave it when their
//! completion is delivered, when it is moved to RESET or destroyed (both
//! discard queued requests without completions), and a shared receive
//! queue's when it is destroyed.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// A byte range a request names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    /// The NIC writes it (a receive, an RDMA read's or an atomic's target);
    /// otherwise it reads it.
    pub(crate) write: bool,
}

impl Span {
    fn overlaps(&self, addr: u64, len: u64) -> bool {
        let (a, b) = (self.addr, self.addr + u64::from(self.len));
        len > 0 && self.len > 0 && a < addr.saturating_add(len) && addr < b
    }
}

/// A posted request still in the NIC's hands.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) wr_id: u64,
    pub(crate) spans: Vec<Span>,
    /// The post call it came from (unique), and its index in that list.
    pub(crate) post: u64,
    pub(crate) index: usize,
}

/// A queue requests wait on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Queue {
    /// A queue pair's send queue, by QP number.
    Send(u32),
    /// A queue pair's receive queue.
    Recv(u32),
    /// A shared receive queue, by address.
    Srq(usize),
}

#[derive(Default)]
struct Oracle {
    queues: HashMap<Queue, VecDeque<Entry>>,
    /// The SRQ (by address) each QP number takes its receives from.
    srq_of: HashMap<u32, usize>,
    posts: u64,
}

static ORACLE: LazyLock<Mutex<Oracle>> = LazyLock::new(Mutex::default);

/// The oracle, whatever a panicking holder left (every update is one
/// complete step).
fn oracle() -> MutexGuard<'static, Oracle> {
    ORACLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh id for one post call's entries.
pub(crate) fn next_post() -> u64 {
    let mut o = oracle();
    o.posts += 1;
    o.posts
}

/// Records `entries`, about to be posted to `queue`.
pub(crate) fn record(queue: Queue, entries: impl IntoIterator<Item = Entry>) {
    oracle().queues.entry(queue).or_default().extend(entries);
}

/// Forgets the entries of post `post` on `queue` from index `from` on: the
/// provider did not queue them.
pub(crate) fn unrecord(queue: Queue, post: u64, from: usize) {
    if let Some(q) = oracle().queues.get_mut(&queue) {
        q.retain(|e| e.post != post || e.index < from);
    }
}

/// Queue pair `qp_num` takes its receives from the SRQ at `srq`.
pub(crate) fn attach_srq(qp_num: u32, srq: usize) {
    oracle().srq_of.insert(qp_num, srq);
}

/// Queue pair `qp_num` was moved to RESET (`destroyed`: or destroyed): its
/// queued requests are gone without completions.
pub(crate) fn discard_qp(qp_num: u32, destroyed: bool) {
    let mut o = oracle();
    o.queues.remove(&Queue::Send(qp_num));
    o.queues.remove(&Queue::Recv(qp_num));
    if destroyed {
        o.srq_of.remove(&qp_num);
    }
}

/// The SRQ at `srq` was destroyed, with its queued receives.
pub(crate) fn discard_srq(srq: usize) {
    oracle().queues.remove(&Queue::Srq(srq));
}

/// The layer delivers a completion of request `wr_id` on queue pair
/// `qp_num`; `recv` says which queue, when the completion says (a
/// success's opcode), else `None` (an error's opcode is undefined).
pub(crate) fn delivered(qp_num: u32, wr_id: u64, recv: Option<bool>) {
    let mut o = oracle();
    let srq = o.srq_of.get(&qp_num).copied();
    let take_recv = |o: &mut Oracle| {
        let found =
            |q: &mut VecDeque<Entry>| q.iter().position(|e| e.wr_id == wr_id).map(|i| q.remove(i));
        o.queues
            .get_mut(&Queue::Recv(qp_num))
            .and_then(found)
            .is_some()
            || srq
                .and_then(|s| o.queues.get_mut(&Queue::Srq(s)))
                .and_then(found)
                .is_some()
    };
    // A send queue completes in order: a completion also ends the
    // unsignaled requests posted before it.
    let take_send = |o: &mut Oracle| {
        let Some(q) = o.queues.get_mut(&Queue::Send(qp_num)) else {
            return false;
        };
        let Some(i) = q.iter().position(|e| e.wr_id == wr_id) else {
            return false;
        };
        q.drain(..=i);
        true
    };
    match recv {
        Some(true) => drop(take_recv(&mut o)),
        Some(false) => drop(take_send(&mut o)),
        None => {
            if !take_recv(&mut o) {
                take_send(&mut o);
            }
        }
    }
}

/// A request found in the NIC's hands by a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where it waits.
    queue: String,
    /// Its `wr_id`.
    pub wr_id: u64,
    /// The range it names: address, length, and whether the NIC writes it.
    pub span: (u64, u32, bool),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (addr, len, write) = self.span;
        write!(
            f,
            "request wr_id {:#x} on {} may still {} {addr:#x}..{:#x} ({len} bytes)",
            self.wr_id,
            self.queue,
            if write { "write" } else { "read" },
            addr + u64::from(len),
        )
    }
}

fn queue_name(q: Queue) -> String {
    match q {
        Queue::Send(n) => format!("the send queue of QP {n}"),
        Queue::Recv(n) => format!("the receive queue of QP {n}"),
        Queue::Srq(a) => format!("the SRQ at {a:#x}"),
    }
}

/// The first recorded request (if any) naming a byte of
/// `addr..addr + len`.
pub fn overlapping(addr: *const u8, len: usize) -> Option<Violation> {
    let o = oracle();
    for (q, entries) in &o.queues {
        for e in entries {
            if let Some(s) = e.spans.iter().find(|s| s.overlaps(addr as u64, len as u64)) {
                return Some(Violation {
                    queue: queue_name(*q),
                    wr_id: e.wr_id,
                    span: (s.addr, s.len, s.write),
                });
            }
        }
    }
    None
}

/// The first recorded request (if any) of queue pair `qp_num`'s own queues
/// whose `wr_id` `ours` accepts.
pub fn unfinished(qp_num: u32, ours: impl Fn(u64) -> bool) -> Option<Violation> {
    let o = oracle();
    for q in [Queue::Send(qp_num), Queue::Recv(qp_num)] {
        for e in o.queues.get(&q).into_iter().flatten() {
            if ours(e.wr_id) {
                let s = e.spans.first().copied().unwrap_or(Span {
                    addr: 0,
                    len: 0,
                    write: false,
                });
                return Some(Violation {
                    queue: queue_name(q),
                    wr_id: e.wr_id,
                    span: (s.addr, s.len, s.write),
                });
            }
        }
    }
    None
}

/// How many requests of queue pair `qp_num` (its send and receive queues)
/// are recorded.
pub fn in_flight(qp_num: u32) -> usize {
    let o = oracle();
    [Queue::Send(qp_num), Queue::Recv(qp_num)]
        .iter()
        .map(|q| o.queues.get(q).map_or(0, VecDeque::len))
        .sum()
}

/// Fails the test if a recorded request names a byte of
/// `addr..addr + len`, which the caller is handing back (`what` says how):
/// the NIC may still read or write it.
///
/// # Panics
/// On such a request, naming it and the range (not while already
/// panicking: a second panic would abort).
pub fn check_released(addr: *const u8, len: usize, what: &str) {
    if std::thread::panicking() {
        return;
    }
    if let Some(v) = overlapping(addr, len) {
        panic!(
            "memory oracle: {what} ({:#x}..{:#x}), but {v}",
            addr as u64,
            addr as u64 + len as u64
        );
    }
}

/// Fails the test if a request of queue pair `qp_num` whose `wr_id` `ours`
/// accepts is still recorded: the caller is ending the borrow of its
/// memory (`what` says how).
///
/// # Panics
/// On such a request, naming it and its first range (not while already
/// panicking).
pub fn check_finished(qp_num: u32, ours: impl Fn(u64) -> bool, what: &str) {
    if std::thread::panicking() {
        return;
    }
    if let Some(v) = unfinished(qp_num, ours) {
        panic!("memory oracle: {what}, but {v}");
    }
}
