//! [`PreparedBatch`]: send-queue requests checked and built once, posted
//! many times.
//!
//! A bandwidth loop posts the same few requests over and over. Each
//! [`PollingScope::post_batch`](crate::PollingScope::post_batch) checks
//! every request again (its SGE count, its inline size, a remote range)
//! and writes every field of the verb's request. A prepared batch does
//! that once, when it is
//! made ([`PollingScope::prepare_sends`](crate::PollingScope::prepare_sends),
//! [`prepare_writes`](crate::PollingScope::prepare_writes),
//! [`prepare_reads`](crate::PollingScope::prepare_reads)), and keeps the
//! verb's list; [`PollingScope::post_prepared`](crate::PollingScope::post_prepared)
//! then only gives the batch its id and links the list, as perftest posts
//! its own prebuilt requests.
//!
//! It borrows what a batch of the same requests would: the request list
//! (shared for sends and writes, exclusively for reads, whose targets the
//! NIC writes) for as long as it lives, and their memory for `'data`, which
//! must outlive the scope it is posted in. Posting it again while an
//! earlier post is in flight is what posting the same requests again is:
//! allowed, since nothing of a scope's memory is handed back to Rust before
//! the scope has drained every request.
//!
//! ```no_run
//! use rdma_safe::{Channel, ProtectionDomain, RegisteredBuffer, SendWorkRequest};
//! # fn demo(pd: &ProtectionDomain, ch: &mut Channel) -> rdma_safe::Result<()> {
//! let mut buf = RegisteredBuffer::new(pd, 4096)?;
//! let (mr, data) = buf.split_mut();
//! let lists: Vec<[_; 1]> = data.chunks(1024).map(|c| [mr.gather_element(c)]).collect();
//! let wrs: Vec<_> = lists
//!     .iter()
//!     .enumerate()
//!     .map(|(k, l)| SendWorkRequest::new(l).with_immediate(k as u32))
//!     .collect();
//! ch.scope(|s| -> rdma_safe::Result<()> {
//!     let mut batch = s.prepare_sends(&wrs)?;
//!     for round in 0..100u32 {
//!         for k in 0..batch.len() {
//!             batch.set_immediate(k, round * 4 + k as u32)?;
//!         }
//!         s.post_prepared(&mut batch)?.wait()?;
//!     }
//!     Ok(())
//! })?;
//! # Ok(())
//! # }
//! ```

use crate::engine::WorkQueue;
use crate::error::{Error, Operation, Result, VerbsError};
use rdma_core::SendRequest;
use std::fmt;
use std::marker::PhantomData;

/// Send-queue requests of one kind, checked and built once for one
/// channel, posted as one batch (one doorbell, the last request signaled)
/// by [`PollingScope::post_prepared`](crate::PollingScope::post_prepared)
/// as often as wanted. See the [module docs](self).
pub struct PreparedBatch<'wr, 'data> {
    pub(crate) reqs: Vec<SendRequest<'wr>>,
    pub(crate) op: Operation,
    pub(crate) len: usize,
    /// The address of the queue whose limits the requests were checked
    /// against, the only one they may be posted on (compared, never
    /// followed: a pointer would make the batch neither `Send` nor `Sync`).
    pub(crate) queue: usize,
    pub(crate) _data: PhantomData<&'data [u8]>,
}

impl<'wr, 'data> PreparedBatch<'wr, 'data> {
    pub(crate) fn new(
        queue: &WorkQueue,
        op: Operation,
        (reqs, len): (Vec<SendRequest<'wr>>, usize),
    ) -> Result<Self> {
        if reqs.is_empty() {
            return Err(Error::Post {
                operation: op,
                source: VerbsError::InvalidArgument("empty batch".into()),
            });
        }
        Ok(PreparedBatch {
            reqs,
            op,
            len,
            queue: queue_address(queue),
            _data: PhantomData,
        })
    }

    /// How many requests the batch holds.
    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    /// Whether the batch is empty (never: an empty one is refused when
    /// made).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The payload bytes of one post of the batch (its requests' lengths
    /// added up): what the batch's completion reports.
    pub fn bytes(&self) -> usize {
        self.len
    }

    /// The operation its requests perform.
    pub fn operation(&self) -> Operation {
        self.op
    }

    /// Keeps only the first `n` requests (all of them if `n` is larger, at
    /// least one): a loop whose last round posts fewer.
    pub fn truncate(&mut self, n: usize) {
        if n < self.reqs.len() {
            self.reqs.truncate(n.max(1));
            self.len = self
                .reqs
                .iter()
                .flat_map(|r| r.sges())
                .map(|s| s.length() as usize)
                .sum();
        }
    }

    /// Sets the immediate data (host order) that request `k` carries from
    /// the next post on.
    ///
    /// # Errors
    /// [`Error::Post`] (invalid argument) if `k` is not a request of the
    /// batch or that request was made without immediate data
    /// ([`with_immediate`](crate::SendWorkRequest::with_immediate)).
    pub fn set_immediate(&mut self, k: usize, imm: u32) -> Result<()> {
        let n = self.reqs.len();
        match self.reqs.get_mut(k).map(|req| req.set_imm_data(imm)) {
            Some(true) => Ok(()),
            Some(false) => Err(self.refusal(format!(
                "request {k} of the batch carries no immediate data (make it with_immediate)"
            ))),
            None => Err(self.refusal(format!("the batch holds requests 0..{n}, not request {k}"))),
        }
    }

    #[cold]
    fn refusal(&self, why: String) -> Error {
        Error::Post {
            operation: self.op,
            source: VerbsError::InvalidArgument(why),
        }
    }

    /// The list to post on `queue`, refused if the batch was prepared for
    /// another channel (whose limits its checks were made against).
    pub(crate) fn list_for(&mut self, queue: &WorkQueue) -> Result<&mut [SendRequest<'wr>]> {
        if self.queue != queue_address(queue) {
            return Err(self.refusal(
                "the batch was prepared on another channel: prepare it on the one that posts it"
                    .into(),
            ));
        }
        Ok(&mut self.reqs)
    }
}

fn queue_address(queue: &WorkQueue) -> usize {
    std::ptr::from_ref(queue) as usize
}

impl fmt::Debug for PreparedBatch<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedBatch")
            .field("operation", &self.op)
            .field("requests", &self.reqs.len())
            .field("bytes", &self.len)
            .finish()
    }
}
