//! No leaks, whatever the drop order: after creating and dropping every kind
//! of object (context, PD, completion channel, CQ, MR, RC and UD QPs, AH,
//! SRQ) in several orders and on several threads, the kernel's resource
//! counts (`rdma resource show`) are back where they started.
//!
//! This file is its own test binary and holds a single test, so no other
//! test of the crate creates objects while it counts.

mod common;

use common::{device_name, open_device, poll_success, recv_wr, send_wr, Buf, PORT};
use rdma_core::sys::ibv_wr_opcode as Op;
use rdma_core::{
    AccessFlags, AddressHandle, CompChannel, CompQueue, Context, MemoryRegion, ProtectionDomain,
    QpType, QueuePair, RtrParams, RtsParams, SharedReceiveQueue,
};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

/// The resource kinds `rdma resource show` counts that this test creates.
const KINDS: [&str; 6] = ["ctx", "pd", "cq", "qp", "mr", "srq"];

type Counts = BTreeMap<String, u64>;

/// Per-kind counts of `device`, from `rdma -j resource show` (the text form
/// `0: rxe0: pd 1 cq 1 ...` if JSON is unavailable).
fn counts(device: &str) -> Counts {
    let json = Command::new("rdma")
        .args(["-j", "resource", "show"])
        .output();
    let out = match json {
        Ok(out) if out.status.success() => out,
        _ => Command::new("rdma")
            .args(["resource", "show"])
            .output()
            .unwrap_or_else(|err| {
                panic!("cannot run `rdma resource show` ({err}): install iproute2's rdma tool")
            }),
    };
    assert!(out.status.success(), "rdma resource show: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed = if text.trim_start().starts_with('[') {
        parse_json(&text, device)
    } else {
        parse_text(&text, device)
    };
    parsed.unwrap_or_else(|| panic!("no line for {device} in `rdma resource show`:\n{text}"))
}

/// Parses `[{"ifindex":0,"ifname":"rxe0","pd":1,...},...]`: flat objects of
/// numbers and strings, which is all `rdma -j resource show` prints.
fn parse_json(text: &str, device: &str) -> Option<Counts> {
    for object in text.split('{').skip(1) {
        let body = object.split('}').next()?;
        let mut counts = Counts::new();
        let mut name = None;
        for pair in body.split(',') {
            let (key, value) = pair.split_once(':')?;
            let key = key.trim().trim_matches('"');
            let value = value.trim();
            if key == "ifname" {
                name = Some(value.trim_matches('"').to_owned());
            } else if let Ok(n) = value.parse() {
                counts.insert(key.to_owned(), n);
            }
        }
        if name.as_deref() == Some(device) {
            return Some(counts);
        }
    }
    None
}

/// Parses `0: rxe0: pd 1 cq 1 qp 1 cm_id 0 mr 0 ctx 0 srq 0`.
fn parse_text(text: &str, device: &str) -> Option<Counts> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _index = parts.next()?;
        if parts.next()?.trim() != device {
            return None;
        }
        let words: Vec<&str> = parts.next()?.split_whitespace().collect();
        Some(
            words
                .chunks(2)
                .filter_map(|kv| Some((kv[0].to_owned(), kv.get(1)?.parse().ok()?)))
                .collect(),
        )
    })
}

/// Only the kinds this test creates.
fn relevant(all: &Counts) -> Counts {
    KINDS
        .iter()
        .map(|k| (k.to_string(), all.get(*k).copied().unwrap_or(0)))
        .collect()
}

