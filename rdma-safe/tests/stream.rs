//! Byte streams (rsocket protocol) between our client and our server on
//! the device: data checked byte for byte at several sizes both ways,
//! shutdown and end of stream, a peer that vanishes, and peers that do not
//! speak the protocol or break it (a raw channel playing the peer).

mod common;

use common::{device_ip, pattern, seed};
use rdma_safe::cm::CmOptions;
use rdma_safe::error::ErrorKind;
use rdma_safe::stream::{RdmaStream, StreamListener};
use rdma_safe::{cm::Connector, RemoteMemoryRegion};
use rdma_safe::{Channel, Error, RegisteredBuffer, RemoteAccessBuffer, WriteWorkRequest};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

fn opts() -> CmOptions {
    CmOptions::default().timeout(TIMEOUT)
}

fn listener() -> (StreamListener, SocketAddr) {
    let listener = StreamListener::bind_with(format!("{}:0", device_ip()), &opts())
        .unwrap_or_else(|e| panic!("listen on {}:0: {e} (is rdma_ucm loaded?)", device_ip()));
    let addr = listener.local_addr().expect("bound");
    (listener, addr)
}

/// Reads exactly `n` bytes.
fn read_n(s: &mut RdmaStream, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    s.read_exact(&mut got)
        .unwrap_or_else(|e| panic!("reading {n} bytes: {e}"));
    got
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn every_size_arrives_whole_both_ways() {
    const SIZES: [usize; 5] = [1, 64, 4096, 1 << 20, 8 << 20];
    let (listener, addr) = listener();
    thread::scope(|t| {
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            for n in SIZES {
                let got = read_n(&mut s, n);
                assert_eq!(got, pattern(seed("up", n), n), "{n} bytes up");
                s.write_all(&pattern(seed("down", n), n))
                    .expect("write down");
            }
            s.flush().expect("flush");
            // The client's close ends the stream.
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).expect("the end of the stream");
            assert!(rest.is_empty(), "nothing after the last size");
        });
        let mut c = RdmaStream::connect_with(addr, &opts()).expect("connect");
        for n in SIZES {
            c.write_all(&pattern(seed("up", n), n)).expect("write up");
            let got = read_n(&mut c, n);
            assert_eq!(got, pattern(seed("down", n), n), "{n} bytes down");
        }
        drop(c);
        server.join().expect("server");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn many_small_writes_coalesce_in_order() {
    // Many more messages than credits and buffers: back-pressure, credit
    // updates and the ring's wrap are all crossed.
    let total = 3 << 20;
    let data = pattern(seed("small", total), total);
    let (listener, addr) = listener();
    thread::scope(|t| {
        let expected = data.clone();
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            let mut got = Vec::with_capacity(total);
            s.read_to_end(&mut got).expect("read to the end");
            assert_eq!(got.len(), expected.len());
            assert!(got == expected, "the bytes of 3 MiB of small writes");
        });
        let mut c = RdmaStream::connect_with(addr, &opts()).expect("connect");
        for piece in data.chunks(37) {
            c.write_all(piece).expect("write");
        }
        c.blocking_shutdown(Shutdown::Write).expect("shutdown");
        server.join().expect("server");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn shutdown_write_ends_the_peers_reading_and_not_its_writing() {
    let (listener, addr) = listener();
    thread::scope(|t| {
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("read to the end");
            assert_eq!(got, b"question");
            assert_eq!(s.read(&mut [0u8; 8]).expect("read after the end"), 0);
            // Its own direction still works after the client's shutdown.
            s.write_all(b"answer").expect("answer");
            s.blocking_shutdown(Shutdown::Write).expect("shutdown");
        });
        let mut c = RdmaStream::connect_with(addr, &opts()).expect("connect");
        c.write_all(b"question").expect("ask");
        c.blocking_shutdown(Shutdown::Write).expect("shutdown");
        let err = c.write(b"more").expect_err("writing after shutdown");
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "{err}");
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("read the answer to the end");
        assert_eq!(got, b"answer");
        server.join().expect("server");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_read_with_nothing_coming_times_out_and_the_stream_stays_usable() {
    let (listener, addr) = listener();
    thread::scope(|t| {
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            s.set_timeout(Duration::from_millis(300));
            let start = Instant::now();
            let err = s.read_some(&mut [0u8; 16]).expect_err("nothing was sent");
            assert!(matches!(err, Error::StreamTimeout { .. }), "{err}");
            // Only a hang fails this (100x the timeout): a loaded machine
            // may take several times the timeout to notice it.
            assert!(start.elapsed() < Duration::from_secs(30), "bounded");
            s.set_timeout(TIMEOUT);
            read_n(&mut s, 5)
        });
        let mut c = RdmaStream::connect_with(addr, &opts()).expect("connect");
        thread::sleep(Duration::from_millis(800));
        c.write_all(b"later").expect("write");
        assert_eq!(server.join().expect("server"), b"later");
    });
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_blocked_read_sleeps_instead_of_spinning() {
    let (listener, addr) = listener();
    let (timed_out, told) = std::sync::mpsc::channel();
    thread::scope(|t| {
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            s.set_timeout(Duration::from_secs(2));
            let (cpu, wall) = (thread_cpu(), Instant::now());
            let err = s.read_some(&mut [0u8; 16]).expect_err("nothing was sent");
            assert!(matches!(err, Error::StreamTimeout { .. }), "{err}");
            let (cpu, wall) = (thread_cpu() - cpu, wall.elapsed());
            // A wait that spins or yields uses its whole wall time (a
            // yield is a system call); one asleep on completion events
            // wakes a few times a second. Half is far from either.
            assert!(
                cpu < wall / 2,
                "a blocked read used {cpu:?} of CPU in {wall:?}"
            );
            // Woken by the message, it reads it.
            s.set_timeout(TIMEOUT);
            timed_out.send(()).expect("tell the client");
            read_n(&mut s, 5)
        });
        let mut c = RdmaStream::connect_with(addr, &opts()).expect("connect");
        told.recv_timeout(TIMEOUT * 3)
            .expect("the server's read timed out");
        thread::sleep(Duration::from_millis(300));
        c.write_all(b"awake").expect("write");
        assert_eq!(server.join().expect("server"), b"awake");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_reader_that_stops_holds_the_writer_back() {
    let (listener, addr) = listener();
    thread::scope(|t| {
        let (go, wait) = std::sync::mpsc::channel::<usize>();
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            // Reads nothing until the writer was held back.
            let written = wait.recv().expect("the writer's count");
            let got = read_n(&mut s, written);
            assert_eq!(got, pattern(seed("held", 1 << 22), 1 << 22)[..written]);
        });
        let mut c = RdmaStream::connect_with(addr, &opts()).expect("connect");
        c.set_timeout(Duration::from_millis(500));
        let data = pattern(seed("held", 1 << 22), 1 << 22);
        let mut written = 0;
        let err = loop {
            match c.write_some(&data[written..]) {
                Ok(n) => written += n,
                Err(e) => break e,
            }
            assert!(
                written < data.len(),
                "4 MiB went into a peer that reads nothing"
            );
        };
        assert!(matches!(err, Error::StreamTimeout { .. }), "{err}");
        // What a peer that reads nothing takes: its receive ring.
        assert!(
            written <= 512 << 10,
            "{written} bytes written into a stopped reader"
        );
        assert!(
            written >= 256 << 10,
            "only {written} bytes before the writer stopped"
        );
        go.send(written).expect("tell the reader");
        server.join().expect("server");
    });
}

