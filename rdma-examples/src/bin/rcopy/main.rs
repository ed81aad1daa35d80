//! `rcopy` — copies a file to a server over an rsocket byte stream;
//! wire-compatible with rdma-core's `rcopy` (rdmacm-utils): either side
//! may be the C program.
//!
//! ```text
//! rcopy [-p port]                                  server
//! rcopy source server[:destination] [-p port]      client
//! ```
//!
//! As the C program: the server listens on every IPv4 address at `-p`
//! (default 7427) and serves one client at a time until killed, printing what each
//! asks (`opening: path, transferring...N bytes...closing...done`); the
//! client copies `source` to `destination` on `server` (by default the
//! same path as `source`, which the server resolves in its own working
//! directory), and prints the rate. The server writes wherever a client
//! asks, with the source's permission bits: run it only where that is
//! wanted, as the C one.
//!
//! The connection is [`rdma_safe::stream`]'s rsocket stream, and the
//! messages are rcopy's (see `msg.rs`): open (path and mode), write (size,
//! then the bytes), close, each answered with a status (0 or an errno).
//! The C client maps the source into memory and the C server maps the
//! destination; this one reads and writes them through buffers, and uses
//! no rsocket feature beyond the byte stream (the C program uses none
//! either: no iomap).
//!
//! Differences from the C program: `--timeout` (ours; default 30 s) bounds
//! every wait, so a peer that stops is an error instead of a hang; a
//! failure exits with status 1 and a message naming its cause (the C
//! program exits with the errno); an empty source is copied by open and
//! close without a write (the C server refuses a write of 0 bytes, and the
//! C client refuses an empty source); `server` may be a bracketed IPv6
//! address (`[fe80::1]:dst`); a write that fails part-way at this server
//! removes the partial destination.

mod msg;
mod server;

use clap::Parser;
use msg::{Header, CMD_CLOSE, CMD_OPEN, CMD_WRITE, HEADER_LEN};
use rdma_examples::limit::Limit;
use rdma_examples::{cli, fail, Result};
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::RdmaStream;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Bytes read from the source and written to the stream at a time.
const CHUNK: usize = 1 << 20;
/// How long a client whose transfer broke waits for the server's reason.
const REASON_WAIT: Duration = Duration::from_secs(2);

/// Copy a file over an rsocket byte stream, wire-compatible with
/// rdma-core's rcopy; the options are the C program's.
#[derive(Debug, Parser)]
#[command(
    name = "rcopy",
    override_usage = "rcopy [-p port]                              (server)\n       \
                      rcopy source server[:destination] [-p port]  (client)"
)]
struct Options {
    /// file to copy (client; without it, run as the server)
    #[arg(value_name = "source", requires = "target")]
    source: Option<OsString>,
    /// server name or address, and the destination path (default: source)
    #[arg(value_name = "server[:destination]")]
    target: Option<OsString>,
    #[arg(help = "port (default 7427)", short = 'p', long = "port", value_name = "port",
          hide_default_value = true, default_value = "7427",
          value_parser = cli::number::<u16>(Limit::new("-p/--port", 1, 65535)))]
    port: u16,
    #[arg(help = "bound on every wait (connecting, each read, each write), in seconds (default 30)",
          long = "timeout", value_name = "seconds", hide_default_value = true, default_value = "30",
          value_parser = cli::timeout)]
    timeout: Duration,
}

fn main() -> ExitCode {
    let o = Options::parse();
    let outcome = match (&o.source, &o.target) {
        (Some(source), Some(target)) => client(source, target, o.port, o.timeout),
        _ => server::run(o.port, o.timeout),
    };
    cli::finish("rcopy", outcome)
}

