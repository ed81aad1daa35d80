//! [`SharedReceiveQueue`]: one pool of receives that several channels draw
//! from.
//!
//! # How it stays safe
//!
//! The queue owns the memory every receive lands in: a ring of slots,
//! registered for local access and reached by Rust only through atomic
//! 8-byte copies (the memory of a
//! [`RemoteAccessBuffer`]). A receive copies the
//! message out of its slot; the slot is posted again in batches by
//! [`refill`](SharedReceiveQueue::refill). No user memory is ever lent to
//! the NIC, so there is nothing to forget or drop early. The slots live in
//! a shared owner that every attached channel's engine keeps alive until
//! after its queue pair is destroyed: a channel that outlives the
//! `SharedReceiveQueue` value cannot let the NIC write freed slots.
//!
//! Receive completions of all attached channels arrive on the queue's own
//! completion queue, each naming the channel's QP number; the channels'
//! own completion queues see only their sends.

use crate::engine::{with_list, DeviceWatch, Polled, SrqQueue, STACK_LIST};
use crate::error::{Error, Operation, Result};
use crate::memory::aligned::AllocError;
use crate::memory::element::scatter_sges;
use crate::memory::remote_access::RemoteAccessBuffer;
use crate::pd::ProtectionDomain;
use rdma_core::{AccessFlags, CompQueue, PostError, RecvRequest};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The verbs objects and memory every attached channel keeps alive.
pub(crate) struct SrqShared {
    pub(crate) queue: SrqQueue,
    slots: RemoteAccessBuffer,
}

impl fmt::Debug for SrqShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrqShared")
            .field("max_wr", &self.queue.srq().max_wr())
            .finish_non_exhaustive()
    }
}

/// A message taken from a [`SharedReceiveQueue`] (its bytes were copied
/// out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedReceive {
    len: usize,
    qp_num: u32,
    immediate: Option<u32>,
}

impl SharedReceive {
    /// Bytes of the message. More than the buffer given to the receive
    /// means the rest was cut off.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the message was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The QP number of the channel that received it
    /// ([`Channel::qp_num`](crate::Channel::qp_num)).
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }
    /// Immediate data, if the sender attached some.
    pub fn immediate(&self) -> Option<u32> {
        self.immediate
    }
}

/// A shared receive queue with its own slots; channels built with
/// [`ChannelBuilder::shared_receive_queue`](crate::ChannelBuilder::shared_receive_queue)
/// take their receives from it. See the [module docs](self).
pub struct SharedReceiveQueue {
    shared: Arc<SrqShared>,
    slot_size: usize,
    slots: usize,
    /// Slots not posted (consumed and not yet refilled).
    free: Vec<usize>,
    /// Refill automatically once this many slots are free.
    batch: usize,
    /// Completions polled and not yet taken.
    polled: Polled,
    /// The device's async events (shared with the channels on it).
    watch: Arc<DeviceWatch>,
}

impl SharedReceiveQueue {
    /// Creates a shared receive queue of `slots` receives of `slot_size`
    /// bytes each in `pd`, all posted, with a completion queue for them.
    ///
    /// # Errors
    /// [`Error::Alloc`] for zero slots or size; the
    /// failing verb's error (`ibv_create_srq` refuses more slots than the
    /// device's `max_srq_wr`).
    pub fn new(pd: &ProtectionDomain, slots: u32, slot_size: usize) -> crate::Result<Self> {
        Self::create(pd, slots, slot_size, false)
    }

    /// As [`new`](Self::new), with a completion queue that reports events:
    /// [`receive`](Self::receive) then sleeps on them while nothing has
    /// arrived instead of polling (`-e` of rdma-core's `ibv_srq_pingpong`).
    ///
    /// # Errors
    /// As [`new`](Self::new); creating the completion channel failed.
    pub fn with_completion_events(
        pd: &ProtectionDomain,
        slots: u32,
        slot_size: usize,
    ) -> crate::Result<Self> {
        Self::create(pd, slots, slot_size, true)
    }

    fn create(
        pd: &ProtectionDomain,
        slots: u32,
        slot_size: usize,
        events: bool,
    ) -> crate::Result<Self> {
        let slot_size = slot_size.next_multiple_of(8);
        let n = slots as usize;
        let total =
            n.checked_mul(slot_size)
                .filter(|&t| t > 0)
                .ok_or(AllocError::InvalidLayout {
                    len: slot_size,
                    align: 8,
                })?;
        let srq = rdma_core::SharedReceiveQueue::new(pd.as_core(), slots, 1)?;
        let channel = match events {
            true => Some(pd.context().create_comp_channel()?),
            false => None,
        };
        let cq = CompQueue::new(pd.context(), slots, channel.as_ref(), 0)?;
        let memory = RemoteAccessBuffer::with_access(pd, total, AccessFlags::LOCAL_WRITE)?;
        let mut queue = SharedReceiveQueue {
            shared: Arc::new(SrqShared {
                queue: SrqQueue::new(srq, cq),
                slots: memory,
            }),
            slot_size,
            slots: n,
            free: (0..n).rev().collect(),
            batch: (n / 4).max(1),
            polled: Polled::default(),
            watch: DeviceWatch::of(pd.context()),
        };
        queue.refill()?;
        Ok(queue)
    }

