//! `async_echo` on a real device: one server process, one client process
//! running many connections at once, every echoed byte checked by the
//! client (which exits 0 only then); over TCP endpoint exchange and over
//! the RDMA connection manager (`--cm`).

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Longest the client may run (generous: rxe runs under emulation in CI).
const TIMEOUT: Duration = Duration::from_secs(180);

fn env_or(vars: &[&str], default: &str) -> String {
    vars.iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| default.into())
}

/// Waits for `child` up to `limit`; kills it after that (`None`).
/// Starts `async_echo server` with `common` and `extra` flags and returns
/// once it listens (or after [`TIMEOUT`]), with the reader of its stderr.
/// Its buffers are the messages' size: registering the default 1 GiB pool
/// takes many seconds on a loaded emulated machine, and the clients'
/// connect retries are bounded.
fn start_server(
    exe: &str,
    common: &[&str],
    extra: &[&str],
) -> (Child, std::thread::JoinHandle<String>) {
    let mut server = Command::new(exe)
        .arg("server")
        .args(common)
        .args(["-s", "1000"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let log = wait_for_line(
        server.stderr.take().expect("server stderr"),
        "async_echo: serving on",
        TIMEOUT,
    );
    (server, log)
}

/// Reads `pipe` until a line containing `needle` (or `limit`, or its end),
/// then keeps collecting it in the background; the handle gives the text.
fn wait_for_line(
    pipe: std::process::ChildStderr,
    needle: &str,
    limit: Duration,
) -> std::thread::JoinHandle<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = needle.to_owned();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            if line.contains(&needle) {
                let _ = tx.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let _ = rx.recv_timeout(limit);
    reader
}

fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn many_clients_get_every_byte_back() {
    let exe = env!("CARGO_BIN_EXE_async_echo");
    let dev = env_or(&["RDMA_TEST_DEVICE", "RXE_DEVICE"], "rxe0");
    let gid = env_or(&["RXE_GID_INDEX"], "1");
    let port = "18531";
    let common = ["-d", dev.as_str(), "-x", gid.as_str(), "-p", port];
    let (mut server, server_log) = start_server(exe, &common, &[]);
    let client = Command::new(exe)
        .arg("client")
        .args(common)
        .args([
            "--clients",
            "16",
            "--messages",
            "200",
            "-s",
            "1000",
            "127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let mut client = client;
    let status = wait_bounded(&mut client, TIMEOUT);
    let output = client.wait_with_output().expect("client output");
    let _ = server.kill();
    let _ = server.wait();
    let server_text = server_log.join().unwrap_or_default();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "client {status:?}:\n{text}\nserver:\n{server_text}"
    );
    assert!(text.contains("3200 echoed and checked"), "{text}");
    assert!(text.contains("msgs/s"), "{text}");
    println!("{text}");
}

/// One misbehaving client costs the server that connection only: garbage
/// instead of an endpoint, a connection closed at once, and one that stays
/// silent, then good clients, every message of theirs echoed and checked.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_bad_client_costs_the_server_only_its_own_connection() {
    use std::io::Write;
    use std::net::TcpStream;
    let exe = env!("CARGO_BIN_EXE_async_echo");
    let dev = env_or(&["RDMA_TEST_DEVICE", "RXE_DEVICE"], "rxe0");
    let gid = env_or(&["RXE_GID_INDEX"], "1");
    let port = "18533";
    let common = ["-d", dev.as_str(), "-x", gid.as_str(), "-p", port];
    let (mut server, server_log) = start_server(exe, &common, &["--timeout", "5"]);
    let addr = format!("127.0.0.1:{port}");
    // Garbage where the endpoint should be.
    let mut garbage = TcpStream::connect(&addr).expect("connect");
    garbage.write_all(&[0xAB; 200]).expect("write garbage");
    // Closed at once.
    drop(TcpStream::connect(&addr).expect("connect"));
    // Silent, and kept open while the good clients run.
    let silent = TcpStream::connect(&addr).expect("connect");
    let mut client = Command::new(exe)
        .arg("client")
        .args(common)
        .args([
            "--clients",
            "4",
            "--messages",
            "50",
            "-s",
            "1000",
            "127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let status = wait_bounded(&mut client, TIMEOUT);
    let output = client.wait_with_output().expect("client output");
    let alive = server.try_wait().expect("server status").is_none();
    drop((garbage, silent));
    let _ = server.kill();
    let _ = server.wait();
    let server_text = server_log.join().unwrap_or_default();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(alive, "the server died:\n{server_text}");
    assert!(
        status.is_some_and(|s| s.success()) && text.contains("200 echoed and checked"),
        "client {status:?}:\n{text}\nserver:\n{server_text}"
    );
    assert!(
        server_text.contains("connection ended"),
        "the bad clients' connections ended with a message:\n{server_text}"
    );
    println!("{text}\nserver:\n{server_text}");
}

/// The CM server: 64 clients connected through the RDMA CM into the
/// server's one domain and pool, every byte checked; a client killed
/// mid-run costs the server that connection only, and a client after it
/// is served as well.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn cm_clients_share_one_pool_and_a_killed_one_costs_only_itself() {
    let exe = env!("CARGO_BIN_EXE_async_echo");
    let dev = env_or(&["RDMA_TEST_DEVICE", "RXE_DEVICE"], "rxe0");
    let ip = env_or(&["RXE_IPV4"], "10.0.2.15");
    let port = "18535";
    let common = ["-d", dev.as_str(), "-p", port, "--cm"];
    let (mut server, server_log) = start_server(exe, &common, &["--timeout", "20"]);
    let run = |clients: &str, messages: &str| {
        Command::new(exe)
            .arg("client")
            .args(common)
            .args(["--clients", clients, "--messages", messages, "-s", "1000"])
            .arg(&ip)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a client")
    };
    // A long run, killed once its connection carries messages.
    let mut doomed = run("1", "5000000");
    let mut many = run("64", "20");
    std::thread::sleep(Duration::from_secs(3));
    let _ = doomed.kill();
    let _ = doomed.wait();
    let status = wait_bounded(&mut many, TIMEOUT);
    let output = many.wait_with_output().expect("client output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut after = run("2", "50");
    let after_status = wait_bounded(&mut after, TIMEOUT);
    let after_out = after.wait_with_output().expect("client output");
    let after_text = String::from_utf8_lossy(&after_out.stdout).into_owned();
    let alive = server.try_wait().expect("server status").is_none();
    let _ = server.kill();
    let _ = server.wait();
    let server_text = server_log.join().unwrap_or_default();
    assert!(alive, "the server died:\n{server_text}");
    assert!(
        status.is_some_and(|s| s.success()) && text.contains("1280 echoed and checked"),
        "64 CM clients {status:?}:\n{text}\nserver:\n{server_text}"
    );
    assert!(
        after_status.is_some_and(|s| s.success()) && after_text.contains("100 echoed and checked"),
        "a client after the kill {after_status:?}:\n{after_text}\nserver:\n{server_text}"
    );
    assert!(
        server_text.contains("serving on RDMA CM port"),
        "the server said how it listens:\n{server_text}"
    );
    println!("{text}{after_text}\nserver:\n{server_text}");
}

/// A CM client that connects and says nothing holds receive buffers of
/// the server's shared pool: the server closes it after its --timeout
/// (here 3 s), and the client sees the disconnect.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_silent_cm_client_is_closed_after_the_server_timeout() {
    let exe = env!("CARGO_BIN_EXE_async_echo");
    let dev = env_or(&["RDMA_TEST_DEVICE", "RXE_DEVICE"], "rxe0");
    let ip = env_or(&["RXE_IPV4"], "10.0.2.15");
    let port = "18537";
    let common = ["-d", dev.as_str(), "-p", port, "--cm"];
    let (mut server, server_log) = start_server(exe, &common, &["--timeout", "3"]);
    let silent = rdma_safe::Channel::connect_to_with(
        format!("{ip}:{port}").as_str(),
        &[],
        &rdma_safe::cm::CmOptions::default().timeout(Duration::from_secs(20)),
    )
    .expect("connect through the CM");
    let start = Instant::now();
    while !silent.peer_disconnected() && start.elapsed() < TIMEOUT {
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = start.elapsed();
    let closed = silent.peer_disconnected();
    drop(silent);
    // The server says why it closed right after the disconnect: let it.
    std::thread::sleep(Duration::from_secs(1));
    let alive = server.try_wait().expect("server status").is_none();
    let _ = server.kill();
    let _ = server.wait();
    let server_text = server_log.join().unwrap_or_default();
    assert!(alive, "the server died:\n{server_text}");
    assert!(closed, "the silent client was never closed:\n{server_text}");
    assert!(server_text.contains("idle for 3s"), "{server_text}");
    println!("the silent client was closed after {took:?}\nserver:\n{server_text}");
}
