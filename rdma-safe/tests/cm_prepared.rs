//! Accepting in two steps (`Incoming::prepare`, `Acceptance`), on the
//! device: receives posted before the accept take a message the requester
//! sends the moment it is connected (data checked byte for byte, blocking
//! and async), sends wait for the accept, and an acceptance dropped or
//! refused rejects the requester and flushes what was posted at once.

mod common;

use common::{assert_bytes, device_ip, pattern, registered, seed};
use rdma_safe::owned::Request;
use rdma_safe::{
    cm::CmOptions, cm::Connector, error::VerbsError, BufferPool, Channel, Error, Listener,
    ReceiveWorkRequest, RegisteredBuffer, SendWorkRequest,
};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

const LEN: usize = 1000;

fn opts() -> CmOptions {
    CmOptions::default().timeout(Duration::from_secs(20))
}

fn listener(opts: &CmOptions) -> (Listener, SocketAddr) {
    let listener = Listener::bind_with(format!("{}:0", device_ip()), opts)
        .unwrap_or_else(|e| panic!("listen on {}:0 through the RDMA CM: {e}", device_ip()));
    let addr = listener.local_addr().expect("a bound listener's address");
    (listener, addr)
}

/// The requester: connects and sends `msg` at once (no pause for the
/// server to post anything), then waits for the answer and checks it.
fn requester(addr: SocketAddr, msg: &[u8], answer: &[u8]) -> Channel {
    let connector = Connector::resolve(addr, &opts()).expect("resolve the listener");
    let tx = registered(connector.pd(), msg.to_vec());
    let mut rx = RegisteredBuffer::new(connector.pd(), answer.len()).expect("answer buffer");
    let mut channel = connector.connect(&[]).expect("connect");
    channel
        .scope(|s| {
            let reply = s.post_receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))?;
            s.post_send(SendWorkRequest::new(&[tx.gather(..)]))?
                .wait()?;
            reply.wait()
        })
        .expect("send at once, then the answer");
    assert_bytes(&rx[..], answer, "the server's answer");
    channel
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn receives_posted_before_the_accept_take_the_first_message() {
    let (listener, addr) = listener(&opts());
    let msg = pattern(seed("prepared-request", LEN), LEN);
    let answer = pattern(seed("prepared-answer", LEN), LEN);
    let server = {
        let (msg, answer) = (msg.clone(), answer.clone());
        thread::spawn(move || {
            let incoming = listener.incoming().expect("a connect request");
            let mut rx = RegisteredBuffer::new(incoming.pd(), LEN).expect("receive buffer");
            let tx = registered(incoming.pd(), answer);
            let (mut channel, acceptance) = incoming.prepare().expect("prepare");
            // Nothing goes out before the accept: the send queue refuses.
            let early = channel
                .send(SendWorkRequest::new(&[tx.gather(..)]))
                .expect_err("a send before the accept");
            assert!(matches!(early, Error::NotReady { .. }), "{early:?}");
            channel
                .scope(|s| {
                    let first = s.post_receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))?;
                    acceptance.accept(b"prepared")?;
                    let got = first.wait()?;
                    assert_eq!(got.bytes(), LEN);
                    s.post_send(SendWorkRequest::new(&[tx.gather(..)]))?.wait()
                })
                .expect("accept after posting, then answer");
            assert_bytes(&rx[..], &msg, "the requester's first message");
            channel
        })
    };
    let client = requester(addr, &msg, &answer);
    assert_eq!(
        &client.peer_private_data().expect("accept data")[..8],
        b"prepared"
    );
    let server = server.join().expect("server thread");
    assert!(server.peer_addr().is_some());
    // The watcher started with the accept: the requester's disconnect
    // reaches the server's channel.
    drop(client);
    let start = Instant::now();
    while !server.peer_disconnected() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no disconnect seen"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_dropped_acceptance_rejects_the_requester_and_flushes_at_once() {
    let (listener, addr) = listener(&opts());
    let server = thread::spawn(move || {
        let incoming = listener.incoming().expect("a connect request");
        let mut rx = RegisteredBuffer::new(incoming.pd(), LEN).expect("receive buffer");
        let (mut channel, acceptance) = incoming.prepare().expect("prepare");
        let flushed = channel.scope(|s| {
            let first = s.post_receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))?;
            drop(acceptance);
            let start = Instant::now();
            let outcome = first.wait();
            Ok::<_, Error>((outcome, start.elapsed()))
        });
        let (outcome, took) = flushed.expect("the scope");
        let err = outcome.expect_err("a receive of a rejected request");
        assert!(matches!(err, Error::PeerDisconnected { .. }), "{err:?}");
        // Flushed, not timed out (the channel's timeout is 20 s).
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert!(channel.peer_disconnected());
    });
    let err = Channel::connect_to_with(addr, &[], &opts()).expect_err("rejected");
    assert!(
        matches!(
            &err,
            Error::Verbs(VerbsError::Cm {
                event: "RDMA_CM_EVENT_REJECTED",
                ..
            })
        ),
        "{err:?}"
    );
    server.join().expect("server thread");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_async_accept_after_the_stream_posted_its_receives() {
    let opts = opts().completion_events(true);
    let (listener, addr) = listener(&opts);
    let msg = pattern(seed("prepared-async", LEN), LEN);
    let client = {
        let msg = msg.clone();
        thread::spawn(move || requester(addr, &msg, &msg))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let bound = Duration::from_secs(120);
        tokio::time::timeout(bound, async {
            let incoming = listener.incoming_async().await.expect("a request");
            let pool = BufferPool::new(incoming.pd(), LEN, 4).expect("pool");
            let (channel, acceptance) = incoming.prepare().expect("prepare");
            let shared = channel.shared().with_tokio().expect("tokio");
            let mut messages = shared.receive_stream(pool, 2);
            assert_eq!(messages.post_now().expect("post the receives"), 2);
            acceptance.accept_async(&[]).await.expect("accept");
            let (got, buf) = messages.next().await.expect("a message").expect("received");
            assert_eq!(got.bytes(), LEN);
            assert_bytes(&buf[..], &msg, "the first message, async");
            let (sent, _) = shared.submit(Request::send(buf.freeze())).await;
            sent.expect("echo");
        })
        .await
        .expect("the async accept and echo within the bound");
    });
    drop(client.join().expect("client thread"));
}
