//! The schedule and the oracle without a device: the post logic runs over a
//! stand-in for the verb that records what it was given.

use super::hooks;
use super::oracle::{self, Entry, Queue, Span};
use super::*;
use crate::error::PostError;
use crate::wr::{RecvRequest, Sge};
use crate::{WcStatus, WorkCompletion};
use std::panic::catch_unwind;

/// The calls (from 0) at which a plan of one rule fires, over `calls`.
fn firing(when: When, calls: u64) -> Vec<u64> {
    let plan = Plan::new(42).at(Site::PollCq, when, Fault::PollError);
    let installed = install(plan);
    for _ in 0..calls {
        schedule_decide(Site::PollCq);
    }
    installed.fired().iter().map(|f| f.call).collect()
}

fn schedule_decide(site: Site) -> Option<Fault> {
    super::schedule::decide(site, None)
}

#[test]
fn triggers_fire_at_their_calls() {
    assert_eq!(firing(When::Call(3), 10), [3]);
    assert_eq!(firing(When::From(7), 10), [7, 8, 9]);
    assert_eq!(firing(When::Always, 3), [0, 1, 2]);
    assert!(firing(When::PerMille(0), 100).is_empty());
    let some = firing(When::PerMille(300), 200);
    assert!((20..120).contains(&some.len()), "{some:?}");
    assert_eq!(some, firing(When::PerMille(300), 200), "a seed replays");
}

#[test]
fn the_first_rule_decides_and_every_rule_counts() {
    let plan = Plan::new(1)
        .at(Site::PostSend, When::Call(1), Fault::bad_wr_at(0))
        .at(Site::PostSend, When::From(1), Fault::refused_doorbell())
        .at_qp(9, Site::PostRecv, When::Always, Fault::queue_full_at(2));
    let installed = install(plan);
    assert_eq!(super::schedule::decide(Site::PostSend, Some(1)), None);
    assert_eq!(
        super::schedule::decide(Site::PostSend, Some(1)),
        Some(Fault::bad_wr_at(0))
    );
    assert_eq!(
        super::schedule::decide(Site::PostSend, Some(1)),
        Some(Fault::refused_doorbell())
    );
    assert_eq!(super::schedule::decide(Site::PostRecv, Some(8)), None);
    assert_eq!(
        super::schedule::decide(Site::PostRecv, Some(9)),
        Some(Fault::queue_full_at(2))
    );
    assert_eq!(installed.count(Site::PostSend), 2);
    assert_eq!(installed.fired()[2].qp_num, Some(9));
}

#[test]
fn a_plan_is_for_its_thread_only_and_uninstalls() {
    let outer = install(Plan::new(0).at(Site::PollCq, When::Always, Fault::PollError));
    let other = std::thread::spawn(|| schedule_decide(Site::PollCq))
        .join()
        .unwrap();
    assert_eq!(other, None, "another thread sees no fault");
    {
        let _inner = install(Plan::new(0));
        assert_eq!(schedule_decide(Site::PollCq), None);
    }
    assert_eq!(
        schedule_decide(Site::PollCq),
        Some(Fault::PollError),
        "restored"
    );
    drop(outer);
    assert_eq!(schedule_decide(Site::PollCq), None);
}

#[test]
#[should_panic(expected = "cannot happen at PostSend")]
fn a_fault_that_cannot_happen_at_its_site_is_refused() {
    let _ = Plan::new(0).at(Site::PostSend, When::Always, Fault::PollError);
}

#[test]
fn held_polls_count_down_per_cq() {
    let _installed = install(Plan::new(0));
    super::schedule::hold(0x10, 2);
    assert!(super::schedule::held(0x10));
    assert!(!super::schedule::held(0x20), "another CQ");
    assert!(super::schedule::held(0x10));
    assert!(!super::schedule::held(0x10), "released after two");
}

fn entry(wr_id: u64, addr: u64, len: u32, write: bool) -> Entry {
    Entry {
        wr_id,
        spans: vec![Span { addr, len, write }],
        post: 0,
        index: 0,
    }
}

// Each test below uses its own QP numbers and addresses: the oracle is one
// for the process and the tests run in parallel.

