//! `async_echo` on a real device: one server process, one client process
//! running many connections at once, every echoed byte checked by the
//! client (which exits 0 only then).

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
    let mut server = Command::new(exe)
        .arg("server")
        .args(common)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
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
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "client {status:?}:\n{text}"
    );
    assert!(text.contains("3200 echoed and checked"), "{text}");
    assert!(text.contains("msgs/s"), "{text}");
    println!("{text}");
}
