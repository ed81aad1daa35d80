//! The layer's side of the verbs: what the feature's `#[cfg]` hooks in
//! `qp.rs`, `srq.rs`, `cq.rs`, `mr.rs` and `qp_builder.rs` call instead of
//! (or before) the verb. Each consults this thread's plan, calls the real
//! verb as the fault says, and keeps the oracle up to date.

use super::oracle::{self, Entry, Queue, Span};
use super::schedule::{self, Fault, Semantics, Site};
use crate::error::{Error, PostError, Result};
use crate::qp::QueuePair;
use crate::srq::SharedReceiveQueue;
use crate::wc::WorkCompletion;
use crate::wr::{self, RecvRequest, SendRequest};
use ibverbs_sys as sys;
use std::ffi::c_int;
use std::ptr;

/// The spans of a send request: what its SGEs name, read by the NIC but
/// for an RDMA read's or an atomic's target, written; none for inline data
/// (read during the call).
fn send_spans(w: &SendRequest<'_>) -> Vec<Span> {
    use sys::ibv_wr_opcode as O;
    let raw = w.as_raw();
    if raw.send_flags & sys::ibv_send_flags::IBV_SEND_INLINE.0 != 0 {
        return Vec::new();
    }
    let write = matches!(
        raw.opcode,
        O::IBV_WR_RDMA_READ | O::IBV_WR_ATOMIC_CMP_AND_SWP | O::IBV_WR_ATOMIC_FETCH_AND_ADD
    );
    spans(w.sges(), write)
}

/// The spans of SGEs the NIC writes (`write`) or reads.
fn spans(sges: &[crate::Sge], write: bool) -> Vec<Span> {
    sges.iter()
        .filter(|s| s.length() > 0)
        .map(|s| Span {
            addr: s.addr(),
            len: s.length(),
            write,
        })
        .collect()
}

/// One post of `wrs` to `queue` through `real` (the verb, on a sublist),
/// as this thread's plan says: records every request before the verb runs
/// (a completion may be polled on another thread before it returns), then
/// forgets those the outcome says were not queued.
///
/// # Safety
/// `real`'s: the requests' memory is the post verb's contract.
pub(super) unsafe fn post<R>(
    site: Site,
    qp: Option<&QueuePair>,
    queue: Queue,
    verb: &'static str,
    wrs: &mut [R],
    entry: impl Fn(&R) -> (u64, Vec<Span>),
    mut real: impl FnMut(&mut [R]) -> Result<(), PostError>,
) -> Result<(), PostError> {
    let n = wrs.len();
    if n == 0 {
        return Ok(());
    }
    let post = oracle::next_post();
    oracle::record(
        queue,
        wrs.iter().enumerate().map(|(index, w)| {
            let (wr_id, spans) = entry(w);
            Entry {
                wr_id,
                spans,
                post,
                index,
            }
        }),
    );
    // A sublist's error, as the whole list's (`from`: where the sublist starts).
    let whole = |e: PostError, from: usize| {
        PostError::new(e.verb(), e.errno(), e.posted().map(|k| k + from), n)
    };
    let result = match schedule::decide(site, qp.map(QueuePair::qp_num)) {
        None => real(wrs),
        Some(Fault::RefusePost {
            at,
            errno,
            semantics,
        }) => {
            let at = at.min(n - 1);
            match semantics {
                Semantics::NamesBadWr => real(&mut wrs[..at])
                    .map_err(|e| whole(e, 0))
                    .and(Err(PostError::new(verb, errno, Some(at), n))),
                Semantics::RingWritten => real(wrs).and(Err(PostError::new(verb, errno, None, n))),
            }
        }
        Some(Fault::FlushAt { at }) => {
            let at = at.min(n);
            real(&mut wrs[..at])
                .map_err(|e| whole(e, 0))
                .and_then(|()| {
                    if let Some(Err(e)) = qp.map(QueuePair::to_error) {
                        log::error!("fault injection: moving QP to ERR failed: {e}");
                    }
                    real(&mut wrs[at..]).map_err(|e| whole(e, at))
                })
        }
        Some(other) => unreachable!("{other:?} is refused at {site:?} by Plan::at"),
    };
    if let Err(e) = &result {
        // `None`: perhaps all of it queued; the oracle keeps all of it.
        if let Some(k) = e.posted() {
            oracle::unrecord(queue, post, k);
        }
    }
    result
}

