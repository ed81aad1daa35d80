//! The server: accepts one client at a time, as rdma-core's does, and
//! carries out its open, write and close requests.
//!
//! A client that breaks the protocol, stops for longer than the timeout
//! or leaves mid-transfer ends only its own connection: the cause is
//! printed with its address and the server waits for the next one. A
//! request the server cannot carry out (a destination it cannot create, a
//! write before an open, a second open) is answered with an errno, as the
//! C server answers it, and then the connection is ended, as the C server
//! ends it. A write that fails part-way removes the partial destination
//! if it is a regular file (never a device or a pipe a client named).

use crate::msg::{self, Header, CMD_CLOSE, CMD_NOOP, CMD_OPEN, CMD_WRITE, HEADER_LEN};
use rdma_examples::{fail, Result};
use rdma_safe::cm::CmOptions;
use rdma_safe::error::ErrorKind;
use rdma_safe::stream::{RdmaStream, StreamListener};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

/// Bytes received from the stream and written to the file at a time.
const CHUNK: usize = 1 << 20;
/// Accept failures in a row (other than no client coming) after which the
/// listener is taken to be broken.
const ACCEPT_FAILURES: u32 = 16;

/// Serves clients on every address at `port` until killed; each wait of
/// each client bounded by `timeout`.
pub(crate) fn run(port: u16, timeout: Duration) -> Result<()> {
    let opts = CmOptions::default().timeout(timeout);
    let listener = StreamListener::bind_with(("0.0.0.0", port), &opts)
        .map_err(|e| fail(format!("cannot listen on port {port}: {e}")))?;
    let mut failures = 0;
    loop {
        progress("waiting for connection...");
        let mut stream = loop {
            match listener.accept() {
                Ok(s) => break s,
                // Nobody came within the timeout: wait on.
                Err(e) if e.kind() == ErrorKind::TimedOut => continue,
                Err(e) => {
                    failures += 1;
                    eprintln!("\nrcopy: a connection could not be accepted: {e}");
                    if failures >= ACCEPT_FAILURES {
                        return Err(fail(format!(
                            "{failures} connections in a row could not be accepted; the last: {e}"
                        )));
                    }
                    progress("waiting for connection...");
                }
            }
        };
        failures = 0;
        let client = stream
            .peer_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string());
        println!("client: {client}");
        let mut session = Session::default();
        if let Err(e) = session.serve(&mut stream) {
            println!();
            eprintln!("rcopy: client {client}: {e}");
        }
        session.abandon();
        // Dropping the stream tells the client the connection is over.
        drop(stream);
    }
}

/// Prints `text` without ending the line, as the C server does.
fn progress(text: &str) {
    print!("{text}");
    let _ = io::stdout().flush();
}

/// One client's state: the destination it opened.
#[derive(Default)]
struct Session {
    file: Option<(File, PathBuf)>,
    /// The destination is a regular file (not a device, a pipe, ...).
    regular: bool,
    /// A write to the open file failed part-way or was cut short.
    partial: bool,
}

impl Session {
    /// Carries out the client's requests until it ends its stream.
    fn serve(&mut self, s: &mut RdmaStream) -> Result<()> {
        loop {
            let Some(h) = read_header(s)? else {
                return Ok(());
            };
            match h.command {
                CMD_OPEN => self.open(s, &h)?,
                CMD_WRITE => self.write(s, &h)?,
                CMD_CLOSE => {
                    progress("closing...");
                    respond(s, &h, 0)?;
                    self.file = None;
                    println!("done");
                }
                CMD_NOOP if usize::from(h.len) == HEADER_LEN => respond(s, &h, 0)?,
                other => {
                    respond(s, &h, msg::EINVAL)?;
                    return Err(fail(format!(
                        "unknown command {other} ({} bytes): refused",
                        h.len
                    )));
                }
            }
        }
    }

