//! Byte streams over one RDMA connection that speak librdmacm's
//! **rsocket** protocol (rdma-core's `docs/rsocket`), so that `rstream`,
//! `rcopy` and programs run under `librspreload.so` are their peers:
//! [`StreamListener::bind`] / [`StreamListener::accept`] and
//! [`RdmaStream::connect`], with blocking [`std::io::Read`] and
//! [`std::io::Write`]; with the `tokio` feature, tokio's `AsyncRead` and
//! `AsyncWrite` too (`RdmaStream::connect_async`,
//! `StreamListener::accept_async`), cancel-safe: a dropped read or write
//! future loses no byte (see *Async and cancel safety* below).
//!
//! Every wait is bounded by the options' timeout
//! ([`CmOptions::timeout`](crate::cm::CmOptions::timeout)): a read that
//! finds nothing to read for that long, or a write that finds no room,
//! fails with [`Error::StreamTimeout`](crate::Error::StreamTimeout) and
//! leaves the stream usable; a peer that disconnects ends the stream (0
//! from a read) if it said so first (rsocket's disconnect or shutdown
//! message), and is [`Error::PeerDisconnected`](crate::Error::PeerDisconnected)
//! if it did not (its process or host died).
//!
//! ```no_run
//! use rdma_safe::stream::{RdmaStream, StreamListener};
//! use std::io::{Read, Write};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let listener = StreamListener::bind("10.0.2.15:7471")?;
//! let server = std::thread::spawn(move || -> rdma_safe::Result<Vec<u8>> {
//!     let mut stream = listener.accept()?;
//!     let mut got = Vec::new();
//!     stream.read_to_end(&mut got).map_err(rdma_safe::Error::Io)?;
//!     Ok(got)
//! });
//! let mut client = RdmaStream::connect("10.0.2.15:7471")?;
//! client.write_all(b"hello, stream")?;
//! client.blocking_shutdown(std::net::Shutdown::Write)?;
//! assert_eq!(server.join().unwrap()?, b"hello, stream");
//! # Ok(())
//! # }
//! ```
//!
//! # The protocol
//!
//! Each side registers a receive ring and a small target list, and sends
//! their addresses and keys in the CM private data (`struct
//! rs_conn_data`: version 1, its byte order, its receive credits, the
//! target list and the first half of the ring). Data goes by RDMA write
//! with a 32-bit immediate into the receive buffer the peer last
//! published, the immediate saying how many bytes (a data message);
//! the receiver gives credits back — and publishes the half of its ring
//! it has read, by writing its entry into the writer's target list — with
//! a credit update (an immediate of type 4); shutting down writing or
//! disconnecting is a control message (type 7). A writer needs a credit
//! (a receive posted at the peer) and room in a published buffer for each
//! message: that is the back-pressure, so a reader that stops reading
//! stops the writer, whose memory stays flat. What rsocket has and this
//! stream does not — iomap (direct placement), datagram rsockets,
//! keepalive probes — is ignored as rsocket ignores it: iomap updates and
//! probes from a peer are accepted and dropped, and this side offers no
//! iomap. iWARP devices, on which rsocket sends its messages as sends
//! instead of immediates, are not supported.
//!
//! # Async and cancel safety
//!
//! No future of the stream's holds bytes or memory across its polls: a
//! poll of a read copies out what has arrived and returns it, or takes
//! nothing; a poll of a write posts bytes and says how many, or posts
//! nothing. Dropping a read or write future between polls therefore loses
//! no byte and sends none twice. A poll that cannot go on registers its
//! task with the stream's completion driver (woken by the next message
//! from the peer or the completion of the oldest write in flight) and a
//! timer at the stream's timeout. Dropping a stream sends rsocket's
//! disconnect message and waits (at most 2 s) for it to be placed before
//! the connection closes: a blocking stream on the dropping thread, an
//! async one (dropped inside its runtime) on a task of the runtime, so
//! the drop never blocks a worker. The message is posted at the drop when
//! the queue has room, so it goes out even if the runtime ends next; an
//! async caller that wants to know it arrived awaits `shutdown()`
//! (tokio's `AsyncWriteExt`). The blocking form is
//! [`RdmaStream::blocking_shutdown`], named as tokio names its blocking
//! twins so that it does not hide the async one.
//!
//! # Soundness
//!
//! The memory a peer writes at any time — the receive ring and the target
//! list — is [`RemoteAccessBuffer`](crate::RemoteAccessBuffer)s: Rust
//! reads it only through atomic 8-byte copies, after the completion that
//! says the peer wrote it, never as a slice. The data this side writes
//! goes through pool buffers owned by the engine from the post until
//! their completions are seen (see [`owned`](crate::owned)); the receives
//! that take the peer's immediates are a
//! [`RecvStream`](crate::owned::RecvStream)'s, with the same rule. Every
//! registration owns its memory for as long as it lives and deregisters
//! before freeing it, so dropping the stream in any state leaves the NIC
//! nothing it could touch. A peer that reports more bytes or messages
//! than it was given room for, grants credits it has no receives for, or
//! publishes more buffers than the target list holds is refused with
//! [`Error::Protocol`](crate::Error::Protocol) and the connection shut
//! down; a peer that names memory of its own wrongly only fails the
//! writes into it.

#[cfg(feature = "tokio")]
mod asynchronous;
mod blocking;
mod conn;
mod credits;
mod listener;
mod wire;

pub use blocking::RdmaStream;
pub use listener::StreamListener;

use crate::cm::CmOptions;
use rdma_core::QpCapabilities;

/// Bytes of each side's receive ring, published to the peer half at a
/// time (the size `rstream` asks rsocket for).
const RING_BYTES: u32 = 1 << 19;
/// Receives posted: the data messages the peer may have in flight.
const RECEIVES: u16 = 256;
/// Entries of this side's target list (rsocket's `RS_SGL_SIZE`).
const SGL_ENTRIES: u32 = 2;
/// The largest data message this side writes (rsocket's largest too).
const CHUNK: usize = 64 * 1024;
/// Data messages this side may have in flight.
const DATA_BUFFERS: usize = 16;
/// Control messages (credit updates, shutdown, disconnect) this side may
/// have in flight (rsocket's `RS_QP_CTRL_SIZE`).
const CONTROLS: usize = 4;
/// Bytes a message may carry inline (rsocket's default).
const INLINE: u32 = 64;

/// `opts` with the queue capacities a stream needs, and completion
/// events (which both forms sleep on: the async one through its
/// reactor, the blocking one after a short spin).
fn options(opts: &CmOptions) -> CmOptions {
    let caps = QpCapabilities {
        max_send_wr: (DATA_BUFFERS + CONTROLS + 4) as u32,
        max_recv_wr: u32::from(RECEIVES),
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    };
    opts.capabilities(caps).completion_events(true)
}
