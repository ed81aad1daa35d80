//! Liveness from the transport, not from silence: a peer that sends no
//! messages (it only reads one-sidedly) keeps its connection however long
//! the server's receives wait for it, and a quiet peer that dies is found
//! by the keepalive and reported as `PeerDisconnected` — by a blocking
//! receive, an async one and a receive stream alike. CM channels, both
//! ends in one process; every byte read or received is checked.

mod common;

use common::{assert_bytes, cm_pair, device_name, ended_as_gone, pattern, seed};
use rdma_safe::cm::CmOptions;
use rdma_safe::error::Operation;
use rdma_safe::owned::Request;
use rdma_safe::{
    BufferPool, Channel, Error, ProtectionDomain, ReadWorkRequest, ReceiveWorkRequest,
    RegisteredBuffer, RemoteAccessBuffer, RemoteMemoryRegion, SendWorkRequest,
};
use std::time::{Duration, Instant};

/// Bound on every wait that only catches a hang.
const HANG: Duration = Duration::from_secs(60);
const TABLE: usize = 4096;
const MESSAGE: usize = 64;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The client's side of the one-sided test: RDMA reads of the server's
/// table until `until`, each checked, then one message. How many reads.
fn read_then_send(client: &mut Channel, until: Instant, table: &[u8]) -> usize {
    let region = RemoteMemoryRegion::from_bytes(client.peer_private_data().unwrap_or_default())
        .expect("the table's region in the accept");
    let mut buf = RegisteredBuffer::new(client.pd(), MESSAGE).expect("read buffer");
    let mut reads = 0;
    while Instant::now() < until {
        let at = (reads * 97) % (TABLE - MESSAGE);
        let remote = region
            .slice(at as u64, MESSAGE as u64)
            .expect("inside the table");
        client
            .read(ReadWorkRequest::new(&mut [buf.scatter(..)], remote))
            .unwrap_or_else(|e| panic!("read {reads}: {e}"));
        assert_bytes(&buf[..], &table[at..at + MESSAGE], "an entry read");
        reads += 1;
    }
    let msg = RegisteredBuffer::register(client.pd(), pattern(seed("liveness", 1), MESSAGE))
        .expect("message");
    client
        .send(SendWorkRequest::new(&[msg.gather(..)]))
        .expect("the message after the reads");
    reads
}

/// A client that only reads (no message for 5× the server's timeout)
/// keeps its connection: the server's receive stream waits through it —
/// with the completion driver (events) and busy polling — and then gets
/// the client's one message, byte for byte.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_one_sided_client_keeps_its_connection_for_five_timeouts() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let pd = ProtectionDomain::open(&device_name()).expect("pd");
    let pool = BufferPool::new(&pd, MESSAGE, 8).expect("pool");
    let contents = pattern(seed("liveness-table", 0), TABLE);
    let table = RemoteAccessBuffer::new(&pd, TABLE).expect("table");
    table.write(0, &contents).expect("fill the table");
    for events in [true, false] {
        let opts = CmOptions::default()
            .timeout(TIMEOUT)
            .completion_events(events);
        let (server, client) = cm_pair(&pd, &opts, &opts, &[], &table.remote().to_bytes());
        let rt = runtime();
        let (reads, waited, mut client) = rt.block_on(async {
            let shared = if events {
                server.shared().with_tokio().expect("tokio reactor")
            } else {
                server.shared()
            };
            let mut messages = shared.receive_stream(pool.clone(), 4);
            assert_eq!(messages.post_now().expect("receives posted"), 4);
            let start = Instant::now();
            let until = start + TIMEOUT * 5 + TIMEOUT / 2;
            let expected = contents.clone();
            let reader = std::thread::spawn(move || {
                let mut client = client;
                (read_then_send(&mut client, until, &expected), client)
            });
            let got = tokio::time::timeout(HANG, messages.next())
                .await
                .expect("no hang");
            let waited = start.elapsed();
            let (done, buf) = got
                .expect("the stream did not end")
                .unwrap_or_else(|e| panic!("events {events}: the receive failed: {e}"));
            assert_eq!(done.bytes(), MESSAGE);
            assert_bytes(
                &buf[..MESSAGE],
                &pattern(seed("liveness", 1), MESSAGE),
                "the message",
            );
            drop(buf);
            let (reads, client) = reader.join().expect("the reader thread");
            assert!(
                shared.unusable_reason().is_none(),
                "{:?}",
                shared.unusable_reason()
            );
            drop(messages);
            (reads, waited, client)
        });
        eprintln!("events {events}: {reads} reads, the message after {waited:?}");
        assert!(reads > 0);
        assert!(waited >= TIMEOUT * 5, "{waited:?}");
        assert!(server.is_usable() && client.is_usable());
        // Still connected both ways: a message back, byte for byte.
        let mut server = server;
        let mut rx = RegisteredBuffer::new(&pd, MESSAGE).expect("rx");
        let back =
            RegisteredBuffer::register(&pd, pattern(seed("liveness", 2), MESSAGE)).expect("back");
        std::thread::scope(|t| {
            let r = t.spawn(|| {
                client
                    .receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
                    .expect("the answer")
            });
            server
                .send(SendWorkRequest::new(&[back.gather(..)]))
                .expect("send back");
            assert_eq!(r.join().expect("receiver").bytes(), MESSAGE);
        });
        assert_bytes(&rx[..], &back[..], "the answer");
    }
    common::assert_pool_full(&pool, "every buffer back");
}

