//! Channels made by the RDMA connection manager, on the device: private data
//! both ways, data checked byte for byte, several clients at once, the
//! failures (nobody listening, an unresolvable or unreachable address, too
//! much private data, a peer that disconnects mid-transfer), async
//! operations over a CM channel, and that nothing is left behind.

mod common;

use common::{assert_bytes, device_ip, pattern, registered, seed};
use rdma_safe::owned::Request;
use rdma_safe::{
    cm::CmOptions, cm::Incoming, error::VerbsError, memory::REMOTE_REGION_ENCODED_LEN, BufferPool,
    Channel, Error, Listener, ReceiveWorkRequest, RegisteredBuffer, RemoteMemoryRegion,
    SendWorkRequest, WriteWorkRequest,
};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

/// The IPv4 address of the test device's net device (`RXE_IPV4`, set by
/// `cargo xtask test-rxe`; 10.0.2.15 in its VM).
fn opts(timeout: Duration) -> CmOptions {
    CmOptions::default().timeout(timeout)
}

/// A listener on the device's address, on a free port.
fn listener(timeout: Duration) -> (Listener, SocketAddr) {
    let listener = Listener::bind_with(format!("{}:0", device_ip()), &opts(timeout))
        .unwrap_or_else(|e| {
            panic!(
                "listen on {}:0 through the RDMA CM: {e} (is rdma_ucm loaded?)",
                device_ip()
            )
        });
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    assert_ne!(addr.port(), 0);
    (listener, addr)
}

