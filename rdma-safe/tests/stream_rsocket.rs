//! Our byte stream against librdmacm's own rsocket peer, `rstream`
//! (rdmacm-utils), both ways: `rstream -T v` verifies every byte we send,
//! and we verify every byte it sends. rstream's custom test (`-S size -C
//! count`): the client sends 16 bytes and the server answers 16, then the
//! client sends `count` transfers of `size` bytes and the server answers
//! as many; each direction's bytes count up from 0 modulo 256.
//!
//! A missing `rstream` fails the test under `cargo xtask test-rxe`
//! (`RDMA_TEST_REQUIRE_DEVICE=1`) and is a visible skip elsewhere.

mod common;

use common::device_ip;
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::{RdmaStream, StreamListener};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(20);
/// (transfer size, transfer count) of each run: 16 bytes to 8 MiB each way.
const RUNS: [(usize, usize); 4] = [(1, 16), (64, 100), (4096, 100), (1 << 20, 8)];

fn opts() -> CmOptions {
    CmOptions::default().timeout(TIMEOUT)
}

/// `rstream` on the `PATH`, or a visible skip (a failure where the test
/// environment promises the C peers).
fn rstream(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("rstream"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let msg = format!("{test}: `rstream` (rdmacm-utils) is not on the PATH");
        if std::env::var("RDMA_TEST_REQUIRE_DEVICE").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED {msg}");
    }
    found
}

/// rstream's bytes: the `n` bytes from `offset` of a count modulo 256.
fn counting(offset: usize, n: usize) -> Vec<u8> {
    (offset..offset + n).map(|i| i as u8).collect()
}

/// A port the RDMA CM has free now.
fn free_port() -> u16 {
    let l = StreamListener::bind(format!("{}:0", device_ip())).expect("listen");
    l.local_addr().expect("bound").port()
}

fn spawn(rstream: &PathBuf, args: &[String]) -> Child {
    Command::new(rstream)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rstream")
}

