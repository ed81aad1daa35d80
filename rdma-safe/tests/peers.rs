//! The library between two peers: every kind of transfer with a server side
//! and a client side that meet only through the network — a TCP side
//! channel for the handshake and RDMA for the data — checked byte for byte.
//!
//! In one process (the one-host tier) both sides run on the test device.
//! With `RDMA_TEST_PEER` set, one host runs the servers and another the
//! clients (`common::peer`): test-rxe's two-host tier runs this binary that
//! way in both directions, so every transfer here also crosses a link
//! between two kernels, each with its own rxe device. The byte stream
//! (blocking and async) is among them.

mod common;

use common::peer::{self, Link, Role};
use common::*;
use rdma_safe::channel::Gid;
use rdma_safe::cm::{CmOptions, Connector};
use rdma_safe::datagram::DatagramAddress;
use rdma_safe::memory::AccessFlags;
use rdma_safe::owned::Request;
use rdma_safe::stream::{RdmaStream, StreamListener};
use rdma_safe::work::{WcOpcode, WcStatus};
use rdma_safe::{
    AtomicWorkRequest, BufferPool, Channel, DatagramEndpoint, Listener, ProtectionDomain,
    ReadWorkRequest, ReceiveWorkRequest, RegisteredBuffer, RemoteAccessBuffer, RemoteMemoryRegion,
    SendWorkRequest, SharedReceiveQueue, WriteWorkRequest,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Sizes moved between the hosts (a TCG link carries ~6 MB/s, so the
/// largest stays at 1 MiB).
const SIZES_ACROSS: [usize; 6] = [0, 1, 7, 4096, 65536 + 13, 1 << 20];
/// Every wait of a side (each is also bounded by the channel's timeout).
const WAIT: Duration = Duration::from_secs(30);

/// A current-thread tokio runtime for a side's async part.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A channel of `pd` connected to the peer's through the link's handshake.
fn connected(pd: &ProtectionDomain, link: &mut Link) -> Channel {
    let mut ch = pd.create_channel().expect("create a channel");
    ch.handshake(link.stream())
        .expect("handshake with the peer");
    ch
}

/// Receives one message of `len` bytes into a fresh buffer (posted before
/// the peer is told to send) and checks it against the sender's pattern.
fn receive_one(ch: &mut Channel, link: &mut Link, tag: &str, len: usize, imm: Option<u32>) {
    let pd = ch.pd().clone();
    let mut rx = registered(&pd, vec![FILL; len + CANARY]);
    let got = ch
        .scope(|s| {
            let mut sc = [rx.scatter(..)];
            let h = s.post_receive(ReceiveWorkRequest::new(&mut sc))?;
            link.signal("posted");
            h.wait()
        })
        .unwrap_or_else(|e| panic!("{tag} len {len}: receive: {e}"));
    assert_eq!(got.opcode(), WcOpcode::Recv);
    assert_eq!(got.bytes(), len, "{tag} len {len}: received bytes");
    assert_eq!(got.immediate(), imm, "{tag} len {len}: immediate");
    let expected = pattern(seed(tag, len), len);
    assert_bytes(&rx[..len], &expected, &format!("{tag} len {len}"));
    assert_untouched(&rx[len..], &format!("{tag} len {len}: past the message"));
}

/// Sends the pattern of `tag` and `len` once the peer's receive is posted.
fn send_one(ch: &mut Channel, link: &mut Link, tag: &str, len: usize, imm: Option<u32>) {
    let pd = ch.pd().clone();
    let tx = registered(&pd, pattern(seed(tag, len), len.max(1)));
    link.wait_for("posted");
    let g = gather(&tx, 0..len);
    let mut wr = SendWorkRequest::new(&g);
    if let Some(i) = imm {
        wr = wr.with_immediate(i);
    }
    let sent = ch
        .send(wr)
        .unwrap_or_else(|e| panic!("{tag} len {len}: send: {e}"));
    assert_eq!(sent.bytes(), len, "{tag} len {len}: sent bytes");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_and_receive_both_ways_at_every_size() {
    let side = |mut link: Link| {
        let pd = pd();
        let mut ch = connected(&pd, &mut link);
        for len in SIZES_ACROSS {
            // Odd sizes carry immediate data.
            let imm = (len % 2 == 1).then_some(len as u32 ^ 0x5eed);
            let (up, down) = ("client to server", "server to client");
            if link.role == Role::Server {
                receive_one(&mut ch, &mut link, up, len, imm);
                send_one(&mut ch, &mut link, down, len, imm);
            } else {
                send_one(&mut ch, &mut link, up, len, imm);
                receive_one(&mut ch, &mut link, down, len, imm);
            }
        }
        link.meet("done");
        assert_quiescent(&ch, "after the exchange");
    };
    peer::run("send_and_receive_both_ways_at_every_size", side, side);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_write_and_read_through_a_lent_window_then_revoked() {
    const LEN: usize = 256 * 1024;
    peer::run(
        "rdma_write_and_read_through_a_lent_window_then_revoked",
        |mut link| {
            let pd = pd();
            let mut ch = connected(&pd, &mut link);
            let mut memory = vec![FILL; LEN + 2 * CANARY];
            let lent = &mut memory[CANARY..CANARY + LEN];
            let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
            ch.lend(lent, access, |_, window| {
                link.send(&window.to_bytes());
                link.wait_for("written and read back");
            })
            .expect("lend the window");
            // The borrow is back: the peer's bytes are in it, nothing else
            // changed, and the window is revoked before the peer tries it.
            let expected = pattern(seed("lent", LEN), LEN);
            assert_bytes(&memory[CANARY..CANARY + LEN], &expected, "lent memory");
            assert_untouched(&memory[..CANARY], "before the window");
            assert_untouched(&memory[CANARY + LEN..], "after the window");
            link.signal("revoked");
            link.wait_for("refused");
            assert_untouched(&memory[..CANARY], "before the window, at the end");
        },
        |mut link| {
            let pd = pd();
            let mut ch = connected(&pd, &mut link);
            let window = RemoteMemoryRegion::from_bytes(&link.receive()).expect("a window");
            assert_eq!(window.length(), LEN as u64);
            let src = registered(&pd, pattern(seed("lent", LEN), LEN));
            ch.write(WriteWorkRequest::new(&[src.gather(..)], window))
                .expect("write through the window");
            let mut back = registered(&pd, vec![FILL; LEN]);
            ch.read(ReadWorkRequest::new(&mut [back.scatter(..)], window))
                .expect("read through the window");
            assert_bytes(&back, &src, "read back across the link");
            link.signal("written and read back");
            link.wait_for("revoked");
            let e = ch
                .write(WriteWorkRequest::new(&[src.gather(..64)], window))
                .expect_err("a write through a revoked window");
            assert_eq!(
                e.status(),
                Some(WcStatus::RemoteAccessError),
                "the peer's NIC refuses the revoked key: {e}"
            );
            link.signal("refused");
        },
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_table_read_and_atomics_on_a_remote_access_buffer() {
    const LEN: usize = 64 * 1024;
    const ADDS: u64 = 100;
    const STEP: u64 = 3;
    const START: u64 = 1_000_000;
    peer::run(
        "a_table_read_and_atomics_on_a_remote_access_buffer",
        |mut link| {
            let pd = pd();
            let ch = connected(&pd, &mut link);
            let table = RemoteAccessBuffer::new(&pd, LEN).expect("the table");
            let mut content = pattern(seed("table", LEN), LEN);
            content[..8].copy_from_slice(&START.to_ne_bytes());
            content[8..16].copy_from_slice(&7u64.to_ne_bytes());
            table.write(0, &content).expect("fill the table");
            link.send(&table.remote().to_bytes());
            link.wait_for("done");
            // The counter saw every add, the swap happened once, the rest
            // is as written.
            let mut after = content.clone();
            after[..8].copy_from_slice(&(START + ADDS * STEP).to_ne_bytes());
            after[8..16].copy_from_slice(&42u64.to_ne_bytes());
            assert_bytes(
                &table.to_vec(),
                &after,
                "the table after the peer's atomics",
            );
            drop(ch);
        },
        |mut link| {
            let pd = pd();
            let mut ch = connected(&pd, &mut link);
            let remote = RemoteMemoryRegion::from_bytes(&link.receive()).expect("a region");
            let mut copy = registered(&pd, vec![FILL; LEN]);
            ch.read(ReadWorkRequest::new(&mut [copy.scatter(..)], remote))
                .expect("read the table");
            let mut expected = pattern(seed("table", LEN), LEN);
            expected[..8].copy_from_slice(&START.to_ne_bytes());
            expected[8..16].copy_from_slice(&7u64.to_ne_bytes());
            assert_bytes(&copy, &expected, "the table read across the link");
            let mut old = registered(&pd, vec![0u8; 8]);
            let counter = remote.slice(0, 8).expect("word 0");
            for k in 0..ADDS {
                let mut result = old.scatter(..);
                ch.run(AtomicWorkRequest::fetch_and_add(counter, STEP, &mut result))
                    .expect("fetch-and-add");
                let was = u64::from_ne_bytes(old[..].try_into().unwrap());
                assert_eq!(was, START + k * STEP, "fetch-and-add {k}: previous value");
            }
            let word = remote.slice(8, 8).expect("word 1");
            for (compare, seen) in [(5u64, 7u64), (7, 7), (7, 42)] {
                let mut result = old.scatter(..);
                ch.run(AtomicWorkRequest::compare_and_swap(
                    word,
                    compare,
                    42,
                    &mut result,
                ))
                .expect("compare-and-swap");
                let was = u64::from_ne_bytes(old[..].try_into().unwrap());
                assert_eq!(was, seen, "compare {compare}: previous value");
            }
            link.signal("done");
        },
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_batch_of_sends_into_a_batch_of_receives() {
    const MESSAGES: usize = 32;
    const SLOT: usize = 2048;
    let len = |k: usize| 1 + (k * 97) % SLOT;
    let tag = |k: usize| format!("batch message {k}");
    peer::run(
        "a_batch_of_sends_into_a_batch_of_receives",
        |mut link| {
            let pd = pd();
            let mut ch = connected(&pd, &mut link);
            let mut rx = registered(&pd, vec![FILL; MESSAGES * SLOT]);
            let got: Vec<usize> = ch
                .scope(|s| {
                    let mut lists = scatter_chunks(&mut rx, SLOT);
                    let mut wrs: Vec<_> = lists
                        .iter_mut()
                        .map(|l| ReceiveWorkRequest::new(l))
                        .collect();
                    let handles = s.post_receive_batch(&mut wrs)?;
                    link.signal("posted");
                    handles
                        .into_iter()
                        .map(|h| h.wait().map(|w| w.bytes()))
                        .collect::<rdma_safe::Result<Vec<_>>>()
                })
                .expect("the batch of receives");
            for (k, bytes) in got.into_iter().enumerate() {
                assert_eq!(bytes, len(k), "message {k}: length");
                let slot = &rx[k * SLOT..(k + 1) * SLOT];
                assert_bytes(&slot[..len(k)], &pattern(seed(&tag(k), k), len(k)), &tag(k));
                assert_untouched(&slot[len(k)..], &format!("{}: past it", tag(k)));
            }
            link.meet("done");
        },
        |mut link| {
            let pd = pd();
            let mut ch = connected(&pd, &mut link);
            let bufs: Vec<RegisteredBuffer<Vec<u8>>> = (0..MESSAGES)
                .map(|k| registered(&pd, pattern(seed(&tag(k), k), len(k))))
                .collect();
            let lists: Vec<[_; 1]> = bufs.iter().map(|b| [b.gather(..)]).collect();
            let mut wrs: Vec<_> = lists.iter().map(|l| SendWorkRequest::new(l)).collect();
            link.wait_for("posted");
            // One doorbell, the last signalled: its completion covers all.
            ch.run_batch(&mut wrs).expect("the batch of sends");
            link.meet("done");
            assert_quiescent(&ch, "after the batch");
        },
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn owned_buffers_echoed_by_an_async_service() {
    const MESSAGES: usize = 200;
    const LEN: usize = 512;
    let channel = |link: &mut Link, pd: &ProtectionDomain| {
        let mut ch = pd
            .channel_builder()
            .completion_events(true)
            .build()
            .expect("a channel with completion events");
        ch.handshake(link.stream()).expect("handshake");
        ch
    };
    peer::run(
        "owned_buffers_echoed_by_an_async_service",
        |mut link| {
            let pd = pd();
            let ch = channel(&mut link, &pd);
            let pool = BufferPool::new(&pd, LEN, 32).expect("a pool");
            runtime().block_on(async {
                let shared = ch.shared().with_tokio().expect("tokio");
                let mut requests = shared.receive_stream(pool.clone(), 16);
                link.signal("serving");
                for k in 0..MESSAGES {
                    let (done, request) = requests
                        .next()
                        .await
                        .expect("a request")
                        .unwrap_or_else(|e| panic!("request {k}: {e}"));
                    let mut reply = pool.alloc().await;
                    let mut bytes = request[..done.bytes()].to_vec();
                    bytes.reverse();
                    reply.fill_from(&bytes);
                    drop(request);
                    let (sent, _) = shared.submit(Request::send(reply.freeze())).await;
                    sent.unwrap_or_else(|e| panic!("reply {k}: {e}"));
                }
            });
            link.meet("done");
        },
        |mut link| {
            let pd = pd();
            let ch = channel(&mut link, &pd);
            let pool = BufferPool::new(&pd, LEN, 32).expect("a pool");
            runtime().block_on(async {
                let shared = ch.shared().with_tokio().expect("tokio");
                let mut replies = shared.receive_stream(pool.clone(), 16);
                link.wait_for("serving");
                for k in 0..MESSAGES {
                    let message = pattern(seed("echo", k), 1 + (k * 31) % LEN);
                    let mut request = pool.alloc().await;
                    request.fill_from(&message);
                    let (sent, _) = shared.submit(Request::send(request.freeze())).await;
                    sent.unwrap_or_else(|e| panic!("request {k}: {e}"));
                    let (done, reply) = replies
                        .next()
                        .await
                        .expect("a reply")
                        .unwrap_or_else(|e| panic!("reply {k}: {e}"));
                    let mut expected = message;
                    expected.reverse();
                    assert_bytes(&reply[..done.bytes()], &expected, &format!("reply {k}"));
                }
            });
            link.meet("done");
        },
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn two_connections_draw_from_one_shared_receive_queue() {
    const PER_CHANNEL: usize = 40;
    let message = |c: usize, k: usize| pattern(seed(&format!("srq {c}"), k), 1 + (k * 53) % 256);
    peer::run(
        "two_connections_draw_from_one_shared_receive_queue",
        |mut link| {
            let pd = pd();
            // Fewer slots than messages: refilled while the senders wait.
            let mut srq = SharedReceiveQueue::new(&pd, 16, 256).expect("a shared receive queue");
            let mut qpns = Vec::new();
            let mut channels = Vec::new();
            for _ in 0..2 {
                let mut ch = pd
                    .channel_builder()
                    .shared_receive_queue(&srq)
                    .build()
                    .expect("a channel on the queue");
                ch.handshake(link.stream()).expect("handshake");
                qpns.push(ch.qp_num());
                channels.push(ch);
            }
            let mut next = [0usize; 2];
            let mut buf = vec![FILL; 256];
            for _ in 0..2 * PER_CHANNEL {
                buf.fill(FILL);
                let r = srq
                    .receive(&mut buf, WAIT)
                    .expect("a receive")
                    .expect("a message within the wait");
                let c = qpns
                    .iter()
                    .position(|&q| q == r.qp_num())
                    .expect("a message of one of the two connections");
                let want = message(c, next[c]);
                assert_bytes(
                    &buf[..r.len()],
                    &want,
                    &format!("connection {c}, {}", next[c]),
                );
                next[c] += 1;
            }
            assert_eq!(next, [PER_CHANNEL; 2]);
            link.meet("done");
        },
        |mut link| {
            let pd = pd();
            let mut channels: Vec<Channel> = (0..2).map(|_| connected(&pd, &mut link)).collect();
            for k in 0..PER_CHANNEL {
                for (c, ch) in channels.iter_mut().enumerate() {
                    let tx = registered(&pd, message(c, k));
                    ch.send(SendWorkRequest::new(&[tx.gather(..)]))
                        .unwrap_or_else(|e| panic!("connection {c}, message {k}: {e}"));
                }
            }
            link.meet("done");
        },
    );
}

/// A datagram address as bytes for the side channel.
fn address_bytes(a: &DatagramAddress) -> Vec<u8> {
    let mut v = a.gid.as_bytes().to_vec();
    v.extend_from_slice(&a.lid.to_le_bytes());
    v.extend_from_slice(&a.qp_num.to_le_bytes());
    v.extend_from_slice(&a.qkey.to_le_bytes());
    v
}

fn address_from(b: &[u8]) -> DatagramAddress {
    assert_eq!(b.len(), 26, "a datagram address");
    DatagramAddress {
        gid: Gid(b[..16].try_into().unwrap()),
        lid: u16::from_le_bytes(b[16..18].try_into().unwrap()),
        qp_num: u32::from_le_bytes(b[18..22].try_into().unwrap()),
        qkey: u32::from_le_bytes(b[22..26].try_into().unwrap()),
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn datagrams_both_ways() {
    const QKEY: u32 = 0x1111_2222;
    const ROUNDS: usize = 50;
    let side = |mut link: Link| {
        let pd = pd();
        let mut ep = DatagramEndpoint::new(&pd, QKEY).expect("a datagram endpoint");
        link.send(&address_bytes(&ep.address()));
        let theirs = address_from(&link.receive());
        let peer_ = ep.peer(&theirs).expect("an address handle for the peer");
        link.meet("ready");
        // At most the path MTU (1024 under rxe on a 1500-byte link).
        let max = ep.max_message().min(1024);
        let mut buf = vec![FILL; max + CANARY];
        for k in 0..ROUNDS {
            let msg = pattern(seed("datagram", k), 1 + (k * 211) % max);
            let mut check = |ep: &mut DatagramEndpoint, what: &str| {
                buf.fill(FILL);
                let d = ep
                    .receive(&mut buf)
                    .unwrap_or_else(|e| panic!("{what} {k}: {e}"));
                assert_eq!(d.source_qp(), theirs.qp_num, "{what} {k}: sender");
                assert_bytes(&buf[..d.len()], &msg, &format!("{what} {k}"));
                assert_untouched(&buf[d.len()..], &format!("{what} {k}: past it"));
            };
            // The client sends first; the server answers with the same bytes.
            if link.role == Role::Client {
                ep.send_to(&peer_, &msg).expect("send a datagram");
                check(&mut ep, "answer");
            } else {
                check(&mut ep, "datagram");
                ep.send_to(&peer_, &msg).expect("answer a datagram");
            }
        }
        link.meet("done");
    };
    peer::run("datagrams_both_ways", side, side);
}

fn cm_options() -> CmOptions {
    CmOptions::default().timeout(WAIT)
}

/// The listener's address, as the server side sent it over the link.
fn listener_address(link: &mut Link) -> SocketAddr {
    String::from_utf8(link.receive())
        .expect("an address")
        .parse()
        .expect("a socket address")
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn connection_manager_blocking_and_async() {
    const LEN: usize = 4096;
    peer::run(
        "connection_manager_blocking_and_async",
        |mut link| {
            let pd = pd();
            let opts = cm_options().completion_events(true);
            let listener =
                Listener::bind_in(&pd, format!("{}:0", device_ip()), &opts).expect("listen");
            let addr = listener.local_addr().expect("a bound address");
            link.send(addr.to_string().as_bytes());
            // First a blocking accept, then an awaited one.
            let mut first = listener
                .incoming()
                .expect("the first request")
                .accept(b"blocking")
                .expect("accept");
            // The transport pads private data: compare what was sent.
            assert_eq!(
                first.peer_private_data().map(|d| &d[..5]),
                Some(&b"hello"[..])
            );
            receive_one(&mut first, &mut link, "cm blocking", LEN, None);
            let rt = runtime();
            let mut second = rt
                .block_on(async {
                    listener
                        .incoming_async()
                        .await?
                        .accept_async(b"async")
                        .await
                })
                .expect("an awaited accept");
            receive_one(&mut second, &mut link, "cm async", LEN, Some(9));
            link.meet("done");
        },
        |mut link| {
            let pd = pd();
            let addr = listener_address(&mut link);
            let mut first = Connector::resolve_in(&pd, addr, &cm_options())
                .expect("resolve")
                .connect(b"hello")
                .expect("connect");
            assert_eq!(
                first.peer_private_data().map(|d| &d[..8]),
                Some(&b"blocking"[..])
            );
            send_one(&mut first, &mut link, "cm blocking", LEN, None);
            let rt = runtime();
            let mut second = rt
                .block_on(async {
                    let opts = cm_options().completion_events(true);
                    Connector::resolve_in_async(&pd, addr, &opts)
                        .await?
                        .connect_async(&[])
                        .await
                })
                .expect("an awaited connect");
            assert_eq!(
                second.peer_private_data().map(|d| &d[..5]),
                Some(&b"async"[..])
            );
            send_one(&mut second, &mut link, "cm async", LEN, Some(9));
            link.meet("done");
        },
    );
}

/// Reads exactly `n` bytes from a blocking stream and checks them against
/// the pattern of `tag`.
fn stream_read_checked(s: &mut RdmaStream, tag: &str, n: usize) {
    let mut got = vec![0u8; n];
    std::io::Read::read_exact(s, &mut got).unwrap_or_else(|e| panic!("{tag} {n}: read: {e}"));
    assert_bytes(&got, &pattern(seed(tag, n), n), &format!("{tag} {n}"));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_byte_stream_blocking_and_async() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    peer::run(
        "a_byte_stream_blocking_and_async",
        |mut link| {
            let listener = StreamListener::bind_with(format!("{}:0", device_ip()), &cm_options())
                .expect("listen");
            let addr = listener.local_addr().expect("a bound address");
            link.send(addr.to_string().as_bytes());
            // A blocking stream: every size up, each answered down.
            let mut s = listener.accept().expect("accept");
            for n in SIZES_ACROSS {
                stream_read_checked(&mut s, "stream up", n);
                std::io::Write::write_all(&mut s, &pattern(seed("stream down", n), n))
                    .expect("write down");
            }
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut rest).expect("the end of the stream");
            assert!(rest.is_empty(), "nothing after the last size");
            // An async one: the client writes everything, then reads it
            // back echoed.
            let rt = runtime();
            rt.block_on(async {
                let mut s = listener.accept_async().await.expect("an awaited accept");
                let mut buf = vec![0u8; 64 * 1024 + 3];
                loop {
                    let n = s.read(&mut buf).await.expect("read");
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).await.expect("echo");
                }
                s.shutdown().await.expect("shutdown");
            });
        },
        |mut link| {
            let addr = listener_address(&mut link);
            let mut s = RdmaStream::connect_with(addr, &cm_options()).expect("connect");
            for n in SIZES_ACROSS {
                std::io::Write::write_all(&mut s, &pattern(seed("stream up", n), n))
                    .expect("write up");
                stream_read_checked(&mut s, "stream down", n);
            }
            s.blocking_shutdown(std::net::Shutdown::Write)
                .expect("shutdown");
            drop(s);
            let rt = runtime();
            rt.block_on(async {
                let s = RdmaStream::connect_async(addr, &cm_options())
                    .await
                    .expect("an awaited connect");
                let (mut rd, mut wr) = tokio::io::split(s);
                const TOTAL: usize = 1 << 20;
                let sent = pattern(seed("stream echo", TOTAL), TOTAL);
                let (_, echoed) = tokio::join!(
                    async {
                        for chunk in sent.chunks(7919) {
                            wr.write_all(chunk).await.expect("write");
                        }
                        wr.shutdown().await.expect("shutdown");
                    },
                    async {
                        let mut echoed = Vec::with_capacity(TOTAL);
                        rd.read_to_end(&mut echoed).await.expect("read the echo");
                        echoed
                    }
                );
                assert_bytes(&echoed, &sent, "the echo");
            });
        },
    );
}

/// The keepalive tests' probe interval, ACK timeout exponent (67 ms a
/// try) and retry count.
const KEEPALIVE: Duration = Duration::from_millis(300);
const KEEPALIVE_ACK_TIMEOUT: u8 = 14;
const KEEPALIVE_RETRIES: u8 = 3;

/// The keepalive tests' transport settings, for both sides: an accepted
/// channel takes its ACK timeout from its own options but its retry count
/// from the connecting side's (the CM's accept does not carry one).
fn keepalive_transport() -> CmOptions {
    cm_options()
        .ack_timeout(KEEPALIVE_ACK_TIMEOUT)
        .retry_count(KEEPALIVE_RETRIES)
}

/// A keepalive test: the server accepts with the keepalive on and waits in
/// a blocking receive for a message that never comes; the client, alive
/// and quiet for six intervals (its NIC answers the probes), then falls
/// silent by `fall_silent` (`how` says how) and never disconnects until
/// the server has found it gone. `fall_silent` returns a value that lives
/// until then (`afterwards` gets it before the client's channel goes) and
/// the instant the client fell silent; the client sends the server how
/// long before its word that was.
///
/// The server must report `PeerDisconnected` on its receive, having seen
/// at least three probes answered; the time from the client's falling
/// silent (by the server's clock: the client's word, less the lag it
/// sent, so short by the side channel's one-way latency) to the report is
/// printed beside the documented worst case ([`Channel::set_keepalive`]),
/// and asserted only as a hang bound (a loaded, emulated host is several
/// times slower).
fn a_quiet_peer_falls_silent<S>(
    test: &str,
    how: &str,
    fall_silent: impl FnOnce(&Channel) -> (S, Instant) + Send,
    afterwards: impl FnOnce(S) + Send,
) {
    use rdma_safe::error::Operation;
    use rdma_safe::Error;
    peer::run(
        test,
        |mut link| {
            let pd = pd();
            let opts = keepalive_transport().keepalive(KEEPALIVE);
            let listener =
                Listener::bind_in(&pd, format!("{}:0", device_ip()), &opts).expect("listen");
            link.send(listener.local_addr().expect("bound").to_string().as_bytes());
            let mut server = listener
                .incoming()
                .expect("a request")
                .accept(&[])
                .expect("accept");
            let (posted_before, _) = server.totals();
            let mut buf = registered(&pd, vec![FILL; 64]);
            let (outcome, ended, silent) = std::thread::scope(|t| {
                let silent = t.spawn(|| {
                    let lag = Duration::from_nanos(link.receive_u64());
                    Instant::now() - lag
                });
                let outcome = server.receive(ReceiveWorkRequest::new(&mut [buf.scatter(..)]));
                let ended = Instant::now();
                (outcome, ended, silent.join().expect("the link reader"))
            });
            let took = ended.saturating_duration_since(silent);
            // The worst case: the peer died just after answering a probe.
            let retry_budget = Duration::from_nanos(
                4096 * (1 << KEEPALIVE_ACK_TIMEOUT) * (u64::from(KEEPALIVE_RETRIES) + 1),
            );
            let bound = KEEPALIVE + retry_budget;
            // Posted since the accept: the receive, the probes answered and
            // the one that failed.
            let (posted_after, _) = server.totals();
            let answered = (posted_after - posted_before).saturating_sub(2);
            eprintln!(
                "{test}: {outcome:?} {took:?} after the peer's {how} \
                 (documented worst case {bound:?}: {KEEPALIVE:?} + {retry_budget:?}); \
                 {answered} probes answered before"
            );
            match outcome {
                Err(Error::PeerDisconnected {
                    operation: Operation::Receive,
                }) => {}
                other => panic!("expected the peer gone, got {other:?}"),
            }
            assert!(
                answered >= 3,
                "probes answered while the peer lived: {answered} \
                 ({posted_before} → {posted_after} posts)"
            );
            // A hang bound only: the documented bound plus a slow machine.
            assert!(took < WAIT / 2, "found only after {took:?}");
            assert!(buf.iter().all(|&b| b == FILL), "nothing was received");
            link.signal("found");
            link.wait_for("silence over");
        },
        |mut link| {
            let pd = pd();
            let addr = listener_address(&mut link);
            let client = Connector::resolve_in(&pd, addr, &keepalive_transport())
                .expect("resolve")
                .connect(&[])
                .expect("connect");
            std::thread::sleep(KEEPALIVE * 6);
            let (silence, since) = fall_silent(&client);
            link.send_u64(since.elapsed().as_nanos() as u64);
            link.wait_for("found");
            afterwards(silence);
            link.signal("silence over");
            drop(client);
        },
    );
}

/// A quiet peer whose queue pair stops answering, with no disconnect, is
/// found by the server's keepalive: the server's blocking receive, waiting
/// for a message that never comes, reports `PeerDisconnected` within the
/// keepalive's bound. Before that the peer is alive and quiet, and the
/// probes it answers keep the channel up.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_quiet_peer_that_stops_answering_is_found_by_the_keepalive() {
    a_quiet_peer_falls_silent(
        "a_quiet_peer_that_stops_answering_is_found_by_the_keepalive",
        "queue pair stopped answering",
        |client| {
            client.shared().shutdown();
            ((), Instant::now())
        },
        |()| {},
    );
}

/// A quiet peer whose host dies, as far as the network can tell, is found
/// by the server's keepalive: the same as
/// [`a_quiet_peer_that_stops_answering_is_found_by_the_keepalive`], but
/// the client's queue pair stays up and its host drops all its RoCE
/// traffic instead ([`RoceCut`]: `tc` on the client host's link NIC, both
/// directions), so the probes and their retries die on the wire. The
/// filter must have dropped at least one packet.
///
/// Two hosts only: on one host both sides share the device (rxe loops a
/// packet to its own address back without the NIC), so the cut would not
/// cut them apart. Without `RDMA_TEST_PEER` (the one-host tier, the same
/// binary) the test says so and returns; test-rxe's two-host tier runs it,
/// each host cutting itself off once.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_quiet_peer_whose_host_dies_is_found_by_the_keepalive() {
    const TEST: &str = "a_quiet_peer_whose_host_dies_is_found_by_the_keepalive";
    if !peer::across_hosts() {
        eprintln!(
            "{TEST}: skipped on one host (RDMA_TEST_PEER unset): a cut of the RoCE \
             traffic needs the peer on another host; test-rxe's two-host tier runs it"
        );
        return;
    }
    a_quiet_peer_falls_silent(
        TEST,
        "host went dark (all RoCE traffic dropped)",
        |_| {
            let cut = RoceCut::new();
            let since = cut.since;
            (cut, since)
        },
        |cut| {
            let dropped = cut.dropped();
            eprintln!(
                "{TEST}: the cut on {} dropped {dropped} packets",
                cut.netdev
            );
            assert!(dropped >= 1, "the cut dropped nothing: it tested nothing");
        },
    );
}

/// This host's RoCE v2 traffic cut in both directions while the value
/// lives: a clsact qdisc on the device's link NIC whose ingress and egress
/// share one filter block, in which u32 filters drop UDP to port 4791
/// (every RoCE v2 packet's destination port), IPv4 and IPv6. Other traffic
/// (the tests' TCP side channel) passes. Dropping it removes the qdisc,
/// also when a test panics, so the link is whole for the next test. Needs
/// root (CAP_NET_ADMIN) and `tc`.
struct RoceCut {
    netdev: String,
    /// When the IPv4 filter (the tests' traffic) was in place.
    since: Instant,
}

impl RoceCut {
    /// The shared filter block's index.
    const BLOCK: &'static str = "4791";

    fn new() -> RoceCut {
        let netdev = roce_netdev();
        // Loaded where they are modules (Debian's kernel); built in, or
        // missing (then tc says what), is not this call's error.
        let _ = std::process::Command::new("modprobe")
            .args(["-a", "sch_ingress", "cls_u32", "act_gact"])
            .status();
        let b = Self::BLOCK;
        tc(&[
            "qdisc",
            "add",
            "dev",
            &netdev,
            "ingress_block",
            b,
            "egress_block",
            b,
            "clsact",
        ]);
        // From here on, dropping the cut removes the qdisc.
        let mut cut = RoceCut {
            netdev,
            since: Instant::now(),
        };
        for (proto, prio, ip) in [("ip", "1", "ip"), ("ipv6", "2", "ip6")] {
            tc(&[
                "filter", "add", "block", b, "protocol", proto, "prio", prio, "u32", "match", ip,
                "protocol", "17", "0xff", "match", ip, "dport", "4791", "0xffff", "action", "drop",
            ]);
            if proto == "ip" {
                cut.since = Instant::now();
            }
        }
        cut
    }

    /// Packets the filters have dropped (both directions).
    fn dropped(&self) -> u64 {
        let stats = tc(&["-s", "filter", "show", "block", Self::BLOCK]);
        let mut words = stats.split_whitespace();
        let mut total = 0;
        while let Some(w) = words.next() {
            if w == "(dropped" {
                let n = words.next().unwrap_or_default().trim_end_matches(',');
                total += n.parse::<u64>().unwrap_or_else(|e| {
                    panic!("a drop count in `tc -s filter show`: {n:?}: {e}\n{stats}")
                });
            }
        }
        total
    }
}

impl Drop for RoceCut {
    fn drop(&mut self) {
        let out = std::process::Command::new("tc")
            .args(["qdisc", "del", "dev", &self.netdev, "clsact"])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            other => eprintln!("the RoCE cut on {} was not removed: {other:?}", self.netdev),
        }
    }
}

/// The test device's link NIC: port 1's first GID's netdev, else
/// `RXE_NETDEV` (set by test-rxe).
fn roce_netdev() -> String {
    let sysfs = format!(
        "/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/0",
        device_name()
    );
    std::fs::read_to_string(&sysfs)
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("RXE_NETDEV").ok())
        .unwrap_or_else(|| panic!("no netdev for the RoCE cut: neither {sysfs} nor RXE_NETDEV"))
}

/// Runs `tc ARGS`; its standard output, or a panic with its error.
fn tc(args: &[&str]) -> String {
    let out = std::process::Command::new("tc")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run `tc {}`: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "`tc {}` failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