/// Exchanges one message each way on a connected pair, from the client's
/// and the server's side of it, and checks the bytes.
fn ping(channel: &mut Channel, first: bool, tag: &str) {
    let out = pattern(seed(tag, 4096 + 13), 4096 + 13);
    let tx = registered(channel.pd(), out.clone());
    let mut rx = RegisteredBuffer::new(channel.pd(), out.len()).expect("receive buffer");
    let sender = |ch: &mut Channel| {
        ch.send(SendWorkRequest::new(&[tx.gather(..)]))
            .expect("send");
    };
    if first {
        // Give the peer a moment to post its receive (RNR retries cover the
        // rest: the channel's RNR retry count is unlimited).
        sender(channel);
    }
    let got = channel
        .receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
        .expect("receive");
    assert_eq!(got.bytes(), out.len());
    assert_bytes(&rx[..], &out, tag);
    if !first {
        sender(channel);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn private_data_both_ways_then_a_write_to_the_advertised_region() {
    let (listener, addr) = listener(Duration::from_secs(20));
    let server = thread::spawn(move || {
        let incoming: Incoming = listener.incoming().expect("a connect request");
        let region =
            RemoteMemoryRegion::from_bytes(&incoming.private_data()[..REMOTE_REGION_ENCODED_LEN])
                .expect("the client's region in its private data");
        let mut channel = incoming.accept(b"server-hello").expect("accept");
        let data = pattern(seed("cm-write", 8192), 8192);
        let tx = registered(channel.pd(), data.clone());
        channel
            .write(WriteWorkRequest::new(&[tx.gather(..)], region))
            .expect("RDMA write into the client's region");
        // Tell the client the write is done.
        channel
            .send(SendWorkRequest::new(&[tx.gather(..1)]))
            .expect("send done");
        data
    });
    let connector = rdma_safe::cm::Connector::resolve(addr, &opts(Duration::from_secs(20)))
        .expect("resolve the listener's address");
    let mut sink = vec![0u8; 8192];
    // SAFETY: `sink` outlives the region (declared first, dropped last) and
    // is not touched while the server may write it: only after the server's
    // "done" message has arrived.
    let region = unsafe {
        rdma_safe::MemoryRegion::register_shared_mr(connector.pd(), sink.as_mut_ptr(), sink.len())
    }
    .expect("register the sink for remote write");
    let mut channel = connector
        .connect(&region.remote().to_bytes())
        .expect("connect with the region as private data");
    let theirs = channel
        .peer_private_data()
        .expect("a CM channel has private data");
    assert_eq!(&theirs[..12], b"server-hello");
    assert!(channel.peer_addr().is_some());
    let mut done = RegisteredBuffer::new(channel.pd(), 1).expect("done buffer");
    channel
        .receive(ReceiveWorkRequest::new(&mut [done.scatter(..)]))
        .expect("the server's done message");
    let sent = server.join().expect("server thread");
    drop(channel);
    drop(region);
    assert_bytes(&sink, &sent, "RDMA write through a CM connection");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_listener_accepts_several_clients_at_once() {
    const CLIENTS: usize = 4;
    let (listener, addr) = listener(Duration::from_secs(30));
    let server = thread::spawn(move || {
        let mut handlers = Vec::new();
        for _ in 0..CLIENTS {
            let mut channel = listener.accept().expect("accept a client");
            let tag = String::from_utf8_lossy(
                channel
                    .peer_private_data()
                    .unwrap()
                    .split(|&b| b == 0)
                    .next()
                    .unwrap(),
            )
            .into_owned();
            handlers.push(thread::spawn(move || ping(&mut channel, false, &tag)));
        }
        for h in handlers {
            h.join().expect("server handler");
        }
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            thread::spawn(move || {
                let tag = format!("cm-client-{i}");
                let mut channel =
                    Channel::connect_to_with(addr, tag.as_bytes(), &opts(Duration::from_secs(30)))
                        .expect("connect");
                ping(&mut channel, true, &tag);
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    server.join().expect("server");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn connecting_where_nobody_listens_is_a_clear_error_in_bounded_time() {
    // A port just freed: nobody listens there any more.
    let (listener, addr) = listener(Duration::from_secs(5));
    drop(listener);
    let start = Instant::now();
    let err = Channel::connect_to_with(addr, &[], &opts(Duration::from_secs(10)))
        .expect_err("nobody listens");
    let took = start.elapsed();
    eprintln!("no listener: {err} after {took:?}");
    assert!(
        matches!(
            &err,
            Error::Verbs(VerbsError::Cm {
                event: "RDMA_CM_EVENT_REJECTED" | "RDMA_CM_EVENT_UNREACHABLE",
                ..
            }) | Error::Verbs(VerbsError::Timeout { .. })
        ),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(60), "hang bound: {took:?}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_unresolvable_name_and_an_unreachable_address_fail_clearly() {
    let err = Channel::connect_to_with(
        "no-such-host.invalid:7174",
        &[],
        &opts(Duration::from_secs(5)),
    )
    .expect_err("the name does not resolve");
    eprintln!("unresolvable: {err}");
    assert!(matches!(err, Error::Io(_)), "{err:?}");

    // Nobody on the guest's subnet answers ARP for .99: address resolution
    // fails (or times out) within the bound.
    let ip = device_ip();
    let unreachable = format!("{}.99:7174", ip.rsplit_once('.').unwrap().0);
    let start = Instant::now();
    let err = Channel::connect_to_with(unreachable.as_str(), &[], &opts(Duration::from_secs(5)))
        .expect_err("nobody answers");
    let took = start.elapsed();
    eprintln!("unreachable {unreachable}: {err} after {took:?}");
    assert!(
        matches!(
            &err,
            Error::Verbs(VerbsError::Cm { .. } | VerbsError::Timeout { .. })
        ),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(60), "hang bound: {took:?}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn too_much_private_data_is_refused_clearly() {
    let (listener, addr) = listener(Duration::from_secs(20));
    let err = Channel::connect_to_with(addr, &[1u8; 57], &opts(Duration::from_secs(10)))
        .expect_err("57 bytes do not fit a connect request");
    eprintln!("connect with 57 bytes: {err}");
    assert!(
        matches!(&err, Error::Verbs(VerbsError::InvalidArgument(_))),
        "{err:?}"
    );
    assert!(err.to_string().contains("at most 56"), "{err}");

    // An accept carries at most 192 bytes of ours (the transport's 196
    // less the path-MTU trailer); the refused accept leaves the
    // request pending until it is dropped (which rejects it).
    let server = thread::spawn(move || {
        let incoming = listener.incoming().expect("a request");
        // `accept` consumes the request; too much data is refused before
        // anything reaches the wire, and dropping the request rejects it.
        let err = incoming
            .accept(&[2u8; 193])
            .expect_err("193 bytes do not fit an accept");
        err.to_string()
    });
    let client = Channel::connect_to_with(addr, b"x", &opts(Duration::from_secs(10)));
    let server_err = server.join().unwrap();
    eprintln!(
        "accept with 193 bytes: {server_err}; client: {:?}",
        client.as_ref().err()
    );
    assert!(server_err.contains("at most 192"), "{server_err}");
    assert!(client.is_err(), "the client must not be connected");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_peer_that_disconnects_mid_transfer_fails_pending_work_with_a_typed_error() {
    let (listener, addr) = listener(Duration::from_secs(20));
    let client = thread::spawn(move || {
        let channel =
            Channel::connect_to_with(addr, &[], &opts(Duration::from_secs(20))).expect("connect");
        thread::sleep(Duration::from_millis(500));
        drop(channel); // disconnects while the server waits for a message
    });
    let mut channel = listener.accept().expect("accept");
    // A receive that would wait the whole (long) timeout if the disconnect
    // went unnoticed.
    channel.set_timeout(Duration::from_secs(60));
    let mut rx = RegisteredBuffer::new(channel.pd(), 64).expect("buffer");
    let start = Instant::now();
    let err = channel
        .receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
        .expect_err("the peer left");
    let took = start.elapsed();
    client.join().unwrap();
    eprintln!("pending receive: {err} after {took:?}");
    assert!(matches!(err, Error::PeerDisconnected { .. }), "{err:?}");
    assert!(channel.peer_disconnected());
    assert!(
        took < Duration::from_secs(30),
        "noticed well within the timeout: {took:?}"
    );
    assert_eq!(channel.outstanding(), 0);
}

/// `rdma res show` counts of the device's objects of `kind` (`cm_id`, `qp`,
/// `pd`), or `None` when the tool cannot run.
fn resource_count(kind: &str) -> Option<usize> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show", kind])
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    })
}

fn counts() -> Option<[usize; 3]> {
    Some([
        resource_count("cm_id")?,
        resource_count("qp")?,
        resource_count("pd")?,
    ])
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn nothing_is_left_behind() {
    let Some(before) = counts() else {
        let msg = "nothing_is_left_behind: `rdma res show` (iproute2) cannot run here";
        assert!(
            std::env::var("RDMA_TEST_REQUIRE_DEVICE").as_deref() != Ok("1"),
            "{msg}"
        );
        eprintln!("SKIPPED {msg}");
        return;
    };
    {
        let (listener, addr) = listener(Duration::from_secs(20));
        let server = thread::spawn(move || {
            let mut channel = listener.accept().expect("accept");
            ping(&mut channel, false, "cm-leak");
            // A rejected request and a refused accept leave nothing either.
            let incoming = listener.incoming().expect("second request");
            incoming.reject(b"no").expect("reject");
        });
        let mut channel =
            Channel::connect_to_with(addr, &[], &opts(Duration::from_secs(20))).expect("connect");
        ping(&mut channel, true, "cm-leak");
        let rejected = Channel::connect_to_with(addr, &[], &opts(Duration::from_secs(20)));
        assert!(rejected.is_err());
        server.join().unwrap();
        drop(channel);
        let _ = Channel::connect_to_with(
            format!("{}:1", device_ip()).as_str(),
            &[],
            &opts(Duration::from_secs(5)),
        );
    }
    // The kernel destroys identifiers and QPs as their last user closes
    // them; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = counts().unwrap();
    while after != before && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
        after = counts().unwrap();
    }
    assert_eq!(after, before, "[cm_id, qp, pd] counts after vs before");
}

/// A CM-made channel works with the async API: 200 messages echoed through
/// tokio futures on both sides, every byte checked, then the client's
/// disconnect ends the server's pending receive with a flush at once (the
/// channel says why) instead of the timeout.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_cm_channel_serves_async_operations() {
    use rdma_safe::BufferPool;
    const MESSAGES: usize = 200;
    const LEN: usize = 300;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cm_opts = opts(Duration::from_secs(30)).completion_events(true);
    let listener = Listener::bind_with(format!("{}:0", device_ip()), &cm_opts).expect("listen");
    let addr = listener.local_addr().expect("bound");
    let outcome = rt.block_on(async move {
        let server = tokio::task::spawn_blocking(move || listener.accept().expect("accept"));
        let client = tokio::task::spawn_blocking(move || {
            Channel::connect_to_with(addr, b"async", &cm_opts).expect("connect")
        });
        let (server, client) = (server.await.unwrap(), client.await.unwrap());
        assert_eq!(&server.peer_private_data().unwrap()[..5], b"async");
        let s = server.shared().with_tokio().expect("server on tokio");
        let c = client.shared().with_tokio().expect("client on tokio");
        let s_pool = BufferPool::new(server.pd(), LEN, 8).expect("server pool");
        let c_pool = BufferPool::new(client.pd(), LEN, 8).expect("client pool");
        let echo = {
            let (s, pool) = (s.clone(), s_pool.clone());
            tokio::spawn(async move {
                let mut incoming = s.receive_stream(pool, 4);
                for _ in 0..MESSAGES {
                    let (got, buf) = incoming.next().await.expect("open").expect("receive");
                    assert_eq!(got.bytes(), LEN);
                    let (r, _) = s.submit(Request::send(buf.freeze())).await;
                    r.expect("server echo");
                }
                // The next receive waits for a message that never comes: the
                // client's disconnect ends the stream.
                let started = Instant::now();
                let end = incoming.next().await.map(|r| r.map(|(got, _)| got));
                (end, started.elapsed())
            })
        };
        // Receives stay posted ahead of the echoes.
        let mut echoes = c.receive_stream(c_pool.clone(), 4);
        for i in 0..MESSAGES {
            let out = pattern(seed("cm-async", i), LEN);
            let mut tx = c_pool.alloc().await;
            tx.fill_from(&out);
            let (r, _) = c.submit(Request::send(tx.freeze())).await;
            r.expect("client send");
            let (got, back) = echoes.next().await.expect("stream open").expect("echo");
            assert_eq!(got.bytes(), LEN);
            assert_bytes(&back[..], &out, "echoed over a CM channel");
        }
        drop((echoes, c, client));
        let (pending, took) = echo.await.expect("echo task");
        assert!(server.peer_disconnected(), "the server saw the disconnect");
        drop((s, server));
        common::assert_pool_full(&s_pool, "server buffers back");
        (pending, took)
    });
    let (end, took) = outcome;
    eprintln!("the receive stream after the client left: {end:?} after {took:?}");
    assert!(
        end.is_none(),
        "a clean disconnect ends the stream (None), not an error item: {end:?}"
    );
    assert!(
        took < Duration::from_secs(20),
        "flushed by the disconnect, not the 30 s timeout: {took:?}"
    );
}

/// The connection lives as long as anything can post on it: a
/// `SharedChannel` taken from a CM channel that is then dropped at once
/// (`Channel::connect_to(..)?.shared()`) still carries messages both ways,
/// and dropping it, the last handle, disconnects the peer.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_shared_channel_keeps_the_connection_after_the_channel_is_dropped() {
    let (listener, addr) = listener(Duration::from_secs(20));
    let server = thread::spawn(move || {
        let mut channel = listener.accept().expect("accept");
        ping(&mut channel, false, "cm-shared-keeps");
        // The client drops its last handle: the peer disconnects.
        let start = Instant::now();
        while !channel.peer_disconnected() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the peer never disconnected"
            );
            thread::sleep(Duration::from_millis(5));
        }
        start.elapsed()
    });
    let channel =
        Channel::connect_to_with(addr, &[], &opts(Duration::from_secs(20))).expect("connect");
    let out = pattern(seed("cm-shared-keeps", 4096 + 13), 4096 + 13);
    let pool = BufferPool::new(channel.pd(), out.len(), 2).expect("pool");
    let shared = channel.shared();
    drop(channel);
    // Only the shared handle is left: send, then receive the reply.
    let (sent, _) = shared.run(Request::send(common::frozen(&pool, &out)));
    sent.expect("a send on the shared handle after the channel was dropped");
    let (got, rx) = shared.run(Request::receive(
        pool.try_alloc().expect("a receive buffer"),
    ));
    assert_eq!(got.expect("the reply").bytes(), out.len());
    assert_bytes(&rx[..out.len()], &out, "the reply");
    drop(rx);
    assert!(shared.unusable_reason().is_none());
    drop(shared);
    let noticed = server.join().expect("server");
    eprintln!("the server saw the disconnect {noticed:?} after the last handle was dropped");
}