/// A raw channel that plays an rsocket peer by hand: its connection data
/// names a target list and a receive buffer of its own.
struct RawPeer {
    channel: Channel,
    /// The stream's receive buffer (from its accept), and its target list.
    ring: RemoteMemoryRegion,
    sgl: RemoteMemoryRegion,
    memory: RemoteAccessBuffer,
}

fn sge_at(b: &[u8]) -> RemoteMemoryRegion {
    let addr = u64::from_be_bytes(b[..8].try_into().unwrap());
    let key = u32::from_be_bytes(b[8..12].try_into().unwrap());
    let len = u32::from_be_bytes(b[12..16].try_into().unwrap());
    RemoteMemoryRegion::new(addr, u64::from(len), key)
}

impl RawPeer {
    fn connect(addr: SocketAddr, credits: u16) -> RawPeer {
        Self::connect_naming(addr, credits, 64)
    }

    /// As [`connect`](Self::connect), its first receive buffer (2048
    /// bytes) at `first` bytes from the start of its 4 KiB of memory:
    /// beyond it, the buffer names memory the peer never registered.
    fn connect_naming(addr: SocketAddr, credits: u16, first: u64) -> RawPeer {
        let connector = Connector::resolve(addr, &opts()).expect("resolve");
        let memory = RemoteAccessBuffer::new(connector.pd(), 4096).expect("memory");
        let r = memory.remote();
        // rs_conn_data, written from the protocol document: version 1,
        // flags, credits, 4 reserved bytes, then (address, key, length)
        // of the target list (in entries) and of the first buffer.
        let mut data = Vec::with_capacity(40);
        data.extend_from_slice(&[1, 0]);
        data.extend_from_slice(&credits.to_be_bytes());
        data.extend_from_slice(&[0; 4]);
        for (addr, len) in [(r.address(), 2u32), (r.address() + first, 2048)] {
            data.extend_from_slice(&addr.to_be_bytes());
            data.extend_from_slice(&r.rkey().to_be_bytes());
            data.extend_from_slice(&len.to_be_bytes());
        }
        let channel = connector.connect(&data).expect("connect");
        let theirs = channel.peer_private_data().expect("accept data").to_vec();
        assert_eq!(theirs[0], 1, "the stream answers with version 1");
        RawPeer {
            ring: sge_at(&theirs[24..40]),
            sgl: sge_at(&theirs[8..24]),
            channel,
            memory,
        }
    }

