//! `rcopy` against rdma-core's `rcopy` (rdmacm-utils), both directions,
//! and against itself: files of 0 bytes, 1 byte, a size that is a multiple
//! of no buffer size and about 4 MiB of pseudo-random bytes, each copy
//! compared byte for byte with its source. Every destination is first
//! filled with other bytes, so that a copy that did nothing fails. Then
//! the failures a user meets (a missing source, a destination the server
//! cannot create, one that fills up mid-transfer, nobody listening, a port
//! already taken), each named in the error, and clients that break the
//! protocol, stop or leave mid-transfer: our server must answer or drop
//! each, go on serving, and still be running at the end.
//!
//! rdma-core's client refuses an empty source itself (it maps the file
//! into memory, and a mapping of 0 bytes fails), so the 0-byte file is
//! copied only by our client.
//!
//! `#[ignore]`d like every device test: `cargo xtask test-rxe` runs them
//! on rxe (address `RXE_IPV4`, default 10.0.2.15). Without a device or
//! without the C `rcopy` they are skipped with a message, and fail where
//! the environment promises both (`RDMA_TEST_REQUIRE_DEVICE=1`). Every
//! process is killed after [`TIMEOUT`].

mod common;

use common::{spawn, Finished, Proc, TIMEOUT};
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::{RdmaStream, StreamListener};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

const OURS: &str = env!("CARGO_BIN_EXE_rcopy");
const THEIRS: &str = "rcopy";

/// The sizes copied: empty, one byte, a prime (no buffer's multiple), and
/// 4 MiB and a few bytes.
const SIZES: [usize; 4] = [0, 1, 100_003, (4 << 20) + 7];

fn ip() -> String {
    std::env::var("RXE_IPV4")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "10.0.2.15".into())
}

/// Whether the test can run: an RDMA device, and (`c_tool`) rdma-core's
/// `rcopy` on the `PATH`; a visible skip if not, a failure where the
/// environment promises them.
fn can_run(test: &str, c_tool: bool) -> bool {
    let device = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    let tool = !c_tool
        || std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(THEIRS).is_file()));
    let missing = match (device, tool) {
        (true, true) => return true,
        (false, _) => "no RDMA device (/sys/class/infiniband is empty)",
        (true, false) => "rdma-core's `rcopy` (rdmacm-utils) is not on the PATH",
    };
    let msg = format!("{test}: {missing}");
    if std::env::var("RDMA_TEST_REQUIRE_DEVICE").as_deref() == Ok("1") {
        panic!("{msg}");
    }
    eprintln!("SKIPPED {msg}");
    false
}

/// A directory of its own for one test, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("rcopy-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` pseudo-random bytes (xorshift64 from `seed`).
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A port the RDMA CM has free now.
fn free_port() -> u16 {
    let l = StreamListener::bind(format!("{}:0", ip())).expect("listen on a free port");
    l.local_addr().expect("bound").port()
}

/// A server, killed when the test ends (also by a panic: it serves until
/// killed).
struct Server(Option<Proc>);