/// `server[:destination]` split: the host and the destination (`source`
/// when none is given). A host in brackets may contain colons.
fn split_target(target: &OsStr, source: &OsStr) -> Result<(String, OsString)> {
    let b = target.as_bytes();
    let (host, rest) = match b.strip_prefix(b"[") {
        Some(inner) => {
            let end = inner
                .iter()
                .position(|&c| c == b']')
                .ok_or_else(|| fail("`[` without `]` in server[:destination]"))?;
            (&inner[..end], &inner[end + 1..])
        }
        None => match b.iter().position(|&c| c == b':') {
            Some(i) => (&b[..i], &b[i..]),
            None => (b, &b[b.len()..]),
        },
    };
    let host = std::str::from_utf8(host)
        .map_err(|_| fail("the server's name is not UTF-8"))?
        .to_string();
    if host.is_empty() {
        return Err(fail("no server before the destination"));
    }
    let dst = match rest {
        [] => source.to_os_string(),
        [b':'] => return Err(fail(format!("no destination after `{host}:`"))),
        [b':', path @ ..] => OsStr::from_bytes(path).to_os_string(),
        _ => return Err(fail("expected `:destination` after `]`")),
    };
    Ok((host, dst))
}

/// Copies `source` to the server `target` names.
fn client(source: &OsStr, target: &OsStr, port: u16, timeout: Duration) -> Result<()> {
    let (host, dst) = split_target(target, source)?;
    let shown = dst.to_string_lossy().into_owned();
    let src = source.to_string_lossy();
    let mut file =
        File::open(source).map_err(|e| fail(format!("cannot open source `{src}`: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot stat source `{src}`: {e}")))?;
    if !meta.is_file() {
        return Err(fail(format!("source `{src}` is not a regular file")));
    }
    let size = meta.len();
    let open = msg::open_message(dst.as_bytes(), meta.mode()).map_err(fail)?;
    let addr = resolve(&host, port)?;

    progress("opening...");
    let opts = CmOptions::default().timeout(timeout);
    let mut s = RdmaStream::connect_with(addr, &opts)
        .map_err(|e| fail(format!("cannot connect to {host} port {port}: {e}")))?;
    send(&mut s, &open, "the open message")?;
    let status = response(&mut s, CMD_OPEN)?;
    if status != 0 {
        return Err(fail(format!(
            "the server cannot open `{shown}`: {}",
            msg::describe(status)
        )));
    }

    progress("transferring...");
    let start = Instant::now();
    if size > 0 {
        let mut m = Header::request(CMD_WRITE, msg::WRITE_LEN, 0)
            .encode()
            .to_vec();
        m.extend_from_slice(&size.to_ne_bytes());
        send(&mut s, &m, "the write message")?;
        if let Err(e) = copy(&mut file, &mut s, size, &src) {
            // The server may have said why before it ended the stream.
            return Err(match reason(&mut s) {
                Some(why) => fail(format!("the server failed to write `{shown}`: {why} ({e})")),
                None => e,
            });
        }
        let status = response(&mut s, CMD_WRITE)?;
        if status != 0 {
            return Err(fail(format!(
                "the server failed to write `{shown}`: {}",
                msg::describe(status)
            )));
        }
    }
    let elapsed = start.elapsed();

    progress("closing...");
    send(
        &mut s,
        &Header::request(CMD_CLOSE, 16, 0).encode(),
        "the close message",
    )?;
    let status = response(&mut s, CMD_CLOSE)?;
    if status != 0 {
        return Err(fail(format!(
            "the server failed to close `{shown}`: {}",
            msg::describe(status)
        )));
    }
    println!("done");
    // Dropping the stream sends rsocket's disconnect, as rclose does.
    drop(s);
    let usec = elapsed.as_secs_f64() * 1e6;
    println!(
        "{size} bytes in {:.2} seconds = {:.2} Gb/sec",
        usec / 1e6,
        if usec > 0.0 {
            (size as f64 * 8.0) / (1000.0 * usec)
        } else {
            0.0
        }
    );
    Ok(())
}

/// The first address `host` resolves to at `port`.
fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve `{host}`: {e}")))?
        .next()
        .ok_or_else(|| fail(format!("`{host}` resolves to no address")))
}