    /// An RDMA write of `data` at `remote` with the immediate `imm`.
    fn write(&mut self, data: &[u8], remote: RemoteMemoryRegion, imm: u32) {
        let wr = |g| WriteWorkRequest::new(g, remote).with_immediate(imm);
        if data.is_empty() {
            self.channel.write(wr(&[])).expect("raw write");
            return;
        }
        let pd = self.channel.pd().clone();
        let buf = RegisteredBuffer::register(&pd, data.to_vec()).expect("register");
        self.channel
            .write(wr(&[buf.gather(..)]))
            .expect("raw write");
    }
}

/// Runs `client` against an accepted stream; the server's first read's
/// outcome, after reading `expect` bytes.
fn against_raw(expect: &[u8], client: impl FnOnce(RawPeer) + Send) -> Error {
    let (listener, addr) = listener();
    thread::scope(|t| {
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            let got = read_n(&mut s, expect.len());
            assert_eq!(got, expect);
            s.read_some(&mut [0u8; 64]).expect_err("the peer broke off")
        });
        client(RawPeer::connect(addr, 4));
        server.join().expect("server")
    })
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_peer_that_vanishes_is_an_error_after_its_data() {
    let start = Instant::now();
    let err = against_raw(b"hello", |mut peer| {
        let ring = peer.ring;
        peer.write(b"hello", ring, 5);
        // Gone without a disconnect message: a reset, not an end.
        drop(peer);
    });
    assert_eq!(err.kind(), ErrorKind::PeerDisconnected, "{err}");
    assert!(start.elapsed() < TIMEOUT, "found without the timeout");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn forged_credits_are_refused() {
    let err = against_raw(b"", |mut peer| {
        // A credit update up to 1000 from a peer that announced 4
        // receives... this stream's: the limit is the peer's own.
        let sgl = peer.sgl;
        peer.write(&[], sgl, (4 << 29) | 1000);
        thread::sleep(Duration::from_millis(500));
    });
    assert!(matches!(err, Error::Protocol(_)), "{err}");
    assert!(err.to_string().contains("credit"), "{err}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn more_bytes_than_published_are_refused() {
    let err = against_raw(b"ok", |mut peer| {
        let ring = peer.ring;
        peer.write(b"ok", ring, 2);
        // A data message claiming 64 MiB: far more than was published.
        peer.write(&[], ring, 64 << 20);
        thread::sleep(Duration::from_millis(500));
    });
    assert!(matches!(err, Error::Protocol(_)), "{err}");
    assert!(err.to_string().contains("67108864 bytes"), "{err}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn garbage_private_data_is_refused_with_a_clear_error() {
    let (listener, addr) = listener();
    thread::scope(|t| {
        let server = t.spawn(move || listener.accept().expect_err("not rsocket"));
        let client = Channel::connect_to_with(addr, b"GET / HTTP/1.1\r\n", &opts());
        assert!(client.is_err(), "the request is rejected");
        let err = server.join().expect("server");
        assert!(matches!(err, Error::Protocol(_)), "{err}");
        assert!(err.to_string().contains("version 71"), "{err}");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_client_refuses_an_accept_that_is_not_rsocket() {
    let listener =
        rdma_safe::Listener::bind_with(format!("{}:0", device_ip()), &opts()).expect("listen");
    let addr = listener.local_addr().expect("bound");
    thread::scope(|t| {
        let server = t.spawn(move || listener.accept().expect("a plain accept"));
        let err = RdmaStream::connect_with(addr, &opts()).expect_err("no connection data");
        assert!(matches!(err, Error::Protocol(_)), "{err}");
        drop(server.join().expect("server"));
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_peer_publishing_memory_it_does_not_own_only_fails_the_writes_into_it() {
    let (listener, addr) = listener();
    let (ready, posted) = std::sync::mpsc::channel();
    let (done, finished) = std::sync::mpsc::channel();
    thread::scope(|t| {
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            posted.recv_timeout(TIMEOUT).expect("the peer's receive");
            // The peer's first buffer starts 1 MiB past its 4 KiB: the
            // write into it must fail on the NIC (the key does not cover
            // it), and the stream with it, within its timeout.
            let start = Instant::now();
            let outcome = s.write_some(b"into memory that is not the peer's");
            let err = match outcome {
                Ok(_) => s
                    .flush_all()
                    .expect_err("a write outside the peer's memory"),
                Err(e) => e,
            };
            assert!(start.elapsed() < TIMEOUT * 3, "found without a hang");
            // The peer's NIC refused the write (a remote access error): that
            // is the cause named, not the flush of a receive after it.
            assert_eq!(
                err.status(),
                Some(rdma_safe::work::WcStatus::RemoteAccessError),
                "the NIC's refusal: {err}"
            );
            // The stream stays failed, with the same cause.
            let again = s.write_some(b"more").expect_err("the stream failed");
            done.send(()).expect("tell the peer");
            (err, again)
        });
        let mut peer = RawPeer::connect_naming(addr, 4, 1 << 20);
        // The stream's write carries an immediate: it needs a receive
        // here before the NIC looks at where it goes.
        // Several: the stream's first credit update (its ring's second
        // half published) takes one too.
        let pd = peer.channel.pd().clone();
        let mut rx: Vec<RegisteredBuffer> = (0..8)
            .map(|_| RegisteredBuffer::new(&pd, 64).expect("a receive buffer"))
            .collect();
        let _ = peer.channel.scope(|s| {
            for b in rx.iter_mut() {
                let mut sc = [b.scatter(..)];
                let _receive = s.post_receive(rdma_safe::ReceiveWorkRequest::new(&mut sc))?;
            }
            ready.send(()).expect("tell the server");
            finished
                .recv_timeout(TIMEOUT * 3)
                .expect("the server's write failed");
            // The receive ends with the queue pair's error (or the
            // scope's drain bound).
            Ok::<_, Error>(())
        });
        // Nothing landed in what the peer did register, past its target
        // list (its first 32 bytes: two entries the stream may write its
        // own buffers into).
        let mut seen = vec![0u8; 4096];
        peer.memory.read(0, &mut seen).expect("read");
        assert!(
            seen[32..].iter().all(|&b| b == 0),
            "the peer's memory was written past its target list"
        );
        let (err, again) = server.join().expect("server");
        eprintln!("the write failed with: {err}; then: {again}");
    });
}
