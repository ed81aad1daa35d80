//! [`DatagramEndpoint`]: unreliable datagrams (UD) — messages of up to one
//! path MTU to any peer that knows the endpoint's address and QKey.
//!
//! # How it stays safe
//!
//! The endpoint owns all the memory the NIC writes: a ring of receive slots
//! it keeps posted at all times, each `40 + MTU` bytes, registered for local
//! access and reached by Rust code only through atomic 8-byte copies (the
//! same memory as a [`RemoteAccessBuffer`]). A
//! receive copies the payload out of the slot, past the 40-byte Global
//! Routing Header the NIC writes in front of every UD message, and posts the
//! slot again. No user memory is ever lent to a receive, so nothing can be
//! forgotten or dropped early; the queue pair is destroyed before the ring
//! is freed (field order). Sends copy the payload into an owned slot, or
//! borrow [`GatherElement`]s for the length of a blocking call.
//!
//! Datagrams may be lost (a receiver without a free slot drops them) and are
//! never split: a message larger than the path MTU is refused before
//! posting.

use crate::channel::DEFAULT_TIMEOUT;
pub use crate::datagram_options::DatagramOptions;
use crate::engine::{DeviceWatch, Look, Outcome, WorkQueue, BOUNDED};
use crate::error::{Error, Operation, Result, VerbsError};
use crate::memory::element::GatherElement;
use crate::memory::remote_access::RemoteAccessBuffer;
use crate::pd::ProtectionDomain;
use crate::work::build::{DatagramSend, Limits};
use crate::work::{ReceiveWorkRequest, WorkSuccess};
use rdma_core::{
    AccessFlags, AddressHandle, AddressVector, CompQueue, Gid, Mtu, QpCapabilities, QpType,
    QueuePair,
};
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// Bytes of the Global Routing Header in front of every received datagram.
pub const GRH_SIZE: usize = 40;

/// Receive slots kept posted.
const RECEIVE_SLOTS: usize = 32;
/// Sends that may be outstanding (each blocking call waits for its own).
const SEND_DEPTH: u32 = 16;

/// What a peer needs to send datagrams to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramAddress {
    /// The endpoint's GID (RoCE addresses by GID).
    pub gid: Gid,
    /// Its LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Its queue pair number.
    pub qp_num: u32,
    /// The QKey its datagrams must carry.
    pub qkey: u32,
}

/// A destination: an address handle for a peer's [`DatagramAddress`], made
/// by [`DatagramEndpoint::peer`].
pub struct DatagramPeer {
    ah: AddressHandle,
    address: DatagramAddress,
}

impl DatagramPeer {
    /// The peer's address.
    pub fn address(&self) -> DatagramAddress {
        self.address
    }
}

impl fmt::Debug for DatagramPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatagramPeer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// A received datagram's metadata (its bytes were copied out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    len: usize,
    source_qp: u32,
    immediate: Option<u32>,
}

impl Datagram {
    /// Payload bytes of the datagram (GRH excluded). More than the buffer
    /// given to the receive means the rest was cut off.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the datagram carried no payload.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The sender's queue pair number.
    pub fn source_qp(&self) -> u32 {
        self.source_qp
    }
    /// Immediate data, if the sender attached some.
    pub fn immediate(&self) -> Option<u32> {
        self.immediate
    }
}

