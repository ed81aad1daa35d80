//! A small HTTP/1.1 server over the RDMA byte stream
//! ([`rdma_safe::stream`]): an unmodified `curl` reaches it through
//! librdmacm's `librspreload.so`, which runs a TCP program's sockets over
//! rsockets, the protocol the stream speaks.
//!
//! ```text
//! cargo run -p rdma-safe --example http_stream -- 10.0.2.15:8080
//! LD_PRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so \
//!     curl http://10.0.2.15:8080/hello
//! ```
//!
//! `GET /bytes/N` answers N bytes counting up modulo 256 (at most 64 MiB),
//! any other path a line naming it. One thread per connection; each
//! answer closes its connection (`Connection: close`). A request head
//! larger than 8 KiB, or one that is not a GET, gets a 4xx answer; a
//! client that sends garbage or vanishes costs only its own connection.
//!
//! Not hyper: a server that answers GETs needs a request line and the end
//! of the head, and hyper would bring an HTTP stack and its executor
//! glue into an example whose point is the transport.

use rdma_safe::stream::{RdmaStream, StreamListener};
use std::io::{Read, Write};
use std::net::Shutdown;

/// The longest request head read.
const MAX_HEAD: usize = 8 << 10;
/// The largest `/bytes/N` body.
const MAX_BODY: usize = 64 << 20;
/// Accepts failing one after another before the server gives up.
const MAX_FAILED_ACCEPTS: u32 = 100;

/// The answer to one request head: (status line, body).
pub fn answer(head: &[u8]) -> (&'static str, Vec<u8>) {
    let Ok(text) = std::str::from_utf8(head) else {
        return (
            "400 Bad Request",
            b"the request head is not UTF-8\n".to_vec(),
        );
    };
    let mut words = text.lines().next().unwrap_or("").split_whitespace();
    let (Some(method), Some(path), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return ("400 Bad Request", b"no request line\n".to_vec());
    };
    if !version.starts_with("HTTP/1.") {
        return ("400 Bad Request", b"not HTTP/1.x\n".to_vec());
    }
    if method != "GET" {
        return ("405 Method Not Allowed", b"only GET is served\n".to_vec());
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        return match n.parse::<usize>() {
            Ok(n) if n <= MAX_BODY => ("200 OK", (0..n).map(|i| i as u8).collect()),
            _ => (
                "400 Bad Request",
                b"/bytes/N takes N up to 64 MiB\n".to_vec(),
            ),
        };
    }
    ("200 OK", format!("hello over RDMA: {path}\n").into_bytes())
}

/// What a client sent before its answer.
enum Head {
    /// A whole request head, up to the blank line.
    Whole(Vec<u8>),
    /// More than [`MAX_HEAD`] bytes without the blank line.
    TooLarge,
    /// The client ended its stream first: nothing to answer.
    Closed,
}

/// Reads a request head from `stream`.
fn read_head(stream: &mut RdmaStream) -> std::io::Result<Head> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return Ok(Head::TooLarge);
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(Head::Closed);
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(Head::Whole(head))
}

/// Serves one connection: one request, one answer, then the stream's end.
fn serve_one(mut stream: RdmaStream) -> std::io::Result<()> {
    let (status, body) = match read_head(&mut stream)? {
        Head::Whole(head) => answer(&head),
        Head::TooLarge => ("431 Request Header Fields Too Large", Vec::new()),
        Head::Closed => return Ok(()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(&body)?;
    stream.flush()?;
    stream
        .blocking_shutdown(Shutdown::Write)
        .map_err(std::io::Error::other)?;
    // Read to the client's end, so the answer is taken before the drop
    // disconnects.
    let mut rest = [0u8; 256];
    while stream.read(&mut rest)? > 0 {}
    Ok(())
}

/// Serves HTTP on `listener`: `connections` of them (`None`: forever),
/// each on its own thread, joined before returning.
///
/// # Errors
/// The last of [`MAX_FAILED_ACCEPTS`] accepts failing one after another
/// (the device or the listener itself is gone). A client's failed
/// connect or a connection's own failure is logged and costs only that
/// connection.
pub fn serve(listener: &StreamListener, connections: Option<usize>) -> rdma_safe::Result<()> {
    let mut threads = Vec::new();
    let (mut served, mut failed_in_a_row) = (0, 0);
    while connections.is_none_or(|n| served < n) {
        let stream = match listener.accept() {
            Ok(stream) => stream,
            // A client that is not an rsocket peer, or that left during
            // the handshake, costs only its own connection; a listener
            // that fails every accept is given up on.
            Err(e) if failed_in_a_row < MAX_FAILED_ACCEPTS => {
                failed_in_a_row += 1;
                eprintln!("http_stream: a client's connect failed: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        (served, failed_in_a_row) = (served + 1, 0);
        threads.push(std::thread::spawn(move || {
            if let Err(e) = serve_one(stream) {
                eprintln!("http_stream: a connection failed: {e}");
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

#[allow(dead_code)]
fn main() -> rdma_safe::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| {
        let ip = std::env::var("RXE_IPV4").unwrap_or_else(|_| "10.0.2.15".into());
        format!("{ip}:8080")
    });
    let listener = StreamListener::bind(addr.as_str())?;
    eprintln!("http_stream: serving HTTP over RDMA at {addr}");
    serve(&listener, None)
}
