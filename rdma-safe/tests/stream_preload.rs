//! An unmodified TCP program against our byte stream, through librdmacm's
//! `librspreload.so` (which runs its sockets over rsockets): `curl`
//! fetching from the `http_stream` example, data checked byte for byte.
//! (`nc` from netcat-openbsd is not taken over by the preload library: it
//! connects over TCP, and is refused.)
//!
//! A missing `curl` or `librspreload.so` fails the test under
//! `cargo xtask test-rxe` (`RDMA_TEST_REQUIRE_DEVICE=1`) and is a visible
//! skip elsewhere.

mod common;

use common::device_ip;
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::StreamListener;
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
    // Fed from a thread, so that a program that exits early (its stderr
    // then says why) does not fail the feeding.
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        input.write_all(&data)
    });
    let out = child.wait_with_output().expect("the program's output");
    let fed = feeder.join().expect("the feeding thread");
    assert!(
        fed.is_ok() || !out.status.success(),
        "{program:?} exited successfully without reading its input: {fed:?}"
    );
    out
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
