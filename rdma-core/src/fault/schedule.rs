//! The fault schedule: which fault the layer injects at which call, from a
//! [`Plan`] installed on the calling thread.
//!
//! Each rule counts the calls at its [`Site`] on the thread that installed
//! the plan (only those on its queue pair, if it names one); whether it
//! fires at a call depends on that count and, for [`When::PerMille`], on the
//! plan's seeded generator — nothing else, so one plan and one program
//! give the same faults on every run. The first rule that fires at a call
//! decides it; every rule's count advances at every call it matches.

use super::rng::Rng;
use crate::AsyncEvent;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;

/// Where the layer can inject a fault: one verb, or one error completion
/// the layer delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Site {
    /// `ibv_post_send` (one call, however many requests).
    PostSend,
    /// `ibv_post_recv`.
    PostRecv,
    /// `ibv_post_srq_recv`.
    PostSrqRecv,
    /// `ibv_poll_cq`.
    PollCq,
    /// Each error completion `ibv_poll_cq` delivers.
    ErrorCompletion,
    /// `ibv_req_notify_cq`.
    ReqNotifyCq,
    /// `ibv_reg_mr` and its `_iova` and `_dmabuf` forms.
    RegisterMr,
    /// `ibv_create_qp`.
    CreateQp,
    /// `ibv_create_cq`.
    CreateCq,
    /// `ibv_create_srq`.
    CreateSrq,
    /// `ibv_modify_qp` to any state but ERR and RESET (a refused move to
    /// those is something the safe layer answers by aborting the process,
    /// by design; the layer never refuses them).
    ModifyQp,
    /// `ibv_get_async_event` (one read of a context's async event queue,
    /// whether or not an event was pending).
    AsyncEventRead,
}

/// At which of a rule's calls it fires (counted from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum When {
    /// Once, at call `n`.
    Call(u64),
    /// At call `n` and every call after it.
    From(u64),
    /// At every call.
    Always,
    /// At each call with probability `p` / 1000, from the plan's seed.
    PerMille(u16),
}

/// How a refused post leaves the queue: the two behaviours the providers
/// show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Semantics {
    /// mlx5's (and the verbs specification's): `bad_wr` names the first
    /// request not queued; the requests before it are queued for real,
    /// none after it.
    NamesBadWr,
    /// rxe's refused doorbell: every request is written to the ring (here:
    /// posted for real) and the call still fails, with `bad_wr` unset.
    RingWritten,
}

/// What the layer injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// A post fails with `errno` at request `at` of its list (the last one
    /// if the list is shorter), as `semantics` says.
    RefusePost {
        /// Index of the failing request in the list.
        at: usize,
        /// The errno the verb returns.
        errno: i32,
        /// What was queued.
        semantics: Semantics,
    },
    /// A post's requests before `at` are posted, the queue pair is moved to
    /// ERR for real, and the rest are posted (into the flush).
    FlushAt {
        /// Index of the first request posted after the flush.
        at: usize,
    },
    /// `ibv_poll_cq` fails (returns a negative count), consuming nothing.
    PollError,
    /// This poll and the next `polls - 1` on the same CQ find nothing, the
    /// completions staying on the CQ.
    HoldCompletions {
        /// How many polls come back empty.
        polls: u32,
    },
    /// The error completion's fields the verbs specification leaves
    /// undefined (`opcode`, `byte_len`, `imm_data`, `src_qp`, `wc_flags`,
    /// `pkey_index`, `slid`, `sl`, `dlid_path_bits`) are random; `wr_id`,
    /// `status`, `qp_num` and `vendor_err` stay.
    Garble,
    /// The verb fails with `errno` and does nothing.
    Refuse {
        /// The errno.
        errno: i32,
    },
    /// The queue pair is created with at most these capacities, whatever
    /// was asked; the capacities it reports are the smaller ones.
    SmallerQp {
        /// Most send-queue entries.
        max_send_wr: u32,
        /// Most receive-queue entries.
        max_recv_wr: u32,
        /// Most inline bytes.
        max_inline_data: u32,
    },
    /// The device reports `event` (naming its QP, CQ, port or the whole
    /// device): it is queued on this thread and the next
    /// `ibv_get_async_event` made here returns it (acknowledged), ahead of
    /// the device's own events. Fits every site; the call that fires it
    /// runs as if no rule had fired (the verb itself is not faulted), and
    /// nothing else of the device changes: a queue pair it names stays in
    /// its state, as on a provider that raises the event and flushes
    /// nothing. At [`Site::AsyncEventRead`], the read that fires it returns
    /// it.
    Event(AsyncEvent),
}

