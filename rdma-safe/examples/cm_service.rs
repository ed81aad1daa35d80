//! A tokio request/reply service over the RDMA connection manager: the
//! server accepts clients as futures into one protection domain and serves
//! all of them from one [`BufferPool`]; each client keeps 16 requests in
//! flight and matches replies to requests by id.
//!
//! No thread bridge, no `spawn_blocking`, one protection domain: accepting
//! (`Listener::incoming_async`, `Incoming::prepare` to post the receives
//! first, `Acceptance::accept_async`) and
//! connecting (`Connector::resolve_in_async`, `connect_async`) are futures
//! like the transfers.
//!
//! Replies may arrive in any order a server chooses, so a client needs one
//! task that owns the receive stream and routes each reply to the request
//! that waits for it (the *router*): here a map from request id to a
//! oneshot sender. Requests and replies carry the id in their first 8
//! bytes.
//!
//! `cm_service` runs a server and four clients on `$RXE_DEVICE` (default
//! `rxe0`) at `$RXE_IPV4` (default `10.0.2.15`); `cargo xtask test-rxe`
//! runs it (rdma-safe's `examples` test).

use rdma_safe::owned::Request;
use rdma_safe::{
    cm::CmOptions, cm::Connector, pool::PoolBuf, BufferPool, Channel, Listener, ProtectionDomain,
    SharedChannel,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Bytes of a request or reply, and how many a client keeps in flight.
const LEN: usize = 64;
const IN_FLIGHT: usize = 16;

fn options() -> CmOptions {
    // Futures sleep on completion events; every wait is bounded.
    CmOptions::default()
        .completion_events(true)
        .timeout(Duration::from_secs(30))
}

/// The reply to `request`: its id, then its bytes reversed.
pub(crate) fn reply_to(request: &[u8]) -> Vec<u8> {
    let mut reply = request.to_vec();
    reply[8..].reverse();
    reply
}

/// Serves `clients` connections, each until its peer leaves; returns how
/// many requests it answered.
pub(crate) async fn server(
    pool: BufferPool,
    listener: Listener,
    clients: usize,
) -> rdma_safe::Result<usize> {
    let mut served = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let incoming = listener.incoming_async().await?;
        let pool = pool.clone();
        served.spawn(async move {
            // The receives go up before the accept: a client sends as soon
            // as it is accepted, possibly seconds before this side sees the
            // connection established (if its ready-to-use message is lost).
            let (channel, acceptance) = incoming.prepare()?;
            let shared = channel.shared().with_tokio()?;
            let mut requests = shared.receive_stream(pool.clone(), IN_FLIGHT);
            requests.post_now()?;
            acceptance.accept_async(&[]).await?;
            let mut answered = 0;
            // Ends when the client disconnects.
            while let Some(item) = requests.next().await {
                let (done, request) = item?;
                let mut reply = pool.alloc().await;
                reply.fill_from(&reply_to(&request[..done.bytes()]));
                drop(request);
                let (sent, _) = shared.submit(Request::send(reply.freeze())).await;
                sent?;
                answered += 1;
            }
            Ok::<_, rdma_safe::Error>(answered)
        });
    }
    let mut total = 0;
    for answered in served.join_all().await {
        total += answered?;
    }
    Ok(total)
}

/// Replies waiting for their request, by id.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>>;

/// A client: `requests` requests, [`IN_FLIGHT`] at a time, each reply
/// matched to its request by id and checked.
pub(crate) async fn client(
    pd: ProtectionDomain,
    addr: SocketAddr,
    id: u64,
    requests: u64,
) -> rdma_safe::Result<()> {
    let channel: Channel = Connector::resolve_in_async(&pd, addr, &options())
        .await?
        .connect_async(&[])
        .await?;
    let shared: SharedChannel = channel.shared().with_tokio()?;
    let pool = BufferPool::new(&pd, LEN, 2 * IN_FLIGHT)?;
    let waiting: Waiting = Arc::default();
    // The router: owns the receive stream, hands each reply to its waiter.
    let router = {
        let (stream_pool, waiting) = (pool.clone(), waiting.clone());
        let mut replies = shared.receive_stream(stream_pool, IN_FLIGHT);
        tokio::spawn(async move {
            while let Some(item) = replies.next().await {
                let (done, reply) = item?;
                let reply = reply[..done.bytes()].to_vec();
                let rid = u64::from_le_bytes(reply[..8].try_into().expect("8 bytes"));
                let waiter = waiting.lock().expect("router map").remove(&rid);
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(reply);
                    }
                    None => eprintln!("cm_service: a reply to no request ({rid:#x})"),
                }
            }
            Ok::<_, rdma_safe::Error>(())
        })
    };
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..requests {
        if calls.len() == IN_FLIGHT {
            calls.join_next().await.expect("a call").expect("a call")?;
        }
        let rid = (id << 32) | n;
        let mut request: PoolBuf = pool.alloc().await;
        let bytes: Vec<u8> = rid
            .to_le_bytes()
            .into_iter()
            .chain((0..LEN - 8).map(|i| (rid as usize + i) as u8))
            .collect();
        request.fill_from(&bytes);
        let (tx, rx) = oneshot::channel();
        waiting.lock().expect("router map").insert(rid, tx);
        let shared = shared.clone();
        calls.spawn(async move {
            let (sent, _) = shared.submit(Request::send(request.freeze())).await;
            sent?;
            let reply = tokio::time::timeout(Duration::from_secs(30), rx)
                .await
                .map_err(|_| std::io::Error::other("no reply within 30 s"))?
                .map_err(|_| std::io::Error::other("the router ended"))?;
            assert_eq!(reply, reply_to(&bytes), "reply to request {rid:#x}");
            Ok::<_, rdma_safe::Error>(())
        });
    }
    while let Some(call) = calls.join_next().await {
        call.expect("a call")?;
    }
    // Every reply is in: the router stops (its stream's receives stay
    // with the engine until the NIC is done with them), and dropping the
    // connection ends the server's side.
    router.abort();
    if let Ok(routed) = router.await {
        routed?;
    }
    drop(shared);
    drop(channel);
    Ok(())
}

/// A server and four clients in one runtime; every reply checked.
pub(crate) fn both(device: &str, ip: &str) -> rdma_safe::Result<()> {
    const CLIENTS: usize = 4;
    const REQUESTS: u64 = 200;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let pd = ProtectionDomain::open(device)?;
        // One pool for every connection of the server.
        let pool = BufferPool::new(&pd, LEN, 2 * IN_FLIGHT * CLIENTS)?;
        let listener = Listener::bind_in(&pd, format!("{ip}:0"), &options())?;
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let server = tokio::spawn(server(pool, listener, CLIENTS));
        let mut clients = tokio::task::JoinSet::new();
        for c in 0..CLIENTS as u64 {
            clients.spawn(client(pd.clone(), addr, c, REQUESTS));
        }
        for done in clients.join_all().await {
            done?;
        }
        let answered = server.await.expect("the server")?;
        assert_eq!(answered, CLIENTS * REQUESTS as usize);
        println!("cm_service: {CLIENTS} clients, {answered} requests answered and checked");
        Ok(())
    })
}

#[allow(dead_code)] // the `examples` test includes this file and calls `both`
fn main() -> rdma_safe::Result<()> {
    let device = std::env::var("RXE_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let ip = std::env::var("RXE_IPV4").unwrap_or_else(|_| "10.0.2.15".into());
    both(&device, &ip)
}
