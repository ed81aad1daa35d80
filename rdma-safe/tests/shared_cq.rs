//! One completion queue for many channels: completions reach their own
//! channel whichever channel (or thread) polled them, byte for byte;
//! channels that do not fit, or ask for events, are refused with errors
//! that say why; reservations come back when channels go.

mod common;

use common::*;
use rdma_safe::channel::SharedCompletionQueue;
use rdma_safe::owned::Request;
use rdma_safe::{
    BufferPool, Channel, ChannelBuilder, ProtectionDomain, ReceiveWorkRequest, SendWorkRequest,
};

/// CQ entries a channel with the default depths reserves (128 + 128).
const PER_CHANNEL: u32 = 256;

/// `n` connected pairs, every channel on `cq`.
fn pairs_on(
    pd: &ProtectionDomain,
    cq: &SharedCompletionQueue,
    n: usize,
) -> Vec<(Channel, Channel)> {
    let on = |b: ChannelBuilder<'_>| {
        b.completion_queue(cq)
            .build()
            .expect("a channel on the shared CQ")
    };
    (0..n)
        .map(|_| {
            let (mut a, mut b) = (on(pd.channel_builder()), on(pd.channel_builder()));
            Channel::connect_pair(&mut a, &mut b).expect("connect");
            (a, b)
        })
        .collect()
}

