//! Connecting and accepting as futures, on the device: a tokio service
//! accepts 64 CM clients into one protection domain and serves them from
//! one buffer pool (every reply checked byte for byte) while a client that
//! drops its connection mid-request costs only its own; the failures of
//! the async calls are the blocking calls', each bounded.

mod common;

use common::{assert_bytes, device_ip, pattern, seed};
use rdma_safe::owned::Request;
use rdma_safe::{
    cm::CmOptions, cm::Connector, error::VerbsError, pool::PoolBuf, BufferPool, Channel, Error,
    Listener, ProtectionDomain, SharedChannel,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Bound on a whole test: a hang fails instead of blocking test-rxe.
const TEST_BOUND: Duration = Duration::from_secs(240);
const CLIENTS: usize = 64;
const REQUESTS: usize = 4;
const LEN: usize = 256;

fn opts() -> CmOptions {
    CmOptions::default()
        .timeout(Duration::from_secs(30))
        .completion_events(true)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Request `k` of client `client`: who sent it in the first bytes, then a
/// pattern of its own.
fn request(client: usize, k: usize) -> Vec<u8> {
    let mut m = pattern(seed("cm-async", client * 1000 + k), LEN);
    m[..4].copy_from_slice(&(client as u32).to_le_bytes());
    m[4..8].copy_from_slice(&(k as u32).to_le_bytes());
    m
}

fn filled(mut buf: PoolBuf, data: &[u8]) -> rdma_safe::pool::PoolBytes {
    buf.fill_from(data);
    buf.freeze()
}

/// Serves one connection: echoes every request until the peer goes away.
/// Returns how many it echoed and how the connection ended.
async fn echo(channel: Channel, pool: BufferPool) -> (usize, Option<String>) {
    let shared = channel.shared().with_tokio().expect("register with tokio");
    let mut echoed = 0;
    loop {
        let (got, req) = shared.submit(Request::receive(pool.alloc().await)).await;
        let n = match got {
            Ok(s) => s.bytes(),
            Err(err) => return (echoed, Some(err.to_string())),
        };
        let reply = filled(pool.alloc().await, &req[..n]);
        drop(req);
        let (sent, _) = shared.submit(Request::send(reply)).await;
        if let Err(err) = sent {
            return (echoed, Some(err.to_string()));
        }
        echoed += 1;
    }
}

/// One well-behaved client: `REQUESTS` requests, each reply checked.
async fn client(pd: ProtectionDomain, addr: SocketAddr, pool: BufferPool, id: usize) -> Channel {
    let channel = Connector::resolve_in_async(&pd, addr, &opts())
        .await
        .expect("resolve the server")
        .connect_async(&(id as u32).to_le_bytes())
        .await
        .expect("connect");
    let shared: SharedChannel = channel.shared().with_tokio().expect("register with tokio");
    for k in 0..REQUESTS {
        let want = request(id, k);
        // The reply's receive is posted before the request leaves.
        let reply = shared.submit(Request::receive(pool.alloc().await));
        let (sent, _) = shared
            .submit(Request::send(filled(pool.alloc().await, &want)))
            .await;
        sent.expect("the request");
        let (got, buf) = reply.await;
        assert_eq!(got.expect("the reply").bytes(), LEN);
        assert_bytes(&buf[..LEN], &want, "the echoed request");
    }
    channel
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_tokio_service_accepts_64_clients_on_one_domain_and_one_pool() {
    let rt = runtime();
    let pd = ProtectionDomain::open(&common::device_name()).expect("pd");
    // Server and clients each hold at most two buffers per connection.
    let pool = BufferPool::new(&pd, LEN, 4 * (CLIENTS + 1) + 8).expect("one pool");
    rt.block_on(async {
        tokio::time::timeout(TEST_BOUND, async {
            let listener = Listener::bind_in(&pd, format!("{}:0", device_ip()), &opts())
                .expect("listen in pd");
            let addr = listener.local_addr().expect("bound");
            let server = {
                let (pool, pd) = (pool.clone(), pd.clone());
                tokio::spawn(async move {
                    let mut served = tokio::task::JoinSet::new();
                    for _ in 0..CLIENTS + 1 {
                        let incoming = listener.incoming_async().await.expect("a request");
                        assert!(
                            std::ptr::eq(incoming.pd().context().as_ptr(), pd.context().as_ptr()),
                            "accepted into the listener's domain"
                        );
                        let pool = pool.clone();
                        served.spawn(async move {
                            let channel = incoming.accept_async(&[]).await.expect("accept");
                            echo(channel, pool).await
                        });
                    }
                    served.join_all().await
                })
            };
            // A client that sends one request and is gone before the reply:
            // its connection ends on the server, nothing else does.
            let rude = {
                let (pd, pool) = (pd.clone(), pool.clone());
                tokio::spawn(async move {
                    let channel = Connector::resolve_in_async(&pd, addr, &opts())
                        .await
                        .expect("resolve")
                        .connect_async(b"rude")
                        .await
                        .expect("connect");
                    let shared = channel.shared().with_tokio().expect("tokio");
                    let (sent, _) = shared
                        .submit(Request::send(filled(pool.alloc().await, &request(999, 0))))
                        .await;
                    sent.expect("the rude request");
                    drop(shared);
                    drop(channel);
                })
            };
            let mut clients = tokio::task::JoinSet::new();
            for id in 0..CLIENTS {
                clients.spawn(client(pd.clone(), addr, pool.clone(), id));
            }
            let channels = clients.join_all().await;
            rude.await.expect("the rude client");
            drop(channels);
            let served = server.await.expect("the server");
            let full = served.iter().filter(|(n, _)| *n == REQUESTS).count();
            assert_eq!(full, CLIENTS, "every good client served: {served:?}");
            let cut = served.iter().filter(|(n, _)| *n < REQUESTS).count();
            assert_eq!(cut, 1, "only the rude client's connection cut short");
            for (_, end) in &served {
                let end = end.as_deref().expect("every connection ends with its peer");
                assert!(
                    end.contains("disconnect") || end.contains("flush"),
                    "a connection ends when its peer goes: {end}"
                );
            }
        })
        .await
        .expect("the service and its 65 clients within the bound");
    });
    common::assert_pool_full(&pool, "every buffer back");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn async_connect_and_accept_fail_as_the_blocking_calls_do_within_their_bounds() {
    let rt = runtime();
    rt.block_on(async {
        let short = opts().timeout(Duration::from_secs(5));
        let listener = Listener::bind_with(format!("{}:0", device_ip()), &short).expect("listen");
        let addr = listener.local_addr().expect("bound");

        // No request within 50 ms: None, soon after.
        let start = Instant::now();
        let none = listener
            .incoming_async_within(Duration::from_millis(50))
            .await
            .expect("waiting is no error");
        assert!(none.is_none());
        // Only a hang fails this: the wait ended (measured: a few ms).
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );

        // The bounded form names what it waited for.
        let err = listener
            .incoming_async()
            .await
            .expect_err("nobody connects");
        assert!(
            matches!(err, Error::Verbs(VerbsError::Timeout { .. })),
            "{err:?}"
        );
        assert!(err.to_string().contains("connect request"), "{err}");

        // Nobody listens on a port just freed: a CM reject, bounded.
        drop(listener);
        let start = Instant::now();
        let err = Channel::connect_to_async(addr, &[], &short)
            .await
            .expect_err("nobody listens");
        eprintln!("no listener: {err} after {:?}", start.elapsed());
        assert!(
            matches!(
                &err,
                Error::Verbs(VerbsError::Cm { .. }) | Error::Verbs(VerbsError::Timeout { .. })
            ),
            "{err:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(60));

        // A loopback address: the same advice as the blocking call.
        let err = Channel::connect_to_async("127.0.0.1:7471", &[], &short)
            .await
            .expect_err("no RDMA device on lo");
        assert!(err.to_string().contains("loopback"), "{err}");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_cancelled_connect_leaves_the_listener_serving() {
    let rt = runtime();
    let pd = ProtectionDomain::open(&common::device_name()).expect("pd");
    let pool = BufferPool::new(&pd, LEN, 8).expect("pool");
    rt.block_on(async {
        tokio::time::timeout(TEST_BOUND, async {
            let listener =
                Listener::bind_in(&pd, format!("{}:0", device_ip()), &opts()).expect("listen");
            let addr = listener.local_addr().expect("bound");
            // Connects abandoned at once and after a few ms: whatever stage
            // they reached is undone when they are dropped.
            let options = opts();
            for wait_ms in [0, 1, 5] {
                let attempt = Channel::connect_to_async(addr, b"gone", &options);
                let _ = tokio::time::timeout(Duration::from_millis(wait_ms), attempt).await;
            }
            let server = {
                let pool = pool.clone();
                tokio::spawn(async move {
                    // Requests of abandoned connects may still be queued:
                    // skip those whose accept fails.
                    loop {
                        let incoming = listener.incoming_async().await.expect("a request");
                        if incoming.private_data().starts_with(b"gone") {
                            let _ = incoming.reject(&[]);
                            continue;
                        }
                        let channel = incoming.accept_async(&[]).await.expect("accept");
                        return echo(channel, pool).await;
                    }
                })
            };
            let channel = client(pd.clone(), addr, pool.clone(), 7).await;
            drop(channel);
            let (echoed, _) = server.await.expect("server");
            assert_eq!(echoed, REQUESTS);
        })
        .await
        .expect("within the bound");
    });
}

/// A broken connection fails the futures waiting on it at once, not after
/// their 30 s timeout: the peer's disconnect, and a shutdown from another
/// task. (The bound asserted is generous for a loaded machine; the
/// measured times are printed.)
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_broken_connection_fails_waiting_futures_at_once() {
    let rt = runtime();
    let pd = ProtectionDomain::open(&common::device_name()).expect("pd");
    let pool = BufferPool::new(&pd, LEN, 16).expect("pool");
    rt.block_on(async {
        tokio::time::timeout(TEST_BOUND, async {
            let listener =
                Listener::bind_in(&pd, format!("{}:0", device_ip()), &opts()).expect("listen");
            let addr = listener.local_addr().expect("bound");
            for case in ["the peer disconnects", "another task shuts it down"] {
                let accept = async {
                    listener
                        .incoming_async()
                        .await
                        .expect("a request")
                        .accept_async(&[])
                        .await
                        .expect("accept")
                };
                let connect = async {
                    Connector::resolve_in_async(&pd, addr, &opts())
                        .await
                        .expect("resolve")
                        .connect_async(&[])
                        .await
                        .expect("connect")
                };
                let (server, client) = tokio::join!(accept, connect);
                let shared = server.shared().with_tokio().expect("tokio");
                // Receives waiting on the server: nothing will come.
                let mut waiting = tokio::task::JoinSet::new();
                for _ in 0..4 {
                    let (shared, buf) = (shared.clone(), pool.alloc().await);
                    waiting.spawn(async move {
                        let (got, _) = shared.submit(Request::receive(buf)).await;
                        got
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                let start = Instant::now();
                match case {
                    "the peer disconnects" => drop(client),
                    _ => {
                        shared.shutdown();
                        drop(client);
                    }
                }
                for got in waiting.join_all().await {
                    let err = got.expect_err("nothing was sent");
                    eprintln!("{case}: {err}");
                }
                let took = start.elapsed();
                eprintln!("{case}: every waiting future failed after {took:?}");
                // Behaviour, not speed: the futures' own timeout is 30 s,
                // so ending well before it means the break woke them.
                assert!(took < Duration::from_secs(20), "{case}: {took:?}");
                drop(shared);
                drop(server);
            }
            common::assert_pool_full(&pool, "every buffer back");
        })
        .await
        .expect("within the bound");
    });
}

/// A peer that stays silent (connected, sending nothing) for longer than
/// the server's timeout keeps its receive stream — posted receives are not
/// a stall — while the same one-worker runtime (the two-host VMs have one
/// vCPU) keeps serving another connection; its disconnect then ends the
/// stream cleanly. (A silent peer whose host died is the keepalive's to
/// find: `tests/liveness.rs`.)
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_silent_peer_keeps_its_receive_stream_while_others_are_served() {
    const IDLE: Duration = Duration::from_secs(2);
    const BUSY_REQUESTS: usize = 40;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pd = ProtectionDomain::open(&common::device_name()).expect("pd");
    let pool = BufferPool::new(&pd, LEN, 32).expect("pool");
    rt.block_on(async {
        tokio::time::timeout(TEST_BOUND, async {
            let listener =
                Listener::bind_in(&pd, format!("{}:0", device_ip()), &opts()).expect("listen");
            let addr = listener.local_addr().expect("bound");
            // Serves one connection from a receive stream, its waits
            // bounded by IDLE: echoes until the stream ends or fails.
            let serve = |channel: Channel, pool: BufferPool| async move {
                let shared = channel
                    .shared()
                    .with_tokio()
                    .expect("tokio")
                    .with_timeout(IDLE);
                let mut messages = shared.receive_stream(pool, 4);
                let mut echoed = 0;
                let start = Instant::now();
                let end = loop {
                    match messages.next().await {
                        Some(Ok((_, buf))) => {
                            let (sent, _) = shared.submit(Request::send(buf.freeze())).await;
                            sent.expect("an echo");
                            echoed += 1;
                        }
                        Some(Err(err)) => break Some(err),
                        None => break None,
                    }
                };
                (echoed, end, start.elapsed())
            };
            let accept = || async {
                listener
                    .incoming_async()
                    .await
                    .expect("a request")
                    .accept_async(&[])
                    .await
                    .expect("accept")
            };
            let connect = || async {
                Connector::resolve_in_async(&pd, addr, &opts())
                    .await
                    .expect("resolve")
                    .connect_async(&[])
                    .await
                    .expect("connect")
            };
            // The silent peer: connected, never sends, never disconnects
            // (its channel lives until the end of the test).
            let (server, silent_peer) = tokio::join!(accept(), connect());
            let silent = tokio::spawn(serve(server, pool.clone()));
            let (server, busy_peer) = tokio::join!(accept(), connect());
            let busy = tokio::spawn(serve(server, pool.clone()));
            // The busy peer: a request every 100 ms for twice IDLE.
            let shared = busy_peer.shared().with_tokio().expect("tokio");
            for k in 0..BUSY_REQUESTS {
                let want = request(1, k);
                let reply = shared.submit(Request::receive(pool.alloc().await));
                let (sent, _) = shared
                    .submit(Request::send(filled(pool.alloc().await, &want)))
                    .await;
                sent.expect("the request");
                let (got, buf) = reply.await;
                assert_eq!(got.expect("the reply").bytes(), LEN);
                assert_bytes(&buf[..LEN], &want, "the echoed request");
                drop(buf);
                tokio::time::sleep(IDLE * 2 / BUSY_REQUESTS as u32).await;
            }
            // Twice the timeout has passed: the silent connection is up.
            assert!(!silent.is_finished(), "the silent peer's stream ended");
            // Dropping a connected channel on the runtime's one worker
            // does not wait for its CM watcher thread (up to 50 ms before)
            // nor destroy the identifier there: measured, and bounded only
            // against a block of seconds.
            let start = Instant::now();
            drop(shared);
            drop(busy_peer);
            let took = start.elapsed();
            eprintln!("dropping the busy peer's channel took {took:?} of the worker");
            assert!(took < Duration::from_secs(2), "{took:?}");
            let (echoed, end, _) = busy.await.expect("the busy connection's task");
            eprintln!("busy peer: {echoed} echoed, ended with {end:?}");
            assert_eq!(echoed, BUSY_REQUESTS, "the other connection served in full");
            let start = Instant::now();
            drop(silent_peer);
            eprintln!(
                "dropping the silent peer's channel took {:?}",
                start.elapsed()
            );
            let (echoed, end, took) = silent.await.expect("the silent connection's task");
            eprintln!("silent peer: {echoed} echoed, ended after {took:?} with {end:?}");
            assert_eq!(echoed, 0);
            assert!(
                end.is_none(),
                "the disconnect ends the stream cleanly: {end:?}"
            );
            assert!(took >= IDLE * 2, "{took:?}");
        })
        .await
        .expect("within the bound");
    });
    common::assert_pool_full(&pool, "every buffer back");
}