    pub(crate) fn shared(&self) -> &Arc<SrqShared> {
        &self.shared
    }

    /// Bytes per slot: the largest message a receive takes whole.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Receives currently posted.
    pub fn posted(&self) -> usize {
        self.slots - self.free.len()
    }

    /// Refill automatically (inside the receive calls) once `n` slots are
    /// free (default: a quarter of the slots). `usize::MAX` turns automatic
    /// refill off; [`refill`](Self::refill) then posts them.
    pub fn set_refill_batch(&mut self, n: usize) {
        self.batch = n.max(1);
    }

    /// Posts every free slot again, as lists of up to 32 receives with one
    /// `ibv_post_srq_recv` call each (built on the stack: a refill costs
    /// the allocator nothing, however many slots are free). Returns how
    /// many were posted.
    ///
    /// # Errors
    /// The verb's error; the slots it did not take stay free.
    pub fn refill(&mut self) -> Result<usize> {
        let mut posted = 0;
        let mut outcome = Ok(());
        for chunk in self.free.chunks(STACK_LIST) {
            match post_slots(&self.shared, self.slot_size, chunk) {
                Ok(()) => posted += chunk.len(),
                Err(e) => {
                    // A failure that does not name the first receive not
                    // taken may have queued any of the chunk's: those slots
                    // are counted as posted (lost to this queue, at worst)
                    // rather than free, where posting one again would give
                    // two receives the same memory.
                    posted += e.posted().unwrap_or(chunk.len());
                    outcome = Err(e);
                    break;
                }
            }
        }
        self.free.drain(..posted);
        outcome.map(|()| posted).map_err(|e| Error::Post {
            operation: Operation::Receive,
            source: e.into(),
        })
    }

    /// Takes the next message any attached channel received, waiting up to
    /// `timeout`: copies it (as much as fits) into `buf` and frees its slot
    /// (posted again by the next refill). `Ok(None)` when nothing arrived in
    /// time; the slots are the queue's own, so giving up is always safe.
    ///
    /// # Errors
    /// [`Error::WorkCompletion`] for a failed receive (its slot is
    /// freed); [`Error::Poll`] when the completion queue cannot be
    /// read; a refill's error.
    pub fn receive(&mut self, buf: &mut [u8], timeout: Duration) -> Result<Option<SharedReceive>> {
        let Some(wc) = self.shared.queue.next(&mut self.polled, timeout)? else {
            return Ok(None);
        };
        let slot = wc.wr_id() as usize;
        self.free.push(slot);
        if !wc.is_success() {
            return Err(Error::WorkCompletion {
                operation: Operation::Receive,
                status: wc.status(),
                vendor_err: wc.vendor_err(),
            });
        }
        let len = wc.byte_len() as usize;
        let n = len.min(buf.len()).min(self.slot_size);
        self.shared
            .slots
            .read(slot * self.slot_size, &mut buf[..n])
            .expect("a slot lies within the ring");
        if self.free.len() >= self.batch {
            self.refill()?;
        }
        Ok(Some(SharedReceive {
            len,
            qp_num: wc.qp_num(),
            immediate: wc.imm_data(),
        }))
    }

    /// `ibv_modify_srq`—Arms the limit event: once fewer than `limit`
    /// receives are posted, the device raises
    /// `IBV_EVENT_SRQ_LIMIT_REACHED` once (see
    /// [`wait_limit_reached`](Self::wait_limit_reached)); arm again for the
    /// next.
    ///
    /// # Errors
    /// The verb's error (`EINVAL` for a limit above the queue's size).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        Ok(self.shared.queue.srq().arm_limit(limit)?)
    }

    /// Waits up to `timeout` for this queue's limit event (read from the
    /// device's event queue through the watch its channels share).
    pub fn wait_limit_reached(&self, timeout: Duration) -> bool {
        let id = self.shared.queue.srq().id();
        let start = Instant::now();
        loop {
            if self.watch.take_srq_limit(id) {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("slots", &self.slots)
            .field("slot_size", &self.slot_size)
            .field("posted", &self.posted())
            .finish_non_exhaustive()
    }
}

/// Posts a receive for each of `slots` (at most [`STACK_LIST`]) as one list.
fn post_slots(shared: &SrqShared, slot_size: usize, slots: &[usize]) -> Result<(), PostError> {
    let elements = slots.iter().map(|&s| {
        let start = s * slot_size;
        [shared
            .slots
            .scatter(start..start + slot_size)
            .expect("slots lie within the ring")]
    });
    with_list(elements, |elements| {
        let reqs = elements
            .iter_mut()
            .zip(slots)
            .map(|(e, &s)| RecvRequest::new(s as u64, scatter_sges(e)));
        with_list(reqs, |reqs| {
            // Every SGE names a slot of the ring this queue shares with its
            // channels' engines. The ring is memory Rust reaches only
            // atomically (so the NIC writing it is no data race), it is
            // owned by `SrqShared`, and `SrqShared` outlives the SRQ's every
            // use: this value and each attached channel's engine (after its
            // queue pair) hold it.
            // SAFETY: by the reasoning just above (the promise `post` asks).
            unsafe { shared.queue.post(reqs) }
        })
    })
}