    /// Opens the destination an open message names, with its mode.
    fn open(&mut self, s: &mut RdmaStream, h: &Header) -> Result<()> {
        progress("opening: ");
        let mut body = vec![0u8; usize::from(h.len) - HEADER_LEN];
        s.read_exact(&mut body)
            .map_err(|e| fail(format!("receiving the open message's path: {e}")))?;
        let path = match msg::open_path(&body) {
            Ok(p) => PathBuf::from(OsStr::from_bytes(p)),
            Err(e) => return refuse(s, h, msg::EINVAL, e),
        };
        progress(&format!("{}, ", path.display()));
        if self.file.is_some() {
            return refuse(s, h, msg::EBUSY, "an open while a file is open".into());
        }
        // The client's permission bits (not set-id or sticky bits), less
        // the umask, as open(2) applies them.
        let created = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(h.data & 0o777)
            .open(&path);
        match created {
            Ok(f) => {
                self.regular = f.metadata().is_ok_and(|m| m.is_file());
                self.file = Some((f, path));
                respond(s, h, 0)
            }
            Err(e) => refuse(
                s,
                h,
                msg::status_of(&e),
                format!("cannot open destination `{}`: {e}", path.display()),
            ),
        }
    }

    /// Receives a write's size and then that many bytes into the file.
    fn write(&mut self, s: &mut RdmaStream, h: &Header) -> Result<()> {
        progress("transferring");
        if h.len != msg::WRITE_LEN {
            let why = format!(
                "a write message of {} bytes (not {})",
                h.len,
                msg::WRITE_LEN
            );
            return refuse(s, h, msg::EINVAL, why);
        }
        if self.file.is_none() {
            return refuse(s, h, msg::EINVAL, "a write before an open".into());
        }
        let mut size = [0u8; 8];
        s.read_exact(&mut size)
            .map_err(|e| fail(format!("receiving the write's size: {e}")))?;
        let size = u64::from_ne_bytes(size);
        progress(&format!("...{size} bytes..."));
        self.partial = true;
        let (file, path) = self.file.as_mut().expect("opened above");
        // A write is the whole file, as the C server's is (a second write
        // replaces the first).
        if self.regular {
            if let Err(e) = file.rewind().and_then(|()| file.set_len(0)) {
                let why = format!("emptying `{}`: {e}", path.display());
                return refuse(s, h, msg::status_of(&e), why);
            }
        }
        let mut buf = vec![0u8; CHUNK];
        let mut done = 0u64;
        while done < size {
            let want = usize::try_from(size - done).map_or(CHUNK, |left| left.min(CHUNK));
            let n = s.read_some(&mut buf[..want]).map_err(|e| {
                fail(format!(
                    "receiving `{}` after {done} of {size} bytes: {e}",
                    path.display()
                ))
            })?;
            if n == 0 {
                return Err(fail(format!(
                    "the client ended its stream after {done} of {size} bytes of `{}`",
                    path.display()
                )));
            }
            if let Err(e) = file.write_all(&buf[..n]) {
                let why = format!("writing `{}` after {done} bytes: {e}", path.display());
                return refuse(s, h, msg::status_of(&e), why);
            }
            done += n as u64;
        }
        if let Err(e) = file.flush() {
            let why = format!("writing `{}`: {e}", path.display());
            return refuse(s, h, msg::status_of(&e), why);
        }
        self.partial = false;
        respond(s, h, 0)
    }

    /// Closes what is open; a regular file a failed write left partial is
    /// removed, so that no truncated copy passes for the file.
    fn abandon(&mut self) {
        if let Some((file, path)) = self.file.take() {
            drop(file);
            if self.partial && self.regular {
                match std::fs::remove_file(&path) {
                    Ok(()) => eprintln!("rcopy: removed the partial `{}`", path.display()),
                    Err(e) => eprintln!(
                        "rcopy: the partial `{}` could not be removed: {e}",
                        path.display()
                    ),
                }
            }
        }
    }
}

/// The next header; `None` when the client ended its stream between
/// messages.
fn read_header(s: &mut RdmaStream) -> Result<Option<Header>> {
    let mut b = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        let n = s
            .read_some(&mut b[got..])
            .map_err(|e| fail(format!("receiving a message header: {e}")))?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(fail(format!(
                "the client ended its stream inside a message header ({got} of {HEADER_LEN} bytes)"
            )));
        }
        got += n;
    }
    Header::decode(&b).map(Some).map_err(fail)
}

fn respond(s: &mut RdmaStream, request: &Header, status: u32) -> Result<()> {
    s.write_all(&request.response(status).encode())
        .and_then(|()| s.flush())
        .map_err(|e| fail(format!("sending a response: {e}")))
}

/// Answers `request` with `status` and ends the connection with `why`.
fn refuse(s: &mut RdmaStream, request: &Header, status: u32, why: String) -> Result<()> {
    respond(s, request, status)?;
    Err(fail(format!("{why} (answered with status {status})")))
}