/// An unreliable-datagram endpoint; see the [module docs](self).
///
/// ```no_run
/// # use rdma_safe::{DatagramEndpoint, ProtectionDomain};
/// # fn main() -> Result<(), rdma_safe::Error> {
/// # let pd = ProtectionDomain::open("rxe0")?;
/// let mut a = DatagramEndpoint::new(&pd, 0x1111_1111)?;
/// let mut b = DatagramEndpoint::new(&pd, 0x1111_1111)?;
/// let to_b = a.peer(&b.address())?;
/// a.send_to(&to_b, b"hello")?;
/// let mut buf = [0u8; 64];
/// let got = b.receive(&mut buf)?;
/// assert_eq!(&buf[..got.len()], b"hello");
/// # Ok(())
/// # }
/// ```
pub struct DatagramEndpoint {
    /// Dropped first: destroying the queue pair ends the NIC's use of the
    /// buffers below.
    queue: WorkQueue,
    receive_slots: RemoteAccessBuffer,
    send_slot: RemoteAccessBuffer,
    /// Posted receives in the order they complete: (request id, slot).
    posted: VecDeque<(u64, usize)>,
    pd: ProtectionDomain,
    port: u8,
    gid_index: u8,
    needs_grh: bool,
    /// The SL of the address handles [`peer`](Self::peer) makes.
    service_level: u8,
    address: DatagramAddress,
    mtu: Mtu,
    timeout: Duration,
}

impl DatagramEndpoint {
    /// Creates a UD queue pair on port 1 of `pd`'s device, ready to send and
    /// receive datagrams carrying `qkey`, with its receive ring posted.
    ///
    /// # Errors
    /// The failing verb's error (creating the queues, moving the queue pair
    /// to RTS, registering the slots), or no usable GID on the port.
    pub fn new(pd: &ProtectionDomain, qkey: u32) -> crate::Result<Self> {
        Self::on_port(pd, qkey, 1, None)
    }

    /// As [`new`](Self::new) on device port `port`, sending from GID index
    /// `gid_index` (default: the port's RoCE v2 IPv4 GID, else its first).
    ///
    /// # Errors
    /// As [`new`](Self::new); a GID index the port does not have.
    pub fn on_port(
        pd: &ProtectionDomain,
        qkey: u32,
        port: u8,
        gid_index: Option<u32>,
    ) -> crate::Result<Self> {
        let options = DatagramOptions::default().port(port).gid_index(gid_index);
        Self::with_options(pd, qkey, &options)
    }

