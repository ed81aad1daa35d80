//! One way to say the peer is gone: whenever a CM peer disconnects —
//! before a receive, while one is posted, after one completed; with a
//! send, an RDMA write or an RDMA read in flight — every operation on the
//! connection, blocking, scoped or async, reports
//! `Error::PeerDisconnected` (naming its own operation), and a receive
//! stream ends cleanly. Both ends in one process; data checked byte for
//! byte where any arrives.

mod common;

use common::{assert_bytes, device_name, pattern, seed};
use rdma_safe::cm::CmOptions;
use rdma_safe::error::Operation;
use rdma_safe::owned::Request;
use rdma_safe::{
    BufferPool, Channel, Error, ProtectionDomain, ReadWorkRequest, ReceiveWorkRequest,
    RegisteredBuffer, RemoteAccessBuffer, RemoteMemoryRegion, SendWorkRequest, WorkSuccess,
    WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// Catches a hang, not a slow machine.
const HANG: Duration = Duration::from_secs(60);
const LEN: usize = 4096;
/// How long an operation is left in flight before the peer leaves.
const IN_FLIGHT: Duration = Duration::from_millis(300);

/// A server channel and its client (with completion events: `events`);
/// the client sends its table's region with the connect request, so that
/// the server can write and read it.
fn cm_pair(pd: &ProtectionDomain, table: &RemoteAccessBuffer, events: bool) -> (Channel, Channel) {
    let opts = CmOptions::default().timeout(HANG).completion_events(events);
    common::cm_pair(pd, &opts, &opts, &table.remote().to_bytes(), &[])
}

/// The client's table, as the server sees it.
fn client_table(server: &Channel) -> RemoteMemoryRegion {
    RemoteMemoryRegion::from_bytes(server.peer_private_data().expect("CM-made"))
        .expect("the client's region")
}

/// Waits until the server has seen the disconnect.
fn until_disconnected(server: &Channel) {
    let start = Instant::now();
    while !server.peer_disconnected() {
        assert!(start.elapsed() < HANG, "the disconnect never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Asserts that `outcome` is the peer's departure, for `operation`.
#[track_caller]
fn assert_gone<T: std::fmt::Debug>(outcome: Result<T, Error>, operation: Operation, at: &str) {
    match outcome {
        Err(Error::PeerDisconnected { operation: op }) if op == operation => {}
        other => panic!("{at}: expected the {operation} to report the peer gone, got {other:?}"),
    }
}

/// Every kind of operation, blocking, scoped and async, on a server whose
/// peer is gone.
fn assert_every_operation_gone(server: &mut Channel, pool: &BufferPool, at: &str) {
    let pd = server.pd().clone();
    let remote = client_table(server);
    let mut buf = RegisteredBuffer::new(&pd, LEN).expect("buffer");
    assert_gone(
        server.receive(ReceiveWorkRequest::new(&mut [buf.scatter(..)])),
        Operation::Receive,
        at,
    );
    assert_gone(
        server.send(SendWorkRequest::new(&[buf.gather(..)])),
        Operation::Send,
        at,
    );
    assert_gone(
        server.write(WriteWorkRequest::new(&[buf.gather(..)], remote)),
        Operation::Write,
        at,
    );
    assert_gone(
        server.read(ReadWorkRequest::new(&mut [buf.scatter(..)], remote)),
        Operation::Read,
        at,
    );
    let scoped = server.scope(|s| {
        let h = s.post_receive(ReceiveWorkRequest::new(&mut [buf.scatter(..)]))?;
        h.wait()
    });
    assert_gone(scoped.map_err(|e| e.flatten()), Operation::Receive, at);
    let shared = server.shared();
    let (got, _) = shared.run(Request::receive(pool.try_alloc().expect("a buffer")));
    assert_gone(got, Operation::Receive, at);
    let (sent, _) = shared.run(Request::send(pool.try_alloc().expect("a buffer").freeze()));
    assert_gone(sent, Operation::Send, at);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (got, _) = shared.submit(Request::receive(pool.alloc().await)).await;
        assert_gone(got, Operation::Receive, at);
        let mut stream = shared.receive_stream(pool.clone(), 2);
        assert!(
            stream.next().await.is_none(),
            "{at}: the stream ends cleanly"
        );
    });
}

/// Where the peer leaves.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// Before the server posts anything.
    BeforeAReceive,
    /// While a blocking receive waits.
    DuringAReceive,
    /// While a scope's receive waits.
    DuringAScopedReceive,
    /// While a receive stream waits.
    DuringAStream,
    /// After a message was received.
    AfterAReceive,
    /// With a send, an RDMA write or an RDMA read in flight (the peer's
    /// queue pair stops answering first, so that the request is retried
    /// until the disconnect arrives).
    SendInFlight,
    WriteInFlight,
    ReadInFlight,
}

/// The server's one operation at `point`, waiting while the client leaves;
/// its outcome.
fn operation_at(
    point: Point,
    server: &mut Channel,
    pool: &BufferPool,
) -> Result<WorkSuccess, Error> {
    let pd = server.pd().clone();
    let remote = client_table(server);
    let mut buf = RegisteredBuffer::new(&pd, LEN).expect("buffer");
    match point {
        Point::DuringAReceive => server.receive(ReceiveWorkRequest::new(&mut [buf.scatter(..)])),
        Point::DuringAScopedReceive => server
            .scope(|s| {
                let h = s.post_receive(ReceiveWorkRequest::new(&mut [buf.scatter(..)]))?;
                h.wait()
            })
            .map_err(|e| e.flatten()),
        Point::DuringAStream => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let shared = server.shared().with_tokio().expect("tokio reactor");
                let mut stream = shared.receive_stream(pool.clone(), 4);
                let next = tokio::time::timeout(HANG, stream.next())
                    .await
                    .expect("no hang");
                match common::ended_as_gone(next) {
                    Ok(item) => panic!("the stream yielded {item:?} instead of ending"),
                    Err(gone) => Err(gone),
                }
            })
        }
        Point::SendInFlight => server.send(SendWorkRequest::new(&[buf.gather(..)])),
        Point::WriteInFlight => server.write(WriteWorkRequest::new(&[buf.gather(..)], remote)),
        Point::ReadInFlight => server.read(ReadWorkRequest::new(&mut [buf.scatter(..)], remote)),
        Point::BeforeAReceive | Point::AfterAReceive => unreachable!("nothing in flight"),
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_departed_peer_is_reported_one_way_at_every_point() {
    let pd = ProtectionDomain::open(&device_name()).expect("pd");
    let pool = BufferPool::new(&pd, LEN, 8).expect("pool");
    let table = RemoteAccessBuffer::new(&pd, LEN).expect("the client's table");
    for point in [
        Point::BeforeAReceive,
        Point::DuringAReceive,
        Point::DuringAScopedReceive,
        Point::DuringAStream,
        Point::AfterAReceive,
        Point::SendInFlight,
        Point::WriteInFlight,
        Point::ReadInFlight,
    ] {
        let at = format!("{point:?}");
        // The stream waits through the completion driver (events).
        let events = matches!(point, Point::DuringAStream);
        let (mut server, client) = cm_pair(&pd, &table, events);
        match point {
            Point::BeforeAReceive => {
                drop(client);
                until_disconnected(&server);
            }
            Point::AfterAReceive => {
                let msg = pattern(seed("peer-gone", 1), LEN);
                let mut client = client;
                let mut rx = RegisteredBuffer::new(&pd, LEN).expect("rx");
                std::thread::scope(|t| {
                    let r = t.spawn(|| {
                        server
                            .receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
                            .expect("the message")
                    });
                    std::thread::sleep(Duration::from_millis(50));
                    let tx = RegisteredBuffer::register(&pd, msg.clone()).expect("tx");
                    client
                        .send(SendWorkRequest::new(&[tx.gather(..)]))
                        .expect("send");
                    assert_eq!(r.join().expect("receiver").bytes(), LEN);
                });
                assert_bytes(&rx[..], &msg, "the message before the departure");
                drop(client);
                until_disconnected(&server);
            }
            _ => {
                let in_flight = matches!(
                    point,
                    Point::SendInFlight | Point::WriteInFlight | Point::ReadInFlight
                );
                if in_flight {
                    // The peer's queue pair stops answering (no
                    // disconnect yet): the request is retried meanwhile.
                    client.shared().shutdown();
                }
                let outcome = std::thread::scope(|t| {
                    t.spawn(move || {
                        std::thread::sleep(IN_FLIGHT);
                        drop(client);
                    });
                    operation_at(point, &mut server, &pool)
                });
                let operation = match point {
                    Point::SendInFlight => Operation::Send,
                    Point::WriteInFlight => Operation::Write,
                    Point::ReadInFlight => Operation::Read,
                    _ => Operation::Receive,
                };
                eprintln!("{at}: {outcome:?}");
                assert_gone(outcome, operation, &at);
                until_disconnected(&server);
            }
        }
        assert_every_operation_gone(&mut server, &pool, &at);
        drop(server);
        common::assert_pool_full(&pool, &at);
    }
}