impl Fault {
    /// mlx5's refused post: `EINVAL` at request `at`, the ones before it
    /// queued.
    pub fn bad_wr_at(at: usize) -> Self {
        Fault::RefusePost {
            at,
            errno: libc::EINVAL,
            semantics: Semantics::NamesBadWr,
        }
    }

    /// mlx5's full queue: `ENOMEM` at request `at`, the ones before it
    /// queued.
    pub fn queue_full_at(at: usize) -> Self {
        Fault::RefusePost {
            at,
            errno: libc::ENOMEM,
            semantics: Semantics::NamesBadWr,
        }
    }

    /// rxe's refused doorbell: every request queued, the call failed
    /// (`EINVAL`) with `bad_wr` unset.
    pub fn refused_doorbell() -> Self {
        Fault::RefusePost {
            at: 0,
            errno: libc::EINVAL,
            semantics: Semantics::RingWritten,
        }
    }

    /// Whether the fault means something at `site`.
    fn fits(self, site: Site) -> bool {
        use Site as S;
        match self {
            Fault::Event(_) => true,
            Fault::RefusePost { .. } => matches!(site, S::PostSend | S::PostRecv | S::PostSrqRecv),
            Fault::FlushAt { .. } => matches!(site, S::PostSend | S::PostRecv),
            Fault::PollError | Fault::HoldCompletions { .. } => site == S::PollCq,
            Fault::Garble => site == S::ErrorCompletion,
            Fault::Refuse { .. } => matches!(
                site,
                S::ReqNotifyCq
                    | S::RegisterMr
                    | S::CreateQp
                    | S::CreateCq
                    | S::CreateSrq
                    | S::ModifyQp
                    | S::AsyncEventRead
            ),
            Fault::SmallerQp { .. } => site == S::CreateQp,
        }
    }
}

/// One rule of a plan.
#[derive(Clone, Debug)]
struct Rule {
    site: Site,
    qp: Option<u32>,
    when: When,
    fault: Fault,
    calls: u64,
}

/// A seeded fault schedule: rules, each a site, a trigger and a fault.
/// Install it with [`install`] on the thread whose verbs it is for.
#[derive(Clone, Debug)]
pub struct Plan {
    seed: u64,
    rules: Vec<Rule>,
}

impl Plan {
    /// An empty plan whose random choices follow `seed`.
    pub fn new(seed: u64) -> Self {
        Plan {
            seed,
            rules: Vec::new(),
        }
    }

    /// Adds a rule: `fault` at `site` when `when` says.
    ///
    /// # Panics
    /// If `fault` cannot happen at `site` (a poll error at a post): a
    /// mistake in the test, never a fault that silently does nothing.
    pub fn at(self, site: Site, when: When, fault: Fault) -> Self {
        self.rule(site, None, when, fault)
    }

    /// As [`at`](Self::at), counting only the calls on queue pair `qp_num`
    /// (a post, `ibv_modify_qp`, or an error completion of that queue pair).
    ///
    /// # Panics
    /// As [`at`](Self::at), and for a site that has no queue pair (a poll,
    /// a registration, a creation).
    pub fn at_qp(self, qp_num: u32, site: Site, when: When, fault: Fault) -> Self {
        assert!(
            matches!(
                site,
                Site::PostSend | Site::PostRecv | Site::ModifyQp | Site::ErrorCompletion
            ),
            "{site:?} has no queue pair to filter on"
        );
        self.rule(site, Some(qp_num), when, fault)
    }

    fn rule(mut self, site: Site, qp: Option<u32>, when: When, fault: Fault) -> Self {
        assert!(fault.fits(site), "{fault:?} cannot happen at {site:?}");
        self.rules.push(Rule {
            site,
            qp,
            when,
            fault,
            calls: 0,
        });
        self
    }
}

/// A fault the layer injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fired {
    /// Where.
    pub site: Site,
    /// The rule's count of calls at the moment it fired (from 0).
    pub call: u64,
    /// The queue pair, for a post, a modify or an error completion.
    pub qp_num: Option<u32>,
    /// What.
    pub fault: Fault,
}