#[test]
fn a_send_completion_ends_the_unsignaled_requests_before_it() {
    let qp = 0xF000_0001;
    let base = 0x1_0000_0000;
    oracle::record(
        Queue::Send(qp),
        [
            entry(1 << 63 | 5, base, 64, false),
            entry(5, base + 64, 64, false),
            entry(6, base + 128, 64, true),
        ],
    );
    assert!(overlapping((base + 10) as *const u8, 1).is_some());
    oracle::delivered(qp, 5, Some(false));
    assert!(overlapping(base as *const u8, 128).is_none());
    let v = overlapping((base + 100) as *const u8, 100).expect("the read's target");
    assert_eq!((v.wr_id, v.span), (6, (base + 128, 64, true)));
    assert_eq!(in_flight(qp), 1);
    // An error completion (no opcode) finds its queue by wr_id.
    oracle::delivered(qp, 6, None);
    assert_eq!(in_flight(qp), 0);
}

#[test]
fn receives_end_by_wr_id_on_the_queue_or_the_srq() {
    let (qp, srq) = (0xF000_0002, 0x5151_0000);
    let base = 0x2_0000_0000;
    oracle::record(
        Queue::Recv(qp),
        [entry(1, base, 32, true), entry(2, base + 32, 32, true)],
    );
    oracle::attach_srq(qp, srq);
    oracle::record(Queue::Srq(srq), [entry(3, base + 64, 32, true)]);
    oracle::delivered(qp, 2, Some(true));
    assert!(unfinished(qp, |w| w == 2).is_none());
    assert!(unfinished(qp, |w| w == 1).is_some());
    oracle::delivered(qp, 3, None);
    assert!(
        overlapping((base + 64) as *const u8, 32).is_none(),
        "SRQ entry ended"
    );
    // RESET discards the rest without completions.
    oracle::discard_qp(qp, true);
    assert_eq!(in_flight(qp), 0);
    oracle::discard_srq(srq);
}

#[test]
fn the_checks_name_the_request_and_the_range() {
    let qp = 0xF000_0003;
    let base = 0x3_0000_0000;
    oracle::record(Queue::Recv(qp), [entry(77, base, 16, true)]);
    let caught = catch_unwind(|| check_released((base + 8) as *const u8, 100, "a test hands back"))
        .expect_err("the range is in the NIC's hands");
    let msg = caught.downcast_ref::<String>().expect("a formatted panic");
    assert!(msg.contains("a test hands back"), "{msg}");
    assert!(msg.contains("wr_id 0x4d"), "{msg}");
    assert!(msg.contains(&format!("{base:#x}")), "{msg}");
    assert!(msg.contains("write"), "{msg}");
    assert!(catch_unwind(|| check_finished(qp, |w| w == 77, "a borrow ends")).is_err());
    check_finished(qp, |w| w == 78, "another request");
    check_released((base + 16) as *const u8, 16, "the memory after it");
    check_released(base as *const u8, 0, "nothing");
    oracle::discard_qp(qp, true);
    check_released(base as *const u8, 16, "after the reset");
}

/// Posts three receives to queue pair `qp` under `fault` through the post
/// logic, with a stand-in verb; returns the result and the wr_ids the
/// stand-in was given.
fn post_three(qp: u32, base: u64, fault: Option<Fault>) -> (Result<(), PostError>, Vec<u64>) {
    let plan = match fault {
        Some(f) => Plan::new(0).at(Site::PostRecv, When::Always, f),
        None => Plan::new(0),
    };
    let _installed = install(plan);
    let sges: Vec<[Sge; 1]> = (0..3).map(|i| [Sge::new(base + 64 * i, 64, 1)]).collect();
    let mut wrs: Vec<RecvRequest<'_>> = (0..3)
        .map(|i| RecvRequest::new(i as u64, &sges[i]))
        .collect();
    let mut given = Vec::new();
    let real = |l: &mut [RecvRequest<'_>]| {
        given.extend(l.iter().map(RecvRequest::wr_id));
        Ok(())
    };
    let entry = |w: &RecvRequest<'_>| {
        let s = w.sges()[0];
        (
            w.wr_id(),
            vec![Span {
                addr: s.addr(),
                len: s.length(),
                write: true,
            }],
        )
    };
    // SAFETY: the stand-in posts nothing.
    let r = unsafe {
        hooks::post(
            Site::PostRecv,
            None,
            Queue::Recv(qp),
            "ibv_post_recv",
            &mut wrs,
            entry,
            real,
        )
    };
    (r, given)
}