/// Sends `size` bytes of `file` (which must still hold them).
fn copy(file: &mut File, s: &mut RdmaStream, size: u64, src: &str) -> Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0u64;
    while done < size {
        let want = usize::try_from(size - done).map_or(CHUNK, |left| left.min(CHUNK));
        let n = file
            .read(&mut buf[..want])
            .map_err(|e| fail(format!("reading source `{src}`: {e}")))?;
        if n == 0 {
            return Err(fail(format!(
                "source `{src}` shrank while it was copied ({done} of {size} bytes)"
            )));
        }
        s.write_all(&buf[..n])
            .map_err(|e| fail(format!("sending after {done} of {size} bytes: {e}")))?;
        done += n as u64;
    }
    Ok(())
}

/// The status of a write response the server sent before the stream
/// broke, if it sent one.
fn reason(s: &mut RdmaStream) -> Option<String> {
    s.set_timeout(REASON_WAIT);
    let mut b = [0u8; HEADER_LEN];
    s.read_exact(&mut b).ok()?;
    let status = Header::decode(&b).ok()?.status_for(CMD_WRITE).ok()?;
    (status != 0).then(|| msg::describe(status))
}

fn send(s: &mut RdmaStream, bytes: &[u8], what: &str) -> Result<()> {
    s.write_all(bytes)
        .map_err(|e| fail(format!("sending {what}: {e}")))
}

/// The status of the server's response to `command`.
fn response(s: &mut RdmaStream, command: u8) -> Result<u32> {
    let mut b = [0u8; HEADER_LEN];
    s.read_exact(&mut b).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => fail(format!(
            "the server ended the connection instead of answering command {command}"
        )),
        _ => fail(format!("receiving the server's answer: {e}")),
    })?;
    let h = Header::decode(&b).map_err(|e| fail(format!("the server sent {e}")))?;
    h.status_for(command)
        .map_err(|e| fail(format!("the server broke the protocol: {e}")))
}

/// Prints `text` without ending the line, as the C client does.
fn progress(text: &str) {
    print!("{text}");
    let _ = io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(t: &str) -> std::result::Result<(String, String), String> {
        split_target(OsStr::new(t), OsStr::new("src.bin"))
            .map(|(h, d)| (h, d.to_string_lossy().into_owned()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn targets_split_as_the_c_program_splits_them() {
        let ok = |h: &str, d: &str| Ok((h.to_string(), d.to_string()));
        assert_eq!(split("10.0.2.15:/tmp/x"), ok("10.0.2.15", "/tmp/x"));
        assert_eq!(split("host"), ok("host", "src.bin"));
        assert_eq!(split("host:a:b"), ok("host", "a:b"));
        assert_eq!(split("[fe80::1]:/d"), ok("fe80::1", "/d"));
        assert_eq!(split("[::1]"), ok("::1", "src.bin"));
        assert!(split("host:").unwrap_err().contains("no destination"));
        assert!(split(":/tmp/x").unwrap_err().contains("no server"));
        assert!(split("[::1").is_err());
        assert!(split("[::1]x").is_err());
    }

    #[test]
    fn the_command_line_is_the_c_programs() {
        let o = Options::try_parse_from(["rcopy", "-p", "7500"]).unwrap();
        assert_eq!((o.port, o.source.is_none()), (7500, true));
        let o = Options::try_parse_from(["rcopy", "a", "h:b", "-p", "7501"]).unwrap();
        assert_eq!(o.port, 7501);
        assert_eq!(o.target.as_deref(), Some(OsStr::new("h:b")));
        assert_eq!(Options::try_parse_from(["rcopy"]).unwrap().port, 7427);
        assert!(
            Options::try_parse_from(["rcopy", "a"]).is_err(),
            "no server"
        );
        assert!(Options::try_parse_from(["rcopy", "-p", "0"]).is_err());
    }
}