/// The plan of this thread, while installed.
struct Active {
    rules: Vec<Rule>,
    rng: Rng,
    fired: Vec<Fired>,
    /// Polls each CQ (by address) still owes empty.
    held: HashMap<usize, u32>,
    /// Injected async events not yet read, oldest first.
    events: VecDeque<AsyncEvent>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Active>> = const { RefCell::new(None) };
}

/// Installs `plan` on this thread until the returned guard is dropped
/// (which puts back the plan installed before, if any). Other threads see
/// no faults from it: parallel tests do not interfere.
pub fn install(plan: Plan) -> Installed {
    let active = Active {
        rules: plan.rules,
        rng: Rng::new(plan.seed),
        fired: Vec::new(),
        held: HashMap::new(),
        events: VecDeque::new(),
    };
    let previous = ACTIVE.with(|a| a.replace(Some(active)));
    Installed {
        previous,
        _thread: PhantomData,
    }
}

/// A plan installed on this thread; see [`install`].
#[must_use = "the plan is uninstalled when this is dropped"]
pub struct Installed {
    previous: Option<Active>,
    /// The plan belongs to the thread that installed it.
    _thread: PhantomData<*const ()>,
}

impl Installed {
    /// Every fault injected so far, in order.
    pub fn fired(&self) -> Vec<Fired> {
        ACTIVE.with(|a| {
            a.borrow()
                .as_ref()
                .map_or_else(Vec::new, |a| a.fired.clone())
        })
    }

    /// How many faults were injected at `site`.
    pub fn count(&self, site: Site) -> usize {
        self.fired().iter().filter(|f| f.site == site).count()
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        ACTIVE.with(|a| *a.borrow_mut() = previous);
    }
}

impl std::fmt::Debug for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Installed")
            .field("fired", &self.fired())
            .finish()
    }
}

/// The fault this call at `site` (on queue pair `qp_num`, if it has one)
/// gets, if any, recorded as fired.
pub(crate) fn decide(site: Site, qp_num: Option<u32>) -> Option<Fault> {
    with_active(|a| {
        let mut a = a.borrow_mut();
        let a = a.as_mut()?;
        let mut chosen = None;
        for rule in a.rules.iter_mut() {
            if rule.site != site || (rule.qp.is_some() && rule.qp != qp_num) {
                continue;
            }
            let call = rule.calls;
            rule.calls += 1;
            let fires = match rule.when {
                When::Call(n) => call == n,
                When::From(n) => call >= n,
                When::Always => true,
                When::PerMille(p) => a.rng.chance(p),
            };
            if !fires {
                continue;
            }
            // An event is queued whatever else fires at this call: it is
            // no fault of the verb.
            if let Fault::Event(event) = rule.fault {
                a.events.push_back(event);
            } else if chosen.is_none() {
                chosen = Some(rule.fault);
            } else {
                continue;
            }
            a.fired.push(Fired {
                site,
                call,
                qp_num,
                fault: rule.fault,
            });
        }
        chosen
    })
    .flatten()
}

/// Starts holding completions back on the CQ at `cq` for `polls` polls.
pub(crate) fn hold(cq: usize, polls: u32) {
    with_active(|a| {
        if let Some(a) = a.borrow_mut().as_mut() {
            a.held.insert(cq, polls);
        }
    });
}

/// Whether this poll of the CQ at `cq` is one held back (counting it).
pub(crate) fn held(cq: usize) -> bool {
    with_active(|a| {
        let mut a = a.borrow_mut();
        let Some(left) = a.as_mut().and_then(|a| a.held.get_mut(&cq)) else {
            return false;
        };
        if *left == 0 {
            return false;
        }
        *left -= 1;
        true
    })
    .unwrap_or(false)
}

/// The oldest injected async event not yet read on this thread, taken.
pub(crate) fn next_event() -> Option<AsyncEvent> {
    with_active(|a| a.borrow_mut().as_mut()?.events.pop_front()).flatten()
}

/// Random bits from the installed plan's generator (0 without a plan).
pub(crate) fn garbage() -> u32 {
    with_active(|a| a.borrow_mut().as_mut().map_or(0, |a| a.rng.next_u32())).unwrap_or(0)
}

/// `f` on this thread's plan slot; `None` once the thread's locals are
/// being destroyed (a verb called from another thread-local's `Drop` then
/// gets no fault rather than a panic).
fn with_active<R>(f: impl FnOnce(&RefCell<Option<Active>>) -> R) -> Option<R> {
    ACTIVE.try_with(f).ok()
}