/// Waits (bounded) for `child` to exit; its exit status must be success.
fn finish(mut child: Child, what: &str) -> String {
    let deadline = Instant::now() + TIMEOUT * 3;
    while child.try_wait().expect("wait for rstream").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("rstream's output");
            panic!(
                "{what}: rstream did not exit within {:?}\n{}{}",
                TIMEOUT * 3,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("rstream's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what}: rstream failed ({}):\n{text}",
        out.status
    );
    assert!(!text.contains("verification failed"), "{what}:\n{text}");
    text
}

fn read_checked(s: &mut RdmaStream, offset: usize, n: usize, what: &str) {
    let mut got = vec![0u8; n];
    s.read_exact(&mut got)
        .unwrap_or_else(|e| panic!("{what}: reading {n} bytes from rstream: {e}"));
    assert!(
        got == counting(offset, n),
        "{what}: rstream's {n} bytes at {offset}"
    );
}

/// Our side of rstream's custom test, as its client (`client`) or server.
fn converse(s: &mut RdmaStream, size: usize, count: usize, client: bool, what: &str) {
    let total = size * count;
    if client {
        s.write_all(&counting(0, 16)).expect("sync");
        read_checked(s, 0, 16, what);
        for t in 0..count {
            s.write_all(&counting(16 + t * size, size)).expect("send");
        }
        read_checked(s, 16, total, what);
    } else {
        read_checked(s, 0, 16, what);
        s.write_all(&counting(0, 16)).expect("sync");
        read_checked(s, 16, total, what);
        s.write_all(&counting(16, total)).expect("send");
        s.flush().expect("flush");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_client_against_the_rstream_server() {
    let Some(rstream) = rstream("our_client_against_the_rstream_server") else {
        return;
    };
    for (size, count) in RUNS {
        let what = format!("rstream -T v -S {size} -C {count} (server)");
        let port = free_port();
        let args = ["-T", "v", "-S", &size.to_string(), "-C", &count.to_string()];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["-b".into(), device_ip(), "-p".into(), port.to_string()]);
        let server = spawn(&rstream, &args);
        let addr: SocketAddr = format!("{}:{port}", device_ip()).parse().expect("addr");
        // rstream listens once it has started: try until it does.
        let deadline = Instant::now() + TIMEOUT;
        let mut stream = loop {
            match RdmaStream::connect_with(addr, &opts()) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    log_retry(&e);
                    thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("{what}: connecting: {e}"),
            }
        };
        converse(&mut stream, size, count, true, &what);
        drop(stream);
        let out = finish(server, &what);
        eprintln!(
            "{what}: verified 16 + {} bytes each way\n{out}",
            size * count
        );
    }
}

fn log_retry(e: &rdma_safe::Error) {
    eprintln!("rstream not listening yet: {e}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn the_rstream_client_against_our_server() {
    let Some(rstream) = rstream("the_rstream_client_against_our_server") else {
        return;
    };
    for (size, count) in RUNS {
        let what = format!("rstream -T v -S {size} -C {count} (client)");
        let listener =
            StreamListener::bind_with(format!("{}:0", device_ip()), &opts()).expect("listen");
        let port = listener.local_addr().expect("bound").port();
        let args = ["-T", "v", "-S", &size.to_string(), "-C", &count.to_string()];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["-s".into(), device_ip(), "-p".into(), port.to_string()]);
        let client = spawn(&rstream, &args);
        let mut stream = listener.accept().expect("accept rstream");
        converse(&mut stream, size, count, false, &what);
        // rstream closes with rsocket's disconnect message: the end of the
        // stream, not an error.
        let mut rest = Vec::new();
        stream
            .read_to_end(&mut rest)
            .unwrap_or_else(|e| panic!("{what}: the end of the stream: {e}"));
        assert!(rest.is_empty(), "{what}: bytes after the test");
        let out = finish(client, &what);
        eprintln!(
            "{what}: verified 16 + {} bytes each way\n{out}",
            size * count
        );
    }
}

/// The async form, in a module of its own: tokio's `AsyncReadExt` and
/// std's `Read` name the same methods.
mod on_tokio {
    use super::{counting, device_ip, finish, free_port, log_retry, opts, rstream, spawn};
    use super::{RdmaStream, StreamListener, TIMEOUT};
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The async stream against rstream, both ways, one size: the same
    /// conversation through tokio's `AsyncRead`/`AsyncWrite`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
    async fn the_async_stream_against_rstream_both_ways() {
        let Some(rstream) = rstream("the_async_stream_against_rstream_both_ways") else {
            return;
        };
        let (size, count) = (65536, 32);
        let total = size * count;
        let args = |role: &str, port: u16| -> Vec<String> {
            let mut a: Vec<String> = ["-T", "v", "-S", &size.to_string(), "-C", &count.to_string()]
                .iter()
                .map(|s| s.to_string())
                .collect();
            a.extend([role.into(), device_ip(), "-p".into(), port.to_string()]);
            a
        };
        async fn read_checked(s: &mut RdmaStream, offset: usize, n: usize) {
            let mut got = vec![0u8; n];
            s.read_exact(&mut got).await.expect("read from rstream");
            assert!(
                got == counting(offset, n),
                "rstream's {n} bytes at {offset}"
            );
        }

        // rstream serves, we connect.
        let port = free_port();
        let server = spawn(&rstream, &args("-b", port));
        let addr: SocketAddr = format!("{}:{port}", device_ip()).parse().expect("addr");
        let deadline = Instant::now() + TIMEOUT;
        let mut c = loop {
            match RdmaStream::connect_async(addr, &opts()).await {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    log_retry(&e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("connecting to rstream: {e}"),
            }
        };
        c.write_all(&counting(0, 16)).await.expect("sync");
        read_checked(&mut c, 0, 16).await;
        c.write_all(&counting(16, total)).await.expect("send");
        read_checked(&mut c, 16, total).await;
        drop(c);
        let what = format!("async client, rstream -T v -S {size} -C {count} (server)");
        finish(server, &what);
        eprintln!("{what}: verified 16 + {total} bytes each way");

        // rstream connects, we serve.
        let listener =
            StreamListener::bind_with(format!("{}:0", device_ip()), &opts()).expect("listen");
        let port = listener.local_addr().expect("bound").port();
        let client = spawn(&rstream, &args("-s", port));
        let mut s = listener.accept_async().await.expect("accept rstream");
        read_checked(&mut s, 0, 16).await;
        s.write_all(&counting(0, 16)).await.expect("sync");
        read_checked(&mut s, 16, total).await;
        s.write_all(&counting(16, total)).await.expect("send");
        s.flush().await.expect("flush");
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)
            .await
            .expect("the end of the stream");
        assert!(rest.is_empty());
        let what = format!("async server, rstream -T v -S {size} -C {count} (client)");
        finish(client, &what);
        eprintln!("{what}: verified 16 + {total} bytes each way");
    }
}
