//! The byte stream on tokio (`AsyncRead`/`AsyncWrite`), on the device:
//! data checked byte for byte both ways, shutdown and end of stream, and
//! reads and writes cancelled at every point the runtime lets a future be
//! dropped — no byte lost, none sent twice.

mod common;

use common::{device_ip, pattern, seed};
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::{RdmaStream, StreamListener};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(20);

fn opts() -> CmOptions {
    CmOptions::default().timeout(TIMEOUT)
}

fn listener() -> (StreamListener, SocketAddr) {
    let l = StreamListener::bind_with(format!("{}:0", device_ip()), &opts()).expect("listen");
    let addr = l.local_addr().expect("bound");
    (l, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
async fn sizes_arrive_whole_both_ways() {
    const SIZES: [usize; 4] = [1, 64, 4096, 1 << 20];
    let (listener, addr) = listener();
    let server = tokio::spawn(async move {
        let mut s = listener.accept_async().await.expect("accept");
        for n in SIZES {
            let mut got = vec![0u8; n];
            s.read_exact(&mut got).await.expect("read up");
            assert!(got == pattern(seed("up", n), n), "{n} bytes up");
            s.write_all(&pattern(seed("down", n), n))
                .await
                .expect("write down");
        }
        s.flush().await.expect("flush");
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.expect("the end");
        assert!(rest.is_empty());
    });
    let mut c = RdmaStream::connect_async(addr, &opts())
        .await
        .expect("connect");
    for n in SIZES {
        c.write_all(&pattern(seed("up", n), n))
            .await
            .expect("write up");
        let mut got = vec![0u8; n];
        c.read_exact(&mut got).await.expect("read down");
        assert!(got == pattern(seed("down", n), n), "{n} bytes down");
    }
    AsyncWriteExt::shutdown(&mut c).await.expect("shutdown");
    server.await.expect("server");
}

/// Runs `op` against a future that is ready on its second poll (the
/// runtime's next turn): `op` is dropped whenever it was pending then.
async fn or_cancelled<T>(op: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        out = op => Some(out),
        () = tokio::task::yield_now() => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
async fn cancelled_reads_and_writes_lose_no_byte() {
    let total = 4 << 20;
    let data = pattern(seed("cancel", total), total);
    let (listener, addr) = listener();
    let expected = data.clone();
    let server = tokio::spawn(async move {
        let mut s = listener.accept_async().await.expect("accept");
        // The writer meets a full peer first: its writes wait for room.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut got = Vec::with_capacity(total);
        let mut buf = vec![0u8; 100_000];
        let mut cancelled = 0u32;
        loop {
            match or_cancelled(s.read(&mut buf)).await {
                None => cancelled += 1,
                Some(Ok(0)) => break,
                Some(Ok(n)) => got.extend_from_slice(&buf[..n]),
                Some(Err(e)) => panic!("read: {e}"),
            }
        }
        assert_eq!(got.len(), expected.len(), "every byte, once");
        assert!(got == expected, "the bytes, in order");
        cancelled
    });
    let mut c = RdmaStream::connect_async(addr, &opts())
        .await
        .expect("connect");
    let mut sent = 0;
    let mut cancelled = 0u32;
    let mut rounds = 0u32;
    while sent < total {
        rounds += 1;
        // Pauses now and then: the reader waits, and its reads are
        // cancelled while they wait.
        if rounds % 8 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let end = (sent + 50_000).min(total);
        match or_cancelled(c.write(&data[sent..end])).await {
            None => cancelled += 1,
            Some(Ok(n)) => sent += n,
            Some(Err(e)) => panic!("write: {e}"),
        }
    }
    AsyncWriteExt::shutdown(&mut c).await.expect("shutdown");
    let read_cancels = server.await.expect("server");
    assert!(cancelled > 0, "no write was ever cancelled while waiting");
    assert!(read_cancels > 0, "no read was ever cancelled while waiting");
    eprintln!("{cancelled} writes and {read_cancels} reads cancelled, every byte arrived once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
async fn an_async_read_with_nothing_coming_times_out() {
    let (listener, addr) = listener();
    let server = tokio::spawn(async move {
        let mut s = listener.accept_async().await.expect("accept");
        s.set_timeout(Duration::from_millis(300));
        let err = s.read(&mut [0u8; 8]).await.expect_err("nothing sent");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        s.set_timeout(TIMEOUT);
        let mut got = [0u8; 5];
        s.read_exact(&mut got).await.expect("then the data");
        got
    });
    let mut c = RdmaStream::connect_async(addr, &opts())
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(900)).await;
    c.write_all(b"later").await.expect("write");
    assert_eq!(&server.await.expect("server"), b"later");
}

/// A stream dropped on a runtime without a shutdown still says goodbye
/// (rsocket's disconnect message, posted at the drop): the peer reads
/// everything written and then the end of the stream, not a reset — also
/// when the runtime ends right after the drop, before its task runs.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_stream_dropped_on_a_runtime_ends_the_peers_stream_cleanly() {
    const N: usize = 256 * 1024;
    for runtime_ends_at_once in [false, true] {
        let (listener, addr) = listener();
        let server = std::thread::spawn(move || {
            let mut s = listener.accept().expect("accept");
            let mut got = Vec::new();
            let end = std::io::Read::read_to_end(&mut s, &mut got);
            (end.map_err(|e| e.to_string()), got)
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut c = RdmaStream::connect_async(addr, &opts())
                .await
                .expect("connect");
            c.write_all(&pattern(seed("dropped", N), N))
                .await
                .expect("write");
            drop(c);
            if !runtime_ends_at_once {
                // The drop's task gets its turns.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        drop(rt);
        let (end, got) = server.join().expect("server");
        assert_eq!(end, Ok(N), "runtime ends at once: {runtime_ends_at_once}");
        assert!(got == pattern(seed("dropped", N), N), "the bytes written");
    }
}
