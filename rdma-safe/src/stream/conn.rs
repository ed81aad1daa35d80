//! The connection under a stream: its memory, the messages it posts and
//! the completions it takes, with the flow control of
//! [`credits`](super::credits). Nothing here waits: the blocking stream
//! (and any other form) calls [`Conn::progress`] until what it waits for
//! is there, or its bound has passed.

use super::credits::{Grant, Receiver, Sender};
use super::wire::{ConnData, Control, Message, Sge, SGE_LEN};
use super::{CHUNK, CONTROLS, DATA_BUFFERS, RECEIVES, RING_BYTES, SGL_ENTRIES};
use crate::engine::{Look, Notice, Refused, WithMemory, WorkQueue};
use crate::error::{Error, Operation, Result};
use crate::memory::remote::RemoteMemoryRegion;
use crate::memory::remote_access::RemoteAccessBuffer;
use crate::owned::{RecvStream, SharedChannel};
use crate::pool::BufferPool;
use crate::work::{Held, OwnedKind, WorkSuccess};
use crate::{Channel, ProtectionDomain};
use std::collections::VecDeque;
use std::task::{Context, Poll};
use std::time::Duration;

/// The memory of a stream, registered before the connection exists (its
/// addresses and keys travel in the connection data).
pub(crate) struct Parts {
    /// The receive ring the peer writes data into.
    ring: RemoteAccessBuffer,
    /// The target list the peer writes this side's next buffers into.
    sgl: RemoteAccessBuffer,
    /// Buffers for the data this side writes, one message each.
    data: BufferPool,
    /// Buffers for credit updates and control messages.
    control: BufferPool,
    /// The buffers of the receives that take the peer's immediates (an
    /// RDMA write with immediate puts nothing in them).
    receive: BufferPool,
}

impl Parts {
    /// Registers a stream's memory in `pd`.
    ///
    /// # Errors
    /// The error of allocating or registering it.
    pub(crate) fn new(pd: &ProtectionDomain) -> Result<Parts> {
        Ok(Parts {
            ring: RemoteAccessBuffer::new(pd, RING_BYTES as usize)?,
            sgl: RemoteAccessBuffer::new(pd, SGE_LEN * SGL_ENTRIES as usize)?,
            data: BufferPool::new(pd, CHUNK, DATA_BUFFERS)?,
            control: BufferPool::new(pd, 64, CONTROLS + 1)?,
            receive: BufferPool::new(pd, 64, usize::from(RECEIVES))?,
        })
    }

    /// This side's connection data.
    pub(crate) fn conn_data(&self) -> ConnData {
        let (ring, sgl) = (self.ring.remote(), self.sgl.remote());
        ConnData::ours(
            RECEIVES,
            Sge {
                addr: sgl.address(),
                key: sgl.rkey(),
                len: SGL_ENTRIES,
            },
            Sge {
                addr: ring.address(),
                key: ring.rkey(),
                len: RING_BYTES / 2,
            },
        )
    }

    /// The receives for the channel of `shared`, posted now (before an
    /// accept, or right after a connect).
    ///
    /// # Errors
    /// The error of posting them.
    pub(crate) fn receives(&self, shared: &SharedChannel) -> Result<RecvStream> {
        let mut recv = shared.receive_stream(self.receive.clone(), usize::from(RECEIVES));
        recv.post_now()?;
        Ok(recv)
    }
}

/// What a posted write was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Data,
    Control,
}

/// A connected rsocket stream's state.
pub(crate) struct Conn {
    shared: SharedChannel,
    recv: RecvStream,
    parts: Parts,
    /// Writes posted and not yet seen complete, oldest first.
    in_flight: VecDeque<(u64, Sent)>,
    /// Control writes among them.
    controls: usize,
    rx: Receiver,
    tx: Sender,
    peer_sgl: Sge,
    peer_big_endian: bool,
    /// The peer may still send data (no shutdown or disconnect from it).
    pub(crate) readable: bool,
    /// This side may still send data.
    pub(crate) writable: bool,
    /// This side shut its writing down (a later write is refused as
    /// such, whatever the peer did since).
    pub(crate) shut_write: bool,
    /// Neither side has disconnected.
    pub(crate) connected: bool,
    /// A failure found while the caller had something else to return:
    /// the next [`progress`](Self::progress) reports it as it was.
    deferred: Option<Error>,
    /// The connection ended without a word from the peer.
    abrupt: bool,
    /// Why the connection failed, once it has.
    failed: Option<String>,
    pub(crate) timeout: Duration,
    /// Last: the connection, which the other handles' engine outlives.
    channel: Channel,
}