#[test]
fn mlx5_posts_the_prefix_and_names_the_first_refused() {
    let (qp, base) = (0xF000_0004, 0x4_0000_0000);
    let (r, given) = post_three(qp, base, Some(Fault::queue_full_at(1)));
    let e = r.expect_err("refused");
    assert_eq!(
        (e.errno(), e.posted(), e.requested()),
        (libc::ENOMEM, Some(1), 3)
    );
    assert_eq!(given, [0], "only the request before the refused one");
    assert_eq!(in_flight(qp), 1, "the oracle holds what was queued");
    assert!(overlapping((base + 64) as *const u8, 128).is_none());
    oracle::discard_qp(qp, true);
}

#[test]
fn rxe_posts_everything_and_names_nothing() {
    let (qp, base) = (0xF000_0005, 0x5_0000_0000);
    let (r, given) = post_three(qp, base, Some(Fault::refused_doorbell()));
    let e = r.expect_err("refused");
    assert_eq!((e.errno(), e.posted()), (libc::EINVAL, None));
    assert_eq!(given, [0, 1, 2], "the ring was written");
    assert_eq!(in_flight(qp), 3, "all of it may run");
    oracle::discard_qp(qp, true);
    let (r, given) = post_three(qp, base, None);
    assert!(r.is_ok());
    assert_eq!((given.len(), in_flight(qp)), (3, 3));
    oracle::discard_qp(qp, true);
}

#[test]
fn a_refusal_past_the_end_is_at_the_last_request() {
    let (qp, base) = (0xF000_0006, 0x6_0000_0000);
    let (r, given) = post_three(qp, base, Some(Fault::bad_wr_at(10)));
    assert_eq!(r.expect_err("refused").posted(), Some(2));
    assert_eq!(given, [0, 1]);
    oracle::discard_qp(qp, true);
}

#[test]
fn garbling_keeps_the_defined_fields() {
    let _installed = install(Plan::new(3));
    let mut wc = WorkCompletion::synthetic(99, WcStatus::WrFlushError);
    wc.0.qp_num = 12;
    wc.0.vendor_err = 7;
    let before = wc;
    let mut changed = 0;
    for _ in 0..4 {
        hooks::garble(&mut wc.0);
        changed += usize::from(wc.0.byte_len != before.0.byte_len);
        assert_eq!(
            (wc.wr_id(), wc.status(), wc.0.qp_num, wc.0.vendor_err),
            (99, WcStatus::WrFlushError, 12, 7)
        );
    }
    assert!(changed >= 3, "the undefined fields are random");
}

#[test]
fn events_queue_for_the_next_async_read_whatever_else_fires() {
    use crate::AsyncEvent;
    let fatal = AsyncEvent::QpFatal { qp_num: 9 };
    let port = AsyncEvent::PortError { port: 1 };
    let plan = Plan::new(5)
        .at_qp(9, Site::PostSend, When::Call(1), Fault::Event(fatal))
        .at(Site::PostSend, When::Call(1), Fault::bad_wr_at(0))
        .at(Site::AsyncEventRead, When::Call(2), Fault::Event(port))
        .at(
            Site::AsyncEventRead,
            When::Call(3),
            Fault::Refuse { errno: 5 },
        );
    let installed = install(plan);
    assert_eq!(hooks::async_event(), Ok(None), "nothing injected yet");
    assert_eq!(super::schedule::decide(Site::PostSend, Some(9)), None);
    // The event and the post's own fault both fire at call 1.
    assert_eq!(
        super::schedule::decide(Site::PostSend, Some(9)),
        Some(Fault::bad_wr_at(0))
    );
    assert_eq!(hooks::async_event(), Ok(Some(fatal)));
    assert_eq!(hooks::async_event(), Ok(Some(port)), "fired by this read");
    assert_eq!(hooks::async_event(), Err(5));
    assert_eq!(hooks::async_event(), Ok(None));
    let sites: Vec<_> = installed.fired().iter().map(|f| f.site).collect();
    assert_eq!(
        sites,
        [
            Site::PostSend,
            Site::PostSend,
            Site::AsyncEventRead,
            Site::AsyncEventRead
        ]
    );
    drop(installed);
    assert_eq!(hooks::async_event(), Ok(None), "no plan, no events");
}
