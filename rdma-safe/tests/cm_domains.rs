//! One protection domain for many CM connections, on the device: a server
//! accepts 64 clients into the domain it opened, serves every one of them
//! from one buffer pool (each reply checked byte for byte), and a domain
//! that cannot serve a connection is refused with an error naming it.

mod common;

use common::{device_ip, pattern, seed};
use rdma_safe::owned::Request;
use rdma_safe::{channel::Context, cm::CmOptions, BufferPool, Channel, Listener, ProtectionDomain};
use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

fn opts() -> CmOptions {
    CmOptions::default().timeout(Duration::from_secs(30))
}

const CLIENTS: usize = 64;
const LEN: usize = 512;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_domain_and_one_pool_serve_many_clients() {
    let pd = ProtectionDomain::open(&common::device_name()).expect("pd");
    // Two buffers per client: its request and its reply.
    let pool = BufferPool::new(&pd, LEN, 2 * CLIENTS).expect("one pool for all clients");
    let listener =
        Listener::bind_in(&pd, format!("{}:0", device_ip()), &opts()).expect("listen in pd");
    let addr: SocketAddr = listener.local_addr().expect("bound");
    let server = {
        let pool = pool.clone();
        thread::spawn(move || {
            // One thread per connection, every one echoing through the one
            // pool of the listener's domain.
            let mut served = Vec::new();
            for _ in 0..CLIENTS {
                let incoming = listener.incoming().expect("a connect request");
                assert!(
                    std::ptr::eq(incoming.pd().context().as_ptr(), pd.context().as_ptr()),
                    "the listener's domain"
                );
                let channel = incoming.accept(&[]).expect("accept");
                let pool = pool.clone();
                served.push(thread::spawn(move || {
                    let shared = channel.shared();
                    let (got, req) = shared.run(Request::receive(
                        pool.try_alloc().expect("a request buffer"),
                    ));
                    let n = got.expect("a request").bytes();
                    let mut reply = pool.try_alloc().expect("a reply buffer");
                    reply.fill_from(&req[..n]);
                    drop(req);
                    let (sent, _) = shared.run(Request::send(reply.freeze()));
                    sent.expect("the reply");
                    channel
                }));
            }
            let channels: Vec<Channel> = served
                .into_iter()
                .map(|h| h.join().expect("a connection's thread"))
                .collect();
            assert_eq!(pool.available(), pool.capacity(), "every pool buffer back");
            channels.len()
        })
    };
    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| {
            thread::spawn(move || {
                // Each client in its own domain (the default: shared per
                // device by default connections).
                let mut ch = Channel::connect_to_with(addr, &[], &opts()).expect("connect");
                let data = pattern(seed("cm-domains", k), LEN);
                let tx = common::registered(ch.pd(), data.clone());
                let mut rx = common::registered(ch.pd(), vec![0u8; LEN]);
                ch.send(rdma_safe::SendWorkRequest::new(&[tx.gather(..)]))
                    .expect("send the request");
                let got = ch
                    .receive(rdma_safe::ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
                    .expect("the reply");
                assert_eq!(got.bytes(), LEN);
                assert_eq!(&rx[..], &data[..], "client {k}'s reply");
                ch
            })
        })
        .collect();
    let clients: Vec<Channel> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    assert_eq!(server.join().expect("server"), CLIENTS);
    drop(clients);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_domain_that_cannot_serve_the_connection_is_named() {
    // A domain on a context of its own (ibv_open_device), not the
    // connection manager's.
    let ctx = Context::open(&common::device_name()).expect("context");
    let alone = ProtectionDomain::new(&ctx).expect("pd");
    let listener =
        Listener::bind_in(&alone, format!("{}:0", device_ip()), &opts()).expect("listen");
    let addr = listener.local_addr().expect("bound");
    let client = thread::spawn(move || Channel::connect_to_with(addr, &[], &opts()));
    let err = listener.incoming().expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("ProtectionDomain::open"), "{msg}");
    drop(listener);
    assert!(
        client.join().expect("client").is_err(),
        "the client was turned away"
    );
    let err = Channel::connect_in(&alone, addr, &[], &opts()).expect_err("refused too");
    assert!(err.to_string().contains("ProtectionDomain::open"), "{err}");
}