    /// As [`new`](Self::new) with `options`: port and GID index, the
    /// service level of the peers' address handles, completion events.
    ///
    /// # Errors
    /// As [`on_port`](Self::on_port); a service level above 15; creating
    /// the completion channel failed.
    pub fn with_options(
        pd: &ProtectionDomain,
        qkey: u32,
        options: &DatagramOptions,
    ) -> crate::Result<Self> {
        let DatagramOptions {
            port,
            gid_index,
            service_level,
            completion_events,
        } = *options;
        if service_level > 15 {
            return Err(VerbsError::InvalidArgument(format!(
                "service level {service_level} is not 0 to 15"
            ))
            .into());
        }
        let ctx = pd.context();
        let port_attr = ctx.query_port(port)?;
        let gid = match gid_index {
            Some(i) => ctx.query_gid_entry(port, i)?,
            None => ctx.preferred_gid(port)?,
        };
        let gid_index = u8::try_from(gid.index).map_err(|_| {
            VerbsError::InvalidArgument(format!("GID index {} does not fit a GRH", gid.index))
        })?;
        let mtu = port_attr.active_mtu().unwrap_or(Mtu::Mtu1024);
        let caps = QpCapabilities {
            max_send_wr: SEND_DEPTH,
            max_recv_wr: RECEIVE_SLOTS as u32,
            max_send_sge: 4,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let channel = match completion_events {
            true => Some(ctx.create_comp_channel()?),
            false => None,
        };
        let cq = CompQueue::new(ctx, SEND_DEPTH + RECEIVE_SLOTS as u32, channel.as_ref(), 0)?;
        let qp = QueuePair::builder(pd.as_core(), QpType::Ud, &cq, &cq)
            .capabilities(caps)
            .build()?;
        qp.to_rts_ud(port, qkey, 0)?;
        let address = DatagramAddress {
            gid: gid.gid,
            lid: port_attr.lid(),
            qp_num: qp.qp_num(),
            qkey,
        };
        let limits = Limits::granted(&qp, &caps);
        let slot = slot_size(mtu);
        let receive_slots =
            RemoteAccessBuffer::with_access(pd, slot * RECEIVE_SLOTS, AccessFlags::LOCAL_WRITE)?;
        let send_slot =
            RemoteAccessBuffer::with_access(pd, mtu.bytes() as usize, AccessFlags::LOCAL_WRITE)?;
        let mut endpoint = DatagramEndpoint {
            queue: WorkQueue::new(
                qp,
                crate::engine::Completions::Own(cq),
                completion_events,
                limits,
                DeviceWatch::for_port(ctx, port),
                None,
            ),
            receive_slots,
            send_slot,
            posted: VecDeque::with_capacity(RECEIVE_SLOTS),
            pd: pd.clone(),
            port,
            gid_index,
            needs_grh: port_attr.needs_grh(),
            service_level,
            address,
            mtu,
            timeout: DEFAULT_TIMEOUT,
        };
        for slot in 0..RECEIVE_SLOTS {
            endpoint.post_slot(slot)?;
        }
        Ok(endpoint)
    }

    /// What peers need to send here.
    pub fn address(&self) -> DatagramAddress {
        self.address
    }

    /// The largest payload a datagram may carry: the port's path MTU.
    pub fn max_message(&self) -> usize {
        self.mtu.bytes() as usize
    }

    /// The bound on blocking waits (default [`DEFAULT_TIMEOUT`], 30 s).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the bound on blocking waits.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// `ibv_create_ah`—A destination for datagrams to `address` (routed by
    /// GID on RoCE).
    ///
    /// # Errors
    /// The error of `ibv_create_ah` (e.g. an unreachable GID).
    pub fn peer(&self, address: &DatagramAddress) -> crate::Result<DatagramPeer> {
        let mut av = if self.needs_grh || !address.gid.is_zero() {
            AddressVector::global(self.port, address.gid, self.gid_index)
        } else {
            AddressVector::local(self.port, address.lid)
        };
        av.sl = self.service_level;
        let ah = AddressHandle::new(self.pd.as_core(), &av)?;
        Ok(DatagramPeer {
            ah,
            address: *address,
        })
    }

    /// Sends `data` as one datagram to `peer` (copied into the endpoint's
    /// send slot first) and blocks until the NIC has sent it. Completion
    /// says nothing about delivery: datagrams may be lost.
    ///
    /// # Errors
    /// [`Error::Post`] before posting when `data` is longer than
    /// [`max_message`](Self::max_message); otherwise as
    /// [`send_gather_to`](Self::send_gather_to).
    pub fn send_to(&mut self, peer: &DatagramPeer, data: &[u8]) -> Result<WorkSuccess> {
        self.check_size(data.len())?;
        if data.is_empty() {
            return self.send_gather_to(peer, &[]);
        }
        self.send_slot
            .write(0, data)
            .expect("checked against the slot's size");
        let element = self
            .send_slot
            .gather(..data.len())
            .expect("checked against the slot's size");
        let send = DatagramSend {
            gather: &[element],
            ah: &peer.ah,
            qpn: peer.address.qp_num,
            qkey: peer.address.qkey,
        };
        self.queue
            .post_sends_and_wait(std::iter::once(send), self.timeout)
    }

    /// Sends the concatenation of `gather` (registered memory, borrowed for
    /// the call) as one datagram to `peer`, without copying, and blocks
    /// until the NIC has sent it (bounded by the timeout; on expiry the
    /// endpoint is shut down as a channel is).
    ///
    /// # Errors
    /// [`Error::Post`] before posting when the payload is longer
    /// than [`max_message`](Self::max_message) or has too many elements; a
    /// completion error, [`Error::Timeout`] or
    /// [`Error::Unusable`] otherwise.
    pub fn send_gather_to(
        &mut self,
        peer: &DatagramPeer,
        gather: &[GatherElement<'_>],
    ) -> Result<WorkSuccess> {
        self.check_size(gather.iter().map(GatherElement::len).sum())?;
        let send = DatagramSend {
            gather,
            ah: &peer.ah,
            qpn: peer.address.qp_num,
            qkey: peer.address.qkey,
        };
        self.queue
            .post_sends_and_wait(std::iter::once(send), self.timeout)
    }

    /// Takes the next datagram if one has arrived: copies its payload (GRH
    /// removed) into `buf` — as much as fits — and returns its metadata.
    ///
    /// # Errors
    /// The receive's completion error (the endpoint is then unusable).
    pub fn try_receive(&mut self, buf: &mut [u8]) -> Result<Option<Datagram>> {
        let Some(&(id, _)) = self.posted.front() else {
            return Err(self.no_receives());
        };
        match self.queue.take(id, Outcome, Look::Once(None)) {
            None => Ok(None),
            Some(outcome) => self.finish_receive(outcome, buf).map(Some),
        }
    }

    /// Waits for the next datagram (bounded by the timeout; on expiry the
    /// endpoint is shut down, as a channel is) and copies its payload (GRH
    /// removed) into `buf`, as much as fits.
    ///
    /// # Errors
    /// [`Error::Timeout`] when nothing arrives in time; the
    /// receive's completion error.
    pub fn receive(&mut self, buf: &mut [u8]) -> Result<Datagram> {
        let Some(&(id, _)) = self.posted.front() else {
            return Err(self.no_receives());
        };
        let outcome = self
            .queue
            .wait(id, Outcome, Duration::ZERO, Some(self.timeout));
        let outcome = outcome.expect(BOUNDED);
        self.finish_receive(outcome, buf)
    }

    /// Copies a completed receive out of its slot and posts the slot again.
    fn finish_receive(&mut self, outcome: Result<WorkSuccess>, buf: &mut [u8]) -> Result<Datagram> {
        let (_, slot) = self.posted.pop_front().expect("a receive was outstanding");
        let done = outcome?;
        let len = done.bytes().saturating_sub(GRH_SIZE);
        let start = slot * slot_size(self.mtu) + GRH_SIZE;
        let n = len.min(buf.len());
        self.receive_slots
            .read(start, &mut buf[..n])
            .expect("a datagram fits its slot");
        self.post_slot(slot)?;
        Ok(Datagram {
            len,
            source_qp: done.source_qp(),
            immediate: done.immediate(),
        })
    }

    /// Posts receive slot `slot` (GRH space and payload, one element).
    fn post_slot(&mut self, slot: usize) -> Result<()> {
        let size = slot_size(self.mtu);
        let range = slot * size..slot * size + GRH_SIZE + self.mtu.bytes() as usize;
        let element = self
            .receive_slots
            .scatter(range)
            .expect("slots lie within the ring");
        let (ids, posted) = self
            .queue
            .post_receives(&mut [ReceiveWorkRequest::new(&mut [element])]);
        posted?;
        let id = ids.start;
        self.posted.push_back((id, slot));
        Ok(())
    }

    fn check_size(&self, len: usize) -> Result<()> {
        if len > self.max_message() {
            return Err(Error::Post {
                operation: Operation::Send,
                source: VerbsError::InvalidArgument(format!(
                    "a datagram of {len} bytes exceeds the path MTU of {} bytes",
                    self.max_message()
                )),
            });
        }
        Ok(())
    }

    fn no_receives(&self) -> Error {
        Error::Unusable(
            self.queue
                .status()
                .unusable
                .unwrap_or_else(|| "no receive slot is posted".into()),
        )
    }
}

/// Bytes per receive slot: the GRH and one MTU, rounded to whole words.
fn slot_size(mtu: Mtu) -> usize {
    (GRH_SIZE + mtu.bytes() as usize).next_multiple_of(8)
}

impl fmt::Debug for DatagramEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatagramEndpoint")
            .field("address", &self.address)
            .field("mtu", &self.mtu)
            .field("posted", &self.posted.len())
            .finish_non_exhaustive()
    }
}