impl Conn {
    /// The state of a connection just made: `peer` is the peer's
    /// connection data, `recv` the receives posted for it on `shared` (the
    /// channel's handle, with a reactor for async use or without).
    pub(crate) fn new(
        channel: Channel,
        shared: SharedChannel,
        recv: RecvStream,
        parts: Parts,
        peer: &ConnData,
    ) -> Conn {
        let first = peer.data_buf;
        Conn {
            shared,
            recv,
            parts,
            in_flight: VecDeque::with_capacity(DATA_BUFFERS + CONTROLS + 1),
            controls: 0,
            rx: Receiver::new(RING_BYTES, RECEIVES, peer.target_sgl.len),
            tx: Sender::new(peer.credits, first, SGL_ENTRIES),
            peer_sgl: peer.target_sgl,
            peer_big_endian: peer.big_endian(),
            readable: true,
            writable: true,
            shut_write: false,
            connected: true,
            abrupt: false,
            deferred: None,
            failed: None,
            timeout: channel.timeout(),
            channel,
        }
    }

    /// The engine of the connection, for a blocking wait on it.
    pub(crate) fn queue(&self) -> std::sync::Arc<WorkQueue> {
        self.shared.queue_arc()
    }

    /// Whether its completions are reaped by a reactor's driver (its
    /// async form).
    #[cfg(feature = "tokio")]
    pub(crate) fn has_reactor(&self) -> bool {
        self.shared.has_driver()
    }

