//! Unmodified TCP programs against our byte stream, through librdmacm's
//! `librspreload.so` (which runs their sockets over rsockets): `curl`
//! fetching from the `http_stream` example, and `nc` sending to a
//! `StreamListener`. Data checked byte for byte.
//!
//! A missing `curl`, `nc` or `librspreload.so` fails the test under
//! `cargo xtask test-rxe` (`RDMA_TEST_REQUIRE_DEVICE=1`) and is a visible
//! skip elsewhere.

mod common;

use common::device_ip;
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::StreamListener;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

#[allow(unreachable_pub, dead_code)]
#[path = "../examples/http_stream.rs"]
mod http_stream;

const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

/// `name` on the `PATH` (or the preload library), or a visible skip (a
/// failure where the test environment promises the tools).
fn tool(test: &str, name: &str) -> Option<PathBuf> {
    let found = if name.starts_with('/') {
        Some(PathBuf::from(name)).filter(|p| p.is_file())
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
    };
    if found.is_none() {
        let msg = format!("{test}: `{name}` is not installed");
        if std::env::var("RDMA_TEST_REQUIRE_DEVICE").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED {msg}");
    }
    found
}

/// Runs `program args` with the preload library, bounded by `timeout`
/// (its own `--max-time`/`-w`; `timeout(1)` as the backstop).
fn preloaded(preload: &Path, program: &Path, args: &[String], stdin: &[u8]) -> Output {
    let mut child = Command::new("timeout")
        .arg("60")
        .arg(program)
        .args(args)
        .env("LD_PRELOAD", preload)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the preloaded program");
    {
        use std::io::Write;
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("the program's input");
    }
    child.wait_with_output().expect("the program's output")
}

fn listener() -> StreamListener {
    let opts = CmOptions::default().timeout(Duration::from_secs(20));
    StreamListener::bind_with(format!("{}:0", device_ip()), &opts).expect("listen")
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn curl_fetches_from_the_http_example_through_rspreload() {
    let test = "curl_fetches_from_the_http_example_through_rspreload";
    let (Some(preload), Some(curl)) = (tool(test, PRELOAD), tool(test, "curl")) else {
        return;
    };
    let listener = listener();
    let port = listener.local_addr().expect("bound").port();
    let server = std::thread::spawn(move || http_stream::serve(&listener, Some(2)));
    let url = |path: &str| format!("http://{}:{port}{path}", device_ip());
    let get = |path: &str| {
        let args = ["-sS", "--max-time", "30", "-D", "-", &url(path)].map(String::from);
        let out = preloaded(&preload, &curl, &args, b"");
        assert!(
            out.status.success(),
            "curl {path}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let small = get("/hello");
    let text = String::from_utf8_lossy(&small);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\nhello over RDMA: /hello\n"),
        "{text}"
    );
    // 3 MiB: many of the stream's messages, several turns of its ring.
    let n = 3 << 20;
    let big = get(&format!("/bytes/{n}"));
    let body_at = big
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let body = &big[body_at..];
    assert_eq!(body.len(), n, "the body's length");
    assert!(
        body.iter().enumerate().all(|(i, &b)| b == i as u8),
        "the body's bytes"
    );
    server
        .join()
        .expect("the server thread")
        .expect("the server");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn nc_sends_to_a_stream_listener_through_rspreload() {
    let test = "nc_sends_to_a_stream_listener_through_rspreload";
    let (Some(preload), Some(nc)) = (tool(test, PRELOAD), tool(test, "nc")) else {
        return;
    };
    let listener = listener();
    let port = listener.local_addr().expect("bound").port();
    let server = std::thread::spawn(move || -> rdma_safe::Result<Vec<u8>> {
        let mut stream = listener.accept()?;
        let mut got = Vec::new();
        stream.read_to_end(&mut got).map_err(rdma_safe::Error::Io)?;
        Ok(got)
    });
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
    // `-N`: shut the socket down at the end of the input, so the server
    // reads an end.
    let args = ["-N", "-w", "20", &device_ip(), &port.to_string()].map(String::from);
    let out = preloaded(&preload, &nc, &args, &data);
    assert!(
        out.status.success(),
        "nc: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let got = server
        .join()
        .expect("the server thread")
        .expect("the server");
    assert_eq!(got.len(), data.len(), "bytes received");
    assert!(got == data, "the bytes nc sent");
}
