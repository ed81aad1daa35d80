//! The message size both sides agree on before any echo: the client says
//! how large its messages are, the server how large a message it takes
//! (its `-s`), and a client whose messages are larger is refused, with an
//! error on both sides that says so — not a receive failing later on a
//! message its buffer cannot hold.
//!
//! Over TCP each side writes its number (8 bytes, big-endian) before the
//! endpoint exchange and reads the other's. Through the CM the client's
//! size is its connect request's private data and the server's limit its
//! accept's; a refused client is accepted and at once disconnected, so that
//! it learns the limit.

use rdma_examples::{fail, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `n` as it goes on the wire.
pub(super) fn encode(n: usize) -> [u8; 8] {
    (n as u64).to_be_bytes()
}

/// The number a peer sent, if `data` holds one.
pub(super) fn decode(data: &[u8]) -> Option<usize> {
    let bytes: [u8; 8] = data.get(..8)?.try_into().ok()?;
    usize::try_from(u64::from_be_bytes(bytes)).ok()
}

/// Writes `ours` to `stream` and reads the peer's number (bounded by
/// `timeout`).
fn exchange(stream: &mut TcpStream, ours: usize, timeout: Duration) -> Result<usize> {
    stream.write_all(&encode(ours))?;
    stream.set_read_timeout(Some(timeout))?;
    let mut theirs = [0u8; 8];
    stream.read_exact(&mut theirs)?;
    stream.set_read_timeout(None)?;
    decode(&theirs).ok_or_else(|| fail("the peer sent no message size"))
}

/// The server's side over TCP: refuses a client whose messages exceed
/// `limit`.
pub(super) fn server_tcp(stream: &mut TcpStream, limit: usize, timeout: Duration) -> Result<()> {
    let asked = exchange(stream, limit, timeout)?;
    server_check(asked, limit)
}

/// The client's side over TCP: fails when the server takes messages
/// smaller than `size`.
pub(super) fn client_tcp(stream: &mut TcpStream, size: usize, timeout: Duration) -> Result<()> {
    let limit = exchange(stream, size, timeout)?;
    client_check(size, Some(limit))
}

/// The server's refusal of a client asking for messages of `asked` bytes.
pub(super) fn server_check(asked: usize, limit: usize) -> Result<()> {
    if asked > limit {
        return Err(fail(format!(
            "refused: the client's messages of {asked} bytes exceed this server's limit of \
             {limit} bytes (its -s)"
        )));
    }
    Ok(())
}

/// The client's check of the server's `limit` (none: a server that did
/// not say, which is not refused here).
pub(super) fn client_check(size: usize, limit: Option<usize>) -> Result<()> {
    match limit {
        Some(limit) if size > limit => Err(fail(format!(
            "the server takes messages of at most {limit} bytes; -s {size} is larger (start \
             the server with -s {size} or more)"
        ))),
        _ => Ok(()),
    }
}