/// Waits (bounded) until the counts equal `want`: destroy verbs are
/// synchronous, but closing a context's file descriptor may finish a moment
/// later.
#[track_caller]
fn wait_for_counts(device: &str, want: &Counts, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = relevant(&counts(device));
        if &now == want {
            return;
        }
        if Instant::now() > deadline {
            panic!("{what}: resource counts {now:?}, expected {want:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One of each object, connected and used once, so nothing is idle-only.
#[allow(dead_code)] // fields are held for their Drop
struct Objects {
    ctx: Context,
    pd: ProtectionDomain,
    channel: CompChannel,
    cq_events: CompQueue,
    cq: CompQueue,
    buf: Buf,
    rc_a: QueuePair,
    rc_b: QueuePair,
    ud: QueuePair,
    ah: AddressHandle,
    srq: SharedReceiveQueue,
    rc_srq: QueuePair,
}

/// What `Objects` adds to each count.
fn expected_delta() -> Counts {
    [
        ("ctx", 1),
        ("pd", 1),
        ("cq", 2),
        ("qp", 4),
        ("mr", 1),
        ("srq", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn create_objects() -> Objects {
    let ctx = open_device();
    let pd = ctx.alloc_pd().unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let cq_events = ctx.create_cq(64, Some(&channel)).unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let buf = Buf::new(&pd, 4096, Buf::full_access());
    let rc_a = QueuePair::builder(&pd, QpType::Rc, &cq, &cq_events)
        .build()
        .unwrap();
    let rc_b = QueuePair::builder(&pd, QpType::Rc, &cq, &cq_events)
        .build()
        .unwrap();
    let ud = QueuePair::builder(&pd, QpType::Ud, &cq, &cq)
        .build()
        .unwrap();
    let gid = ctx.preferred_gid(PORT).unwrap();
    let av = rdma_core::AddressVector::global(PORT, gid.gid, gid.index as u8);
    let ah = AddressHandle::new(&pd, &av).unwrap();
    let srq = SharedReceiveQueue::new(&pd, 16, 1).unwrap();
    let rc_srq = QueuePair::builder(&pd, QpType::Rc, &cq, &cq)
        .srq(&srq)
        .build()
        .unwrap();

    // Connect the RC pair and move one message, so the objects have been used.
    for (qp, peer) in [(&rc_a, &rc_b), (&rc_b, &rc_a)] {
        qp.to_init(PORT, Buf::full_access()).unwrap();
        qp.to_rtr(&RtrParams::new(peer.qp_num(), 0, av)).unwrap();
        qp.to_rts(&RtsParams::new(0)).unwrap();
    }
    ud.to_rts_ud(PORT, 0x1234, 0).unwrap();
    let mut rsge = [buf.sge(2048, 64)];
    let mut rwr = recv_wr(1, &mut rsge);
    // SAFETY: both requests complete (and are polled) below, so no request
    // names `buf` afterwards, whatever order the objects are dropped in.
    unsafe { rc_b.post_recv(&mut rwr) }.unwrap();
    let mut ssge = [buf.sge(0, 64)];
    let mut swr = send_wr(2, Op::IBV_WR_SEND, &mut ssge);
    // SAFETY: as above; completion polled right below.
    unsafe { rc_a.post_send(&mut swr) }.unwrap();
    poll_success(&cq, "send");
    poll_success(&cq_events, "receive");

    Objects {
        ctx,
        pd,
        channel,
        cq_events,
        cq,
        buf,
        rc_a,
        rc_b,
        ud,
        ah,
        srq,
        rc_srq,
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn every_drop_order_releases_every_object() {
    let device = device_name().unwrap_or_else(|| open_device().name().to_owned());
    let baseline = relevant(&counts(&device));
    eprintln!("baseline on {device}: {baseline:?}");
    let mut alive = baseline.clone();
    for (kind, delta) in expected_delta() {
        *alive.get_mut(&kind).unwrap() += delta;
    }

    // Parents first: the handles of context, PD, channel and SRQ go before
    // the objects created from them (which keep them alive).
    let o = create_objects();
    wait_for_counts(&device, &alive, "all objects alive");
    let Objects {
        ctx,
        pd,
        channel,
        cq_events,
        cq,
        buf,
        rc_a,
        rc_b,
        ud,
        ah,
        srq,
        rc_srq,
    } = o;
    drop((ctx, pd, channel, srq));
    wait_for_counts(&device, &alive, "parent handles dropped, children alive");
    drop((cq_events, cq));
    drop((rc_a, rc_b, ud, rc_srq));
    drop(ah);
    drop(buf);
    wait_for_counts(&device, &baseline, "parents first");

    // Children first, in reverse order of creation.
    let o = create_objects();
    wait_for_counts(&device, &alive, "all objects alive (2)");
    let Objects {
        ctx,
        pd,
        channel,
        cq_events,
        cq,
        buf,
        rc_a,
        rc_b,
        ud,
        ah,
        srq,
        rc_srq,
    } = o;
    drop(rc_srq);
    drop(srq);
    drop(ah);
    drop(ud);
    drop(rc_b);
    drop(rc_a);
    drop(buf);
    drop(cq);
    drop(cq_events);
    drop(channel);
    drop(pd);
    drop(ctx);
    wait_for_counts(&device, &baseline, "children first");

    // Interleaved.
    let o = create_objects();
    let Objects {
        ctx,
        pd,
        channel,
        cq_events,
        cq,
        buf,
        rc_a,
        rc_b,
        ud,
        ah,
        srq,
        rc_srq,
    } = o;
    drop(cq);
    drop(rc_a);
    drop(pd);
    drop(srq);
    drop(ud);
    drop(channel);
    drop(buf);
    drop(ctx);
    drop(rc_srq);
    drop(ah);
    drop(cq_events);
    drop(rc_b);
    wait_for_counts(&device, &baseline, "interleaved");

    // Closed explicitly: `close` reports success and releases what drop does.
    let o = create_objects();
    let Objects {
        ctx,
        pd,
        channel,
        cq_events,
        cq,
        buf,
        rc_a,
        rc_b,
        ud,
        ah,
        srq,
        rc_srq,
    } = o;
    // SAFETY: a second registration of `buf`'s memory, used by no request
    // and closed before `buf` is dropped.
    let mr = unsafe {
        MemoryRegion::register(
            &pd,
            buf.addr(0) as *mut u8,
            buf.len(),
            AccessFlags::LOCAL_WRITE,
        )
    }
    .expect("ibv_reg_mr");
    mr.close().map_err(|(_, err)| err).expect("ibv_dereg_mr");
    for qp in [rc_srq, ud, rc_b, rc_a] {
        qp.close().map_err(|(_, err)| err).expect("ibv_destroy_qp");
    }
    ah.close().map_err(|(_, err)| err).expect("ibv_destroy_ah");
    drop((buf, srq, cq, cq_events, channel, pd, ctx));
    wait_for_counts(&device, &baseline, "closed explicitly");

    // Every handle moved into a thread of its own and dropped there, all at
    // once.
    let o = create_objects();
    let Objects {
        ctx,
        pd,
        channel,
        cq_events,
        cq,
        buf,
        rc_a,
        rc_b,
        ud,
        ah,
        srq,
        rc_srq,
    } = o;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(12));
    let mut threads = Vec::new();
    macro_rules! drop_in_thread {
        ($($x:ident),*) => {$(
            let b = barrier.clone();
            threads.push(std::thread::spawn(move || {
                b.wait();
                drop($x);
            }));
        )*};
    }
    drop_in_thread!(ctx, pd, channel, cq_events, cq, buf, rc_a, rc_b, ud, ah, srq, rc_srq);
    for t in threads {
        t.join().expect("drop thread");
    }
    wait_for_counts(&device, &baseline, "dropped on 12 threads");

    // Many rounds of create/drop leave nothing behind either.
    for _ in 0..5 {
        drop(create_objects());
    }
    wait_for_counts(&device, &baseline, "5 more rounds");
}

#[test]
fn parses_both_output_forms() {
    let json = r#"[{"ifindex":0,"ifname":"rxe0","pd":1,"cq":2,"qp":3,"cm_id":0,"mr":4,"ctx":5,"srq":6},{"ifindex":1,"ifname":"rxe1","pd":9}]"#;
    let text = "0: rxe0: pd 1 cq 2 qp 3 cm_id 0 mr 4 ctx 5 srq 6 \n1: rxe1: pd 9\n";
    for parsed in [parse_json(json, "rxe0"), parse_text(text, "rxe0")] {
        let c = relevant(&parsed.unwrap());
        let want: Vec<u64> = vec![2, 5, 4, 1, 3, 6]; // cq ctx mr pd qp srq (sorted keys)
        assert_eq!(c.values().copied().collect::<Vec<_>>(), want);
    }
    assert_eq!(parse_json(json, "rxe1").unwrap()["pd"], 9);
    assert!(parse_json(json, "mlx5_0").is_none());
    assert!(parse_text(text, "mlx5_0").is_none());
}