impl Server {
    fn start(program: &str, port: u16, extra: &[&str]) -> Server {
        let mut args = vec!["-p".to_string(), port.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Server(Some(spawn("server", program, &args)))
    }

    fn proc(&self) -> &Proc {
        self.0.as_ref().expect("running")
    }

    /// Ends a server that must still be running, and returns its output.
    fn end(mut self) -> String {
        let mut s = self.0.take().expect("running");
        let alive = s.child.try_wait().expect("wait for the server").is_none();
        let f = s.finish(Instant::now());
        assert!(
            alive,
            "{} ended before the test was over ({:?}):\n{}",
            f.label, f.status, f.output
        );
        f.output
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(p) = &mut self.0 {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// Runs `program` as a client copying `src` to `dst` at the server on
/// `port`. A first copy (`first`) is tried again while the server is not
/// listening yet.
fn client(program: &str, src: &Path, dst: &Path, port: u16, first: bool) -> Finished {
    let args = vec![
        src.display().to_string(),
        format!("{}:{}", ip(), dst.display()),
        "-p".into(),
        port.to_string(),
    ];
    let start = Instant::now();
    loop {
        let ran = spawn("client", program, &args).finish(Instant::now() + TIMEOUT);
        let refused = ran.status.is_some_and(|s| !s.success())
            && ["refused", "REJECTED", "rejected", "nobody listens"]
                .iter()
                .any(|n| ran.output.contains(n));
        if !(first && refused) || start.elapsed() > Duration::from_secs(30) {
            return ran;
        }
        thread::sleep(Duration::from_millis(300));
    }
}

/// Copies a file of each size in `sizes` with `client_program` to the
/// server on `port`, checking every copy against its source.
fn copy_sizes(client_program: &str, server: &Server, port: u16, dir: &Scratch, sizes: &[usize]) {
    for (i, &size) in sizes.iter().enumerate() {
        let src = dir.path(&format!("src-{size}"));
        let dst = dir.path(&format!("dst-{size}"));
        let data = random_bytes(size, 0x9e37_79b9 + size as u64);
        std::fs::write(&src, &data).expect("write the source");
        // Other bytes where the copy goes: a copy that did nothing fails.
        std::fs::write(&dst, b"stale bytes from before the copy").expect("write the old dst");
        let ran = client(client_program, &src, &dst, port, i == 0);
        assert!(
            ran.status.is_some_and(|s| s.success()),
            "copying {size} bytes: {} {:?}\n{}\n--- server so far:\n{}",
            ran.label,
            ran.status,
            ran.output,
            server.proc().output_so_far()
        );
        ran.assert_has(&format!("{size} bytes in"));
        let got = std::fs::read(&dst).expect("read the copy");
        assert!(
            got == data,
            "the copy of {size} bytes differs ({} bytes, first difference at {:?})",
            got.len(),
            got.iter().zip(&data).position(|(a, b)| a != b)
        );
        eprintln!("{client_program} -> server: {size} bytes copied and compared");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rcopy_client_to_their_server() {
    if !can_run("our_rcopy_client_to_their_server", true) {
        return;
    }
    let dir = Scratch::new("ours-to-theirs");
    let port = free_port();
    let s = Server::start(THEIRS, port, &[]);
    copy_sizes(OURS, &s, port, &dir, &SIZES);
    // A destination the C server cannot create: its errno, named.
    let src = dir.path("src-1");
    let ran = client(OURS, &src, Path::new("/proc/no/such/dir"), port, false);
    assert!(!ran.status.is_some_and(|s| s.success()), "{}", ran.output);
    ran.assert_has("the server cannot open `/proc/no/such/dir`: No such file or directory");
    let out = s.end();
    eprintln!("their server:\n{out}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn their_rcopy_client_to_our_server() {
    if !can_run("their_rcopy_client_to_our_server", true) {
        return;
    }
    let dir = Scratch::new("theirs-to-ours");
    let port = free_port();
    let s = Server::start(OURS, port, &[]);
    copy_sizes(THEIRS, &s, port, &dir, &SIZES[1..]);
    // The C client's failed open ends with the errno our server sent.
    let src = dir.path("src-1");
    let ran = client(THEIRS, &src, Path::new("/proc/no/such/dir"), port, false);
    assert_eq!(ran.status.and_then(|s| s.code()), Some(2), "{}", ran.output);
    let out = s.end();
    for size in &SIZES[1..] {
        let line = format!(
            "opening: {}, transferring...{size} bytes...closing...done",
            dir.path(&format!("dst-{size}")).display()
        );
        assert!(out.contains(&line), "`{line}` missing:\n{out}");
    }
    assert!(
        out.contains("cannot open destination `/proc/no/such/dir`"),
        "{out}"
    );
    eprintln!("our server:\n{out}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rcopy_with_ours() {
    if !can_run("our_rcopy_with_ours", false) {
        return;
    }
    let dir = Scratch::new("ours-with-ours");
    let port = free_port();
    let s = Server::start(OURS, port, &[]);
    copy_sizes(OURS, &s, port, &dir, &SIZES);
    // A second server on the port the first listens on: refused, named.
    let args = ["-p".to_string(), port.to_string()];
    let second = spawn("second server", OURS, &args).finish(Instant::now() + TIMEOUT);
    assert!(
        !second.status.is_some_and(|s| s.success()),
        "{}",
        second.output
    );
    second.assert_has(&format!("cannot listen on port {port}"));
    let src = dir.path("src-1");
    let ran = client(OURS, &src, Path::new("/proc/no/such/dir"), port, false);
    assert!(!ran.status.is_some_and(|s| s.success()), "{}", ran.output);
    ran.assert_has("the server cannot open `/proc/no/such/dir`: No such file or directory");
    // A destination that fills up mid-transfer: the server answers with
    // its errno and ends the connection while the client still sends; the
    // client names the server's cause, and the device is left in place.
    let big = dir.path(&format!("src-{}", SIZES[3]));
    let ran = client(OURS, &big, Path::new("/dev/full"), port, false);
    assert!(!ran.status.is_some_and(|s| s.success()), "{}", ran.output);
    ran.assert_has("the server failed to write `/dev/full`: No space left on device");
    assert!(Path::new("/dev/full").exists());
    let out = s.end();
    assert!(out.contains("writing `/dev/full` after 0 bytes"), "{out}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rcopy_client_names_the_cause() {
    if !can_run("our_rcopy_client_names_the_cause", false) {
        return;
    }
    let dir = Scratch::new("causes");
    let missing = dir.path("no-such-source");
    let ran = client(OURS, &missing, &dir.path("dst"), 7427, false);
    assert!(!ran.status.is_some_and(|s| s.success()), "{}", ran.output);
    ran.assert_has(&format!(
        "cannot open source `{}`: No such file or directory",
        missing.display()
    ));
    assert!(!dir.path("dst").exists());
    // Nobody listens on a port the CM has just found free.
    let src = dir.path("src");
    std::fs::write(&src, b"x").unwrap();
    let port = free_port();
    let ran = client(OURS, &src, &dir.path("dst"), port, false);
    assert!(!ran.status.is_some_and(|s| s.success()), "{}", ran.output);
    ran.assert_has(&format!("cannot connect to {} port {port}", ip()));
}

/// A raw client of our server, speaking rcopy's messages by hand.
fn raw(port: u16) -> RdmaStream {
    let addr = format!("{}:{port}", ip());
    let opts = CmOptions::default().timeout(Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match RdmaStream::connect_with(addr.as_str(), &opts) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("our server not listening yet: {e}");
                thread::sleep(Duration::from_millis(300));
            }
            Err(e) => panic!("connecting to our server: {e}"),
        }
    }
}

/// A header in the C program's layout (host byte order).
fn header(version: u8, command: u8, len: u16, data: u32) -> Vec<u8> {
    let mut h = vec![version, command];
    h.extend_from_slice(&len.to_ne_bytes());
    h.extend_from_slice(&data.to_ne_bytes());
    h.extend_from_slice(&7u64.to_ne_bytes());
    h
}

/// Reads the server's response: (command, status), checking its length
/// and echoed id.
fn answer(s: &mut RdmaStream) -> (u8, u32) {
    let mut b = [0u8; 16];
    s.read_exact(&mut b).expect("the server's answer");
    assert_eq!((b[0], u16::from_ne_bytes([b[2], b[3]])), (0, 16));
    assert_eq!(u64::from_ne_bytes(b[8..].try_into().unwrap()), 7, "id");
    (b[1], u32::from_ne_bytes(b[4..8].try_into().unwrap()))
}

/// The end of the stream: the server dropped the client.
fn dropped(s: &mut RdmaStream, what: &str) {
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "{what}: bytes after the end: {rest:?}"),
        // A disconnect without rsocket's message is also an end.
        Err(e) => eprintln!("{what}: the stream ended with {e}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rcopy_server_survives_bad_clients() {
    if !can_run("our_rcopy_server_survives_bad_clients", false) {
        return;
    }
    let dir = Scratch::new("bad-clients");
    let port = free_port();
    let s = Server::start(OURS, port, &["--timeout", "5"]);

    // A header of another version: dropped without an answer, as the C
    // server drops it.
    let mut c = raw(port);
    c.write_all(&header(7, 1, 16, 0)).unwrap();
    dropped(&mut c, "a header of version 7");
    drop(c);

    // An unknown command, and a write before an open: EINVAL, then the end.
    let mut c = raw(port);
    c.write_all(&header(0, 9, 16, 0)).unwrap();
    assert_eq!(answer(&mut c), (0x89, 22));
    dropped(&mut c, "an unknown command");
    drop(c);
    let mut c = raw(port);
    c.write_all(&header(0, 3, 24, 0)).unwrap();
    c.write_all(&100u64.to_ne_bytes()).unwrap();
    assert_eq!(answer(&mut c), (0x83, 22));
    dropped(&mut c, "a write before an open");
    drop(c);

    // An open whose path has no NUL: EINVAL.
    let mut c = raw(port);
    c.write_all(&header(0, 1, 24, 0o644)).unwrap();
    c.write_all(b"abcdefgh").unwrap();
    assert_eq!(answer(&mut c), (0x81, 22));
    dropped(&mut c, "a path without its NUL");
    drop(c);

    // A transfer cut short: the partial destination is removed.
    let partial = dir.path("partial");
    let mut c = raw(port);
    let path = partial.display().to_string();
    let padded = (path.len() + 8) & !7;
    let mut open = header(0, 1, (16 + padded) as u16, 0o644);
    open.extend_from_slice(path.as_bytes());
    open.resize(16 + padded, 0);
    c.write_all(&open).unwrap();
    assert_eq!(answer(&mut c), (0x81, 0));
    c.write_all(&header(0, 3, 24, 0)).unwrap();
    c.write_all(&(1u64 << 20).to_ne_bytes()).unwrap();
    c.write_all(&[5u8; 1000]).unwrap();
    c.flush().unwrap();
    drop(c);

    // A client that says nothing: the server drops it after its 5 s
    // timeout, and a copy that comes meanwhile is served after it.
    let silent = raw(port);
    copy_sizes(OURS, &s, port, &dir, &[100_003]);
    drop(silent);
    assert!(!partial.exists(), "the partial destination was left");
    copy_sizes(OURS, &s, port, &dir, &[1]);

    let out = s.end();
    for cause in [
        "version 7",
        "unknown command 9",
        "a write before an open",
        "not NUL-terminated",
        "after 1000 of 1048576 bytes",
        "removed the partial",
        "receiving a message header",
    ] {
        assert!(out.contains(cause), "`{cause}` missing:\n{out}");
    }
    eprintln!("our server:\n{out}");
}