fn message(pair: usize, k: usize) -> Vec<u8> {
    pattern(
        seed(&format!("shared cq pair {pair}"), k),
        1 + (k * 389 + pair * 17) % 8192,
    )
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn completions_reach_their_own_channel_whoever_polls() {
    const PAIRS: usize = 4;
    const ROUNDS: usize = 20;
    let pd = pd();
    let cq = SharedCompletionQueue::new(&pd, 2 * PAIRS as u32 * PER_CHANNEL).expect("a shared CQ");
    let pairs = pairs_on(&pd, &cq, PAIRS);
    assert_eq!(cq.channels(), 2 * PAIRS);
    assert_eq!(cq.reserved(), 2 * PAIRS as u32 * PER_CHANNEL);
    let shared: Vec<_> = pairs
        .iter()
        .map(|(a, b)| (a.shared(), b.shared()))
        .collect();
    let pool = BufferPool::new(&pd, 8192, 4 * PAIRS).expect("a pool");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for round in 0..ROUNDS {
        // Every pair has a receive and a send in flight at once, each
        // reporting through a callback.
        for (p, (a, b)) in shared.iter().enumerate() {
            let tx = done_tx.clone();
            b.run_then(
                Request::receive(pool.try_alloc().expect("a buffer")),
                move |r, buf| {
                    let _ = tx.send((p, r.map(|w| w.bytes()), Some(buf)));
                },
            )
            .map_err(|(e, _)| e)
            .expect("post a receive");
            let mut data = pool.try_alloc().expect("a buffer");
            data.fill_from(&message(p, round));
            let tx = done_tx.clone();
            a.run_then(Request::send(data.freeze()), move |r, _| {
                let _ = tx.send((p, r.map(|w| w.bytes()), None));
            })
            .map_err(|(e, _)| e)
            .expect("post a send");
        }
        // Only the last receiver polls until its own message is in: every
        // completion it polls for another channel is set aside for it.
        let last = &shared[PAIRS - 1].1;
        let t0 = std::time::Instant::now();
        while last.run_callbacks().expect("poll") == 0 {
            assert!(
                t0.elapsed().as_secs() < 30,
                "round {round}: no completion for the last pair"
            );
        }
        // The others then find theirs, most of them already set aside.
        let mut seen = 1;
        while seen < 2 * PAIRS {
            for (a, b) in &shared {
                seen += a.run_callbacks().expect("poll") + b.run_callbacks().expect("poll");
            }
            assert!(
                t0.elapsed().as_secs() < 30,
                "round {round}: {seen} of {} completions",
                2 * PAIRS
            );
        }
        for _ in 0..2 * PAIRS {
            let (p, bytes, buf) = done_rx.try_recv().expect("a callback's report");
            let bytes = bytes.unwrap_or_else(|e| panic!("pair {p} round {round}: {e}"));
            let want = message(p, round);
            assert_eq!(bytes, want.len(), "pair {p} round {round}: length");
            if let Some(buf) = buf {
                assert_bytes(&buf[..bytes], &want, &format!("pair {p} round {round}"));
            }
        }
    }
    assert_eq!(cq.strays(), 0, "completions for no channel");
    drop(shared);
    for (k, (a, b)) in pairs.iter().enumerate() {
        assert_quiescent(a, &format!("sender {k}"));
        assert_quiescent(b, &format!("receiver {k}"));
    }
    drop(pairs);
    assert_eq!(
        (cq.channels(), cq.reserved()),
        (0, 0),
        "reservations given back"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn threads_on_channels_sharing_a_queue_each_get_their_own() {
    const PAIRS: usize = 4;
    const MESSAGES: usize = 100;
    let pd = pd();
    let cq = SharedCompletionQueue::new(&pd, 2 * PAIRS as u32 * PER_CHANNEL).expect("a shared CQ");
    let mut pairs = pairs_on(&pd, &cq, PAIRS);
    std::thread::scope(|t| {
        for (p, (a, b)) in pairs.iter_mut().enumerate() {
            let pd = &pd;
            t.spawn(move || {
                for k in 0..MESSAGES {
                    let want = message(p, k);
                    let tx = registered(pd, want.clone());
                    let mut rx = registered(pd, vec![FILL; 8192 + CANARY]);
                    let got = b
                        .scope(|s| {
                            let mut sc = [rx.scatter(..)];
                            let r = s.post_receive(ReceiveWorkRequest::new(&mut sc))?;
                            a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
                            r.wait()
                        })
                        .unwrap_or_else(|e| panic!("pair {p} message {k}: {e}"));
                    assert_eq!(got.bytes(), want.len(), "pair {p} message {k}: length");
                    assert_bytes(&rx[..want.len()], &want, &format!("pair {p} message {k}"));
                    assert_untouched(&rx[want.len()..], &format!("pair {p} message {k}: past it"));
                }
            });
        }
    });
    for (k, (a, b)) in pairs.iter().enumerate() {
        assert_quiescent(a, &format!("sender {k}"));
        assert_quiescent(b, &format!("receiver {k}"));
    }
    assert_eq!(cq.strays(), 0, "completions for no channel");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn channels_that_do_not_fit_or_want_events_are_refused() {
    let pd = pd();
    let cq = SharedCompletionQueue::new(&pd, PER_CHANNEL + 10).expect("a shared CQ");
    let capacity = cq.capacity();
    let first = pd
        .channel_builder()
        .completion_queue(&cq)
        .build()
        .expect("the first fits");
    assert_eq!(cq.reserved(), PER_CHANNEL);
    if capacity < 2 * PER_CHANNEL {
        let e = pd
            .channel_builder()
            .completion_queue(&cq)
            .build()
            .expect_err("a second channel does not fit");
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "has {capacity} entries, {PER_CHANNEL} of them reserved by the 1 channels"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("need {PER_CHANNEL} more")), "{text}");
        assert_eq!(
            cq.reserved(),
            PER_CHANNEL,
            "a refused channel reserves nothing"
        );
    }
    // Smaller depths fit in what is left.
    let small = pd
        .channel_builder()
        .send_depth(4)
        .recv_depth(4)
        .completion_queue(&cq)
        .build()
        .expect("a channel with depths 4 + 4 fits");
    assert_eq!(cq.reserved(), PER_CHANNEL + 8);
    let e = pd
        .channel_builder()
        .send_depth(1)
        .recv_depth(1)
        .completion_events(true)
        .completion_queue(&cq)
        .build()
        .expect_err("events on a shared queue");
    assert!(
        e.to_string()
            .contains("completion events need a completion queue of the channel's own"),
        "{e}"
    );
    let e = pd
        .channel_builder()
        .send_depth(1)
        .recv_depth(1)
        .cq_size(8)
        .completion_queue(&cq)
        .build()
        .expect_err("cq_size with a shared queue");
    assert!(
        e.to_string()
            .contains("cq_size sizes a completion queue of the channel's own"),
        "{e}"
    );
    assert_eq!(
        cq.reserved(),
        PER_CHANNEL + 8,
        "refused builds reserve nothing"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let e = rt
        .block_on(async { small.shared().with_tokio().map(drop) })
        .expect_err("a reactor on a shared queue");
    assert!(
        e.to_string()
            .contains("a channel on a shared completion queue has no completion events"),
        "{e}"
    );
    drop(first);
    assert_eq!(cq.reserved(), 8);
    pd.channel_builder()
        .completion_queue(&cq)
        .build()
        .expect("fits again once the first is gone");
    drop(small);
}