/// A real `ibv_post_send`/`ibv_post_recv`/`ibv_post_srq_recv` on a linked
/// sublist, reported as the feature-off code reports it.
macro_rules! real_post {
    ($verb:ident, $obj:expr, $list:expr) => {{
        let list = $list;
        match wr::link(list) {
            None => Ok(()),
            Some(head) => {
                let mut bad = ptr::null_mut();
                // SAFETY: the object is alive; `head` is a null-terminated
                // list of well-formed requests borrowed for the call; the
                // memory they name is the caller's contract.
                let rc = unsafe { sys::$verb($obj, head, &mut bad) };
                if rc == 0 {
                    Ok(())
                } else {
                    let n = list.len();
                    Err(PostError::new(
                        stringify!($verb),
                        rc,
                        wr::posted_before(head, n, bad),
                        n,
                    ))
                }
            }
        }
    }};
}

/// [`QueuePair::post_send_list`] under the layer.
///
/// # Safety
/// As [`QueuePair::post_send_list`].
pub(crate) unsafe fn post_send(
    qp: &QueuePair,
    wrs: &mut [SendRequest<'_>],
) -> Result<(), PostError> {
    let q = Queue::Send(qp.qp_num());
    let entry = |w: &SendRequest<'_>| (w.wr_id(), send_spans(w));
    let real = |l: &mut [SendRequest<'_>]| real_post!(ibv_post_send, qp.as_ptr(), l);
    // SAFETY: forwarded to the caller.
    unsafe {
        post(
            Site::PostSend,
            Some(qp),
            q,
            "ibv_post_send",
            wrs,
            entry,
            real,
        )
    }
}

/// [`QueuePair::post_recv_list`] under the layer.
///
/// # Safety
/// As [`QueuePair::post_recv_list`].
pub(crate) unsafe fn post_recv(
    qp: &QueuePair,
    wrs: &mut [RecvRequest<'_>],
) -> Result<(), PostError> {
    let q = Queue::Recv(qp.qp_num());
    let entry = |w: &RecvRequest<'_>| (w.wr_id(), spans(w.sges(), true));
    let real = |l: &mut [RecvRequest<'_>]| real_post!(ibv_post_recv, qp.as_ptr(), l);
    // SAFETY: forwarded to the caller.
    unsafe {
        post(
            Site::PostRecv,
            Some(qp),
            q,
            "ibv_post_recv",
            wrs,
            entry,
            real,
        )
    }
}

/// [`SharedReceiveQueue::post_recv_list`] under the layer.
///
/// # Safety
/// As [`SharedReceiveQueue::post_recv_list`].
pub(crate) unsafe fn post_srq_recv(
    srq: &SharedReceiveQueue,
    wrs: &mut [RecvRequest<'_>],
) -> Result<(), PostError> {
    let q = Queue::Srq(srq.as_ptr() as usize);
    let entry = |w: &RecvRequest<'_>| (w.wr_id(), spans(w.sges(), true));
    let real = |l: &mut [RecvRequest<'_>]| real_post!(ibv_post_srq_recv, srq.as_ptr(), l);
    // SAFETY: forwarded to the caller.
    unsafe {
        post(
            Site::PostSrqRecv,
            None,
            q,
            "ibv_post_srq_recv",
            wrs,
            entry,
            real,
        )
    }
}

/// A raw list posted by [`QueuePair::post_send`]/[`post_recv`] or
/// [`SharedReceiveQueue::post_recv`] (no faults there): records it, walking
/// `next`, and returns the post id and the list's length.
///
/// [`post_recv`]: QueuePair::post_recv
///
/// # Safety
/// `head` is a well-formed, null-terminated list.
pub(crate) unsafe fn record_raw<T: RawWr>(queue: Queue, head: *const T) -> (u64, usize) {
    let post = oracle::next_post();
    let mut entries = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: the list is well-formed (the caller's contract).
        let w = unsafe { &*cur };
        entries.push(Entry {
            wr_id: w.wr_id(),
            // SAFETY: as above, its SGE array too.
            spans: unsafe { w.spans() },
            post,
            index: entries.len(),
        });
        cur = w.next();
    }
    let n = entries.len();
    oracle::record(queue, entries);
    (post, n)
}

/// After a raw post of `n` requests from `head` that failed with `bad`:
/// forgets what the provider says it did not queue.
pub(crate) fn unrecord_raw<T>(queue: Queue, post: u64, head: *const T, n: usize, bad: *const T) {
    if let Some(k) = wr::posted_before(head, n, bad) {
        oracle::unrecord(queue, post, k);
    }
}

/// The raw request structs the unfaulted raw posts take.
pub(crate) trait RawWr {
    fn wr_id(&self) -> u64;
    fn next(&self) -> *const Self;
    /// # Safety
    /// `sg_list` points to `num_sge` SGEs.
    unsafe fn spans(&self) -> Vec<Span>;
}

/// The SGEs at `list`.
///
/// # Safety
/// `list` points to `n` SGEs (or `n` is 0).
unsafe fn raw_sges<'a>(list: *const sys::ibv_sge, n: c_int) -> &'a [crate::Sge] {
    match usize::try_from(n) {
        Ok(n) if n > 0 && !list.is_null() => {
            // SAFETY: the caller's; `Sge` is `repr(transparent)` over `ibv_sge`.
            unsafe { std::slice::from_raw_parts(list.cast(), n) }
        }
        _ => &[],
    }
}

impl RawWr for sys::ibv_send_wr {
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    fn next(&self) -> *const Self {
        self.next
    }
    unsafe fn spans(&self) -> Vec<Span> {
        use sys::ibv_wr_opcode as O;
        if self.send_flags & sys::ibv_send_flags::IBV_SEND_INLINE.0 != 0 {
            return Vec::new();
        }
        let write = matches!(
            self.opcode,
            O::IBV_WR_RDMA_READ | O::IBV_WR_ATOMIC_CMP_AND_SWP | O::IBV_WR_ATOMIC_FETCH_AND_ADD
        );
        // SAFETY: forwarded to the caller.
        spans(unsafe { raw_sges(self.sg_list, self.num_sge) }, write)
    }
}

impl RawWr for sys::ibv_recv_wr {
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    fn next(&self) -> *const Self {
        self.next
    }
    unsafe fn spans(&self) -> Vec<Span> {
        // SAFETY: forwarded to the caller.
        spans(unsafe { raw_sges(self.sg_list, self.num_sge) }, true)
    }
}

/// [`CompQueue::poll`](crate::CompQueue::poll) under the layer: a held or
/// failed poll, or the real one, whose completions the oracle sees
/// (retiring their requests) before error completions are garbled.
pub(crate) fn poll(
    cq: *mut sys::ibv_cq,
    out: &mut [WorkCompletion],
) -> Result<&mut [WorkCompletion]> {
    let key = cq as usize;
    if schedule::held(key) {
        return Ok(&mut out[..0]);
    }
    match schedule::decide(Site::PollCq, None) {
        Some(Fault::PollError) => return Err(Error::verb("ibv_poll_cq", libc::EIO)),
        Some(Fault::HoldCompletions { polls }) => {
            schedule::hold(key, polls.saturating_sub(1));
            return Ok(&mut out[..0]);
        }
        _ => {}
    }
    let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
    // SAFETY: the CQ is alive (the caller's `CompQueue`); `WorkCompletion`
    // is `repr(transparent)` over `ibv_wc`, and `out` has room for `n`.
    let got = unsafe { sys::ibv_poll_cq(cq, n, out.as_mut_ptr().cast()) };
    if got < 0 {
        return Err(Error::verb("ibv_poll_cq", libc::EIO));
    }
    let got = &mut out[..got as usize];
    for wc in got.iter_mut() {
        let success = wc.is_success();
        let recv = success.then_some(wc.0.opcode.0 & sys::ibv_wc_opcode::IBV_WC_RECV.0 != 0);
        oracle::delivered(wc.0.qp_num, wc.0.wr_id, recv);
        if !success && schedule::decide(Site::ErrorCompletion, Some(wc.0.qp_num)).is_some() {
            garble(&mut wc.0);
        }
    }
    Ok(got)
}

/// Random values in the fields of an error completion the verbs
/// specification leaves undefined.
pub(super) fn garble(wc: &mut sys::ibv_wc) {
    let g = schedule::garbage;
    wc.opcode = sys::ibv_wc_opcode(g());
    wc.byte_len = g();
    wc.__bindgen_anon_1.imm_data = g();
    wc.src_qp = g();
    wc.wc_flags = g();
    wc.pkey_index = g() as u16;
    wc.slid = g() as u16;
    wc.sl = g() as u8;
    wc.dlid_path_bits = g() as u8;
}

/// The errno a refusing fault gives the control verb at `site` (on queue
/// pair `qp_num`), if it fires.
pub(crate) fn refused(site: Site, qp_num: Option<u32>) -> Option<c_int> {
    match schedule::decide(site, qp_num)? {
        Fault::Refuse { errno } => Some(errno),
        _ => None,
    }
}

/// One `ibv_get_async_event` under the layer: a refusing fault's errno
/// (`Err`), else the oldest injected event of this thread (queued by a
/// [`Fault::Event`], perhaps fired by this very read), else `None`: read
/// the device's.
pub(crate) fn async_event() -> std::result::Result<Option<crate::AsyncEvent>, c_int> {
    if let Some(Fault::Refuse { errno }) = schedule::decide(Site::AsyncEventRead, None) {
        return Err(errno);
    }
    Ok(schedule::next_event())
}

/// `ibv_create_qp`'s capacities under the layer: a [`Fault::SmallerQp`]
/// lowers what is asked (`ask`, before the verb) and what is reported
/// (`got`, after it). `Err`: a refusing fault's errno.
pub(crate) fn qp_caps(
    ask: &mut sys::ibv_qp_cap,
) -> std::result::Result<Option<sys::ibv_qp_cap>, c_int> {
    match schedule::decide(Site::CreateQp, None) {
        Some(Fault::Refuse { errno }) => Err(errno),
        Some(Fault::SmallerQp {
            max_send_wr,
            max_recv_wr,
            max_inline_data,
        }) => {
            let at_most = sys::ibv_qp_cap {
                max_send_wr: ask.max_send_wr.min(max_send_wr),
                max_recv_wr: ask.max_recv_wr.min(max_recv_wr),
                max_inline_data: ask.max_inline_data.min(max_inline_data),
                ..*ask
            };
            *ask = at_most;
            Ok(Some(at_most))
        }
        _ => Ok(None),
    }
}

/// Lowers the capacities a provider granted to `at_most`.
pub(crate) fn clamp_caps(got: &mut sys::ibv_qp_cap, at_most: sys::ibv_qp_cap) {
    got.max_send_wr = got.max_send_wr.min(at_most.max_send_wr);
    got.max_recv_wr = got.max_recv_wr.min(at_most.max_recv_wr);
    got.max_inline_data = got.max_inline_data.min(at_most.max_inline_data);
}

/// `ibv_modify_qp` of queue pair `qp_num` to `state` (if the mask moves
/// it): `Err` with a refusing fault's errno; the moves to ERR and RESET are
/// never refused.
pub(crate) fn modify(
    qp_num: u32,
    state: Option<sys::ibv_qp_state>,
) -> std::result::Result<(), c_int> {
    use sys::ibv_qp_state as S;
    if matches!(state, Some(S::IBV_QPS_ERR | S::IBV_QPS_RESET)) {
        return Ok(());
    }
    refused(Site::ModifyQp, Some(qp_num)).map_or(Ok(()), Err)
}

/// A successful `ibv_modify_qp` of `qp_num` to `state`: a move to RESET
/// discarded its queued requests.
pub(crate) fn modified(qp_num: u32, state: Option<sys::ibv_qp_state>) {
    if state == Some(sys::ibv_qp_state::IBV_QPS_RESET) {
        oracle::discard_qp(qp_num, false);
    }
}