/// How the server waits for a message the dead peer will never send.
#[derive(Debug, Clone, Copy)]
enum Wait {
    Blocking,
    Future,
    Stream,
}

/// A quiet peer that dies (its queue pair stops answering; no disconnect
/// is sent) is found by the keepalive: the server's waiting receive ends
/// with `PeerDisconnected` — a stream ends — within the documented bound.
/// Before the death, the probes are answered and the channel stays up.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_keepalive_finds_a_dead_quiet_peer() {
    const INTERVAL: Duration = Duration::from_millis(200);
    const ACK_TIMEOUT: u8 = 14;
    const RETRIES: u8 = 3;
    // The documented bound: interval + 4.096 µs · 2^ack_timeout · (retries + 1).
    let bound = INTERVAL + Duration::from_nanos(4096 * (1 << ACK_TIMEOUT) * (RETRIES as u64 + 1));
    let pd = ProtectionDomain::open(&device_name()).expect("pd");
    let pool = BufferPool::new(&pd, MESSAGE, 4).expect("pool");
    // Both sides: an accepted channel retries as often as the connecting
    // side asked (the listener's count is not used).
    let transport = CmOptions::default()
        .timeout(HANG)
        .ack_timeout(ACK_TIMEOUT)
        .retry_count(RETRIES);
    let server_opts = transport.keepalive(INTERVAL);
    for wait in [Wait::Blocking, Wait::Future, Wait::Stream] {
        // The stream waits through the completion driver (events), the
        // others poll.
        let opts = server_opts.completion_events(matches!(wait, Wait::Stream));
        let (mut server, client) = cm_pair(&pd, &opts, &transport, &[], &[]);
        assert_eq!(server.keepalive(), Some(INTERVAL));
        let (posted_before, _) = server.totals();
        let peer = client.shared();
        let rt = runtime();
        let (outcome, after_death) = std::thread::scope(|t| {
            let (tx, rx) = std::sync::mpsc::channel::<Instant>();
            let killer = t.spawn(move || {
                // Alive and quiet for 5 intervals, then dead.
                std::thread::sleep(INTERVAL * 5);
                let died = Instant::now();
                peer.shutdown();
                tx.send(died).expect("the waiter");
            });
            let outcome: Result<(), Error> = match wait {
                Wait::Blocking => {
                    let mut buf = RegisteredBuffer::new(&pd, MESSAGE).expect("buf");
                    server
                        .receive(ReceiveWorkRequest::new(&mut [buf.scatter(..)]))
                        .map(|_| ())
                }
                Wait::Future => rt.block_on(async {
                    let shared = server.shared();
                    let (got, _) = tokio::time::timeout(
                        HANG,
                        shared.submit(Request::receive(pool.alloc().await)),
                    )
                    .await
                    .expect("no hang");
                    got.map(|_| ())
                }),
                Wait::Stream => rt.block_on(async {
                    let shared = server.shared().with_tokio().expect("tokio");
                    let mut messages = shared.receive_stream(pool.clone(), 2);
                    let next = tokio::time::timeout(HANG, messages.next())
                        .await
                        .expect("no hang");
                    match ended_as_gone(next) {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(e)) => panic!("the stream failed instead of ending: {e}"),
                        Err(gone) => Err(gone),
                    }
                }),
            };
            let ended = Instant::now();
            killer.join().expect("the killer");
            let died = rx.recv().expect("the time of death");
            (outcome, ended.saturating_duration_since(died))
        });
        eprintln!("{wait:?}: {outcome:?} {after_death:?} after the peer died (bound {bound:?})");
        match outcome {
            Err(Error::PeerDisconnected {
                operation: Operation::Receive,
            }) => {}
            other => panic!("{wait:?}: expected the peer gone, got {other:?}"),
        }
        let (posted_after, completed) = server.totals();
        // Probes were posted and answered while the peer lived (a refused
        // probe would have ended the wait before the death).
        assert!(
            posted_after - posted_before >= 3,
            "{wait:?}: {posted_before} → {posted_after} posted"
        );
        assert!(completed <= posted_after);
        assert!(
            after_death > Duration::ZERO,
            "{wait:?}: not before the death"
        );
        assert!(after_death < HANG / 2, "{wait:?}: {after_death:?}");
        // Every later operation says the same.
        let msg = RegisteredBuffer::register(&pd, vec![1u8; 8]).expect("msg");
        match server.send(SendWorkRequest::new(&[msg.gather(..)])) {
            Err(Error::PeerDisconnected {
                operation: Operation::Send,
            }) => {}
            other => panic!("{wait:?}: a send after the loss: {other:?}"),
        }
        drop(client);
    }
    common::assert_pool_full(&pool, "every buffer back");
}