    /// The connection this stream runs over.
    pub(crate) fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Takes every completion there is, sends the credits owed; `Ok(true)`
    /// if anything happened. With a reactor, `cx`'s task is woken by the
    /// next receive or by the completion of the oldest write in flight
    /// (whatever a stream waits for comes with one of them).
    ///
    /// # Errors
    /// The connection's failure (which it keeps reporting): a failed
    /// write, a peer breaking the protocol (the connection is then shut
    /// down).
    pub(crate) fn progress(&mut self, cx: &mut Context<'_>) -> Result<bool> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        if let Some(why) = &self.failed {
            return Err(Error::Unusable(why.clone()));
        }
        let outcome = self.take_completions(cx);
        let outcome = outcome.and_then(|moved| Ok(self.grant()? || moved));
        if let Err(e) = &outcome {
            self.fail(e);
        }
        outcome
    }

    fn take_completions(&mut self, cx: &mut Context<'_>) -> Result<bool> {
        let mut moved = false;
        while self.readable || self.connected {
            match self.recv.poll_now(cx) {
                Poll::Ready(Some(Ok((wc, buf)))) => {
                    // The receive's buffer holds nothing (the message was
                    // an RDMA write with immediate): back to the pool.
                    drop(buf);
                    self.on_message(&wc)?;
                    moved = true;
                }
                Poll::Ready(Some(Err(e))) => return Err(self.cause_of(e)),
                Poll::Ready(None) => {
                    // The peer disconnected (or the channel was shut
                    // down): what arrived before stays readable.
                    self.vanished();
                    moved = true;
                }
                Poll::Pending => break,
            }
        }
        while let Some(outcome) = self.take_write(self.shared.slot_waker(cx)) {
            moved = true;
            if let Err(e) = outcome {
                if matches!(e, Error::PeerDisconnected { .. }) || !self.connected {
                    self.vanished();
                    continue;
                }
                return Err(e);
            }
        }
        Ok(moved)
    }

    /// The outcome of the oldest write in flight if it completed (its
    /// buffer back to its pool: the NIC is done with it), leaving `waker`
    /// to be woken by its completion if not.
    fn take_write(&mut self, waker: Option<&std::task::Waker>) -> Option<Result<WorkSuccess>> {
        let &(id, sent) = self.in_flight.front()?;
        let (outcome, held) = self
            .shared
            .queue()
            .take(id, WithMemory, Look::Once(waker))?;
        self.in_flight.pop_front();
        drop(held);
        if sent == Sent::Control {
            self.controls -= 1;
        }
        Some(outcome)
    }

    /// The error to report for `e`, a receive's: a flush names no cause,
    /// and a write of this side's that failed first (the peer refusing
    /// the memory it was aimed at, retries exhausted) is the cause then.
    fn cause_of(&mut self, e: Error) -> Error {
        if e.status() != Some(rdma_core::WcStatus::WrFlushError) {
            return e;
        }
        while let Some(outcome) = self.take_write(None) {
            if let Err(w) = outcome {
                if w.status() != Some(rdma_core::WcStatus::WrFlushError) {
                    return w;
                }
            }
        }
        e
    }

    /// One message from the peer.
    fn on_message(&mut self, wc: &WorkSuccess) -> Result<()> {
        let Some(imm) = wc.immediate() else {
            return Err(Error::Protocol(format!(
                "a message of {} bytes without an immediate (rsocket sends RDMA writes with one)",
                wc.bytes()
            )));
        };
        match Message::decode(imm) {
            Message::Data(n) => self.rx.on_data(n)?,
            Message::Credits(limit) => {
                self.tx.on_credits(limit)?;
                match wc.bytes() {
                    0 => {}
                    SGE_LEN => {
                        // The write that updated the entry completed
                        // before this completion: the entry is whole, and
                        // the peer writes it again only once this side has
                        // filled the buffer it names.
                        let entry = self.tx.next_entry() as usize;
                        let mut bytes = [0u8; SGE_LEN];
                        self.parts.sgl.read(entry * SGE_LEN, &mut bytes)?;
                        self.tx.on_published(Sge::from_host_bytes(&bytes))?;
                    }
                    n => {
                        return Err(Error::Protocol(format!(
                            "a credit update writing {n} bytes (an entry has {SGE_LEN})"
                        )))
                    }
                }
            }
            Message::Control(Control::Disconnect) => self.end(),
            Message::Control(Control::Shutdown) => {
                if self.writable {
                    self.readable = false;
                } else {
                    self.end();
                }
            }
            // Probes, iomap updates and what rsocket reserves: nothing to
            // do (rsocket ignores them too).
            Message::Control(_) | Message::Iomap(_) | Message::Reserved(_) => {}
        }
        Ok(())
    }

    /// The connection is over (a disconnect, from either side): nothing
    /// more arrives or may be sent.
    fn end(&mut self) {
        self.readable = false;
        self.writable = false;
        self.connected = false;
    }

    /// The connection ended without the peer's saying so (no shutdown or
    /// disconnect message first): its process or host is gone, and the
    /// end of what it sent is an error, not the end of the stream.
    fn vanished(&mut self) {
        if self.readable {
            self.abrupt = true;
        }
        self.end();
    }

    /// Keeps `e` (from a [`progress`](Self::progress) whose caller had
    /// data to return first) for the next `progress` to report.
    pub(crate) fn defer(&mut self, e: Error) {
        self.deferred.get_or_insert(e);
    }

    /// Whether the connection ended without the peer's shutdown or
    /// disconnect message.
    pub(crate) fn abrupt(&self) -> bool {
        self.abrupt
    }

    /// Records `e` as the connection's failure and shuts the channel down
    /// (its outstanding work is flushed).
    fn fail(&mut self, e: &Error) {
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
            self.end();
            if matches!(e, Error::Protocol(_)) {
                self.shared.shutdown();
            }
        }
    }

    /// Posts the credit update owed, if one is and a control message may
    /// be posted; whether one was.
    fn grant(&mut self) -> Result<bool> {
        if !self.connected || self.controls >= CONTROLS {
            return Ok(false);
        }
        let Some(grant) = self.rx.due() else {
            return Ok(false);
        };
        self.post_grant(grant)?;
        self.rx.granted(grant);
        Ok(true)
    }

    fn post_grant(&mut self, grant: Grant) -> Result<()> {
        let imm = Message::Credits(grant.limit).encode();
        let mut buf = self.parts.control.try_alloc()?;
        let remote = match grant.publish {
            Some((entry, offset, len)) => {
                let ring = self.parts.ring.remote();
                let sge = Sge {
                    addr: ring.address() + u64::from(offset),
                    key: ring.rkey(),
                    len,
                };
                buf.fill_from(&sge.to_bytes(self.peer_big_endian));
                self.peer_entry(entry)
            }
            None => {
                buf.set_len(0);
                self.peer_entry(0)
            }
        };
        self.post(Sent::Control, buf, remote, imm)
    }

    /// Entry `entry` of the peer's target list.
    fn peer_entry(&self, entry: u32) -> RemoteMemoryRegion {
        let at = self.peer_sgl.addr + u64::from(entry) * SGE_LEN as u64;
        RemoteMemoryRegion::new(at, SGE_LEN as u64, self.peer_sgl.key)
    }

    /// Whether a control message may be posted now.
    pub(crate) fn control_room(&self) -> bool {
        self.controls < CONTROLS
    }

    /// Posts the control message `c` (a zero-length write with its
    /// immediate); the caller saw [`control_room`](Self::control_room).
    ///
    /// # Errors
    /// The error of posting it.
    pub(crate) fn post_control(&mut self, c: Control) -> Result<()> {
        let mut buf = self.parts.control.try_alloc()?;
        buf.set_len(0);
        let remote = self.peer_entry(0);
        self.post(Sent::Control, buf, remote, Message::Control(c).encode())
    }

    /// Whether a data message may be posted now: a credit, a published
    /// buffer and a data buffer of this side's.
    pub(crate) fn can_send(&self) -> bool {
        self.tx.can_send() && self.parts.data.available() > 0
    }

    /// Posts as much of `data` as credits, published buffers and data
    /// buffers allow, one message per buffer of at most [`CHUNK`] bytes
    /// (small ones inline); how many bytes were posted.
    ///
    /// # Errors
    /// The error of posting.
    pub(crate) fn send_some(&mut self, data: &[u8]) -> Result<usize> {
        let mut sent = 0;
        while sent < data.len() && self.can_send() {
            let Ok(mut buf) = self.parts.data.try_alloc() else {
                break;
            };
            let want = (data.len() - sent).min(CHUNK);
            let (addr, key, n) = self.tx.take(want).expect("can_send said so");
            let n = n as usize;
            buf.fill_from(&data[sent..sent + n]);
            let remote = RemoteMemoryRegion::new(addr, n as u64, key);
            let imm = Message::Data(n as u32).encode();
            if let Err(e) = self.post(Sent::Data, buf, remote, imm) {
                self.fail(&e);
                return Err(e);
            }
            sent += n;
        }
        Ok(sent)
    }

    fn post(
        &mut self,
        sent: Sent,
        buf: crate::pool::PoolBuf,
        remote: RemoteMemoryRegion,
        imm: u32,
    ) -> Result<()> {
        let kind = OwnedKind::Write {
            remote,
            imm: Some(imm),
        };
        let queue = self.shared.queue();
        match queue.submit(kind, Held::Shared(buf.freeze()), Notice::Claim) {
            Ok((id, done)) => {
                if sent == Sent::Control {
                    self.controls += 1;
                }
                match done {
                    // Complete already: claimed, its buffer back.
                    Some((outcome, _held)) => {
                        if sent == Sent::Control {
                            self.controls -= 1;
                        }
                        outcome.map(|_| ())
                    }
                    None => {
                        self.in_flight.push_back((id, sent));
                        Ok(())
                    }
                }
            }
            Err(Refused::Error(e, _held)) => Err(e),
            Err(Refused::Full(_held)) => Err(Error::Unusable(format!(
                "the stream's send queue is full with {} writes in flight",
                self.in_flight.len()
            ))),
        }
    }

    /// Whether every data write posted has completed.
    pub(crate) fn all_sent(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Whether data waits to be read.
    pub(crate) fn has_data(&self) -> bool {
        self.rx.has_data()
    }

    /// Copies what has arrived into `out` (from the ring, with one atomic
    /// load per word: the peer may write the rest of the ring meanwhile);
    /// how many bytes.
    ///
    /// # Errors
    /// None in practice: every stretch lies within the ring.
    pub(crate) fn copy_out(&mut self, out: &mut [u8]) -> Result<usize> {
        let mut n = 0;
        while let Some((offset, len)) = self.rx.next_read(out.len() - n) {
            self.parts.ring.read(offset, &mut out[n..n + len])?;
            self.rx.consumed(len);
            n += len;
        }
        Ok(n)
    }

    /// The error an operation on a connection that has ended reports.
    pub(crate) fn ended_error(&self, operation: Operation) -> Error {
        match &self.failed {
            Some(why) => Error::Unusable(why.clone()),
            None => Error::PeerDisconnected { operation },
        }
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("readable", &self.readable)
            .field("writable", &self.writable)
            .field("connected", &self.connected)
            .field("in_flight", &self.in_flight.len())
            .field("buffered", &self.rx.readable())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}
