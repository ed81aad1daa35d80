//! Posting: validating typed work requests and handing them to the NIC,
//! one request or a batch per verb call.

use super::tracker::BATCH_MEMBER;
use super::WorkQueue;
use crate::error::{IbvError, Operation, TransportError, TransportResult};
use crate::remote::RemoteMemoryRegion;
use crate::sge::{GatherElement, ScatterElement};
use crate::work::{ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest};
use ibverbs_sys as sys;
use std::ops::Range;

impl WorkQueue {
    /// Whether a payload of `len` bytes goes inline. A payload forced inline
    /// must fit the queue pair's inline space: checked here, before anything
    /// is posted, so that no member of a batch can fail inside the provider
    /// after earlier members were posted.
    fn inline_for(&self, op: Operation, len: usize, forced: Option<bool>) -> TransportResult<bool> {
        match forced {
            None => Ok(len > 0 && len <= self.limits.inline_default as usize),
            Some(true) if len > self.limits.caps.max_inline_data as usize => {
                Err(TransportError::Post {
                    operation: op,
                    source: IbvError::InvalidArgument(format!(
                    "{len} bytes forced inline exceed the queue pair's inline limit of {} bytes",
                    self.limits.caps.max_inline_data
                )),
                })
            }
            Some(on) => Ok(on),
        }
    }

    fn check_sges(&self, op: Operation, n: usize, max: u32) -> TransportResult<()> {
        if n > max as usize {
            return Err(TransportError::Post {
                operation: op,
                source: IbvError::InvalidArgument(format!(
                    "{n} SGEs exceed the channel's limit of {max}"
                )),
            });
        }
        Ok(())
    }

    /// Validates a send and describes it as a send-queue request.
    fn send_item<'a, 'd>(
        &self,
        wr: &SendWorkRequest<'a, 'd>,
    ) -> TransportResult<GatherItem<'a, 'd>> {
        self.check_sges(
            Operation::Send,
            wr.gather.len(),
            self.limits.caps.max_send_sge,
        )?;
        let (opcode, imm_be) = match wr.immediate {
            Some(imm) => (sys::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, imm.to_be()),
            None => (sys::ibv_wr_opcode::IBV_WR_SEND, 0),
        };
        let mut flags = sys::ibv_send_flags(0);
        if wr.solicited {
            flags |= sys::ibv_send_flags::IBV_SEND_SOLICITED;
        }
        let len = wr.len();
        if self.inline_for(Operation::Send, len, wr.inline)? {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE;
        }
        Ok(GatherItem {
            gather: wr.gather,
            len,
            opcode,
            flags,
            imm_be,
            rdma: None,
        })
    }

    /// Validates an RDMA write and describes it as a send-queue request.
    fn write_item<'a, 'd>(
        &self,
        wr: &WriteWorkRequest<'a, 'd>,
    ) -> TransportResult<GatherItem<'a, 'd>> {
        self.check_sges(
            Operation::Write,
            wr.gather.len(),
            self.limits.caps.max_send_sge,
        )?;
        let len = wr.len();
        check_remote_len(Operation::Write, len, &wr.remote)?;
        let (opcode, imm_be) = match wr.immediate {
            Some(imm) => (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM, imm.to_be()),
            None => (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, 0),
        };
        let mut flags = sys::ibv_send_flags(0);
        if self.inline_for(Operation::Write, len, wr.inline)? {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE;
        }
        Ok(GatherItem {
            gather: wr.gather,
            len,
            opcode,
            flags,
            imm_be,
            rdma: Some((wr.remote.address(), wr.remote.rkey())),
        })
    }

    pub(crate) fn post_send(&self, wr: &SendWorkRequest<'_, '_>) -> TransportResult<u64> {
        let item = self.send_item(wr)?;
        self.post_gather(Operation::Send, std::slice::from_ref(&item))
    }

    pub(crate) fn post_write(&self, wr: &WriteWorkRequest<'_, '_>) -> TransportResult<u64> {
        let item = self.write_item(wr)?;
        self.post_gather(Operation::Write, std::slice::from_ref(&item))
    }

    pub(crate) fn post_send_batch(&self, wrs: &[SendWorkRequest<'_, '_>]) -> TransportResult<u64> {
        let items = wrs
            .iter()
            .map(|wr| self.send_item(wr))
            .collect::<TransportResult<Vec<_>>>()?;
        self.post_gather(Operation::Send, &items)
    }

    pub(crate) fn post_write_batch(
        &self,
        wrs: &[WriteWorkRequest<'_, '_>],
    ) -> TransportResult<u64> {
        let items = wrs
            .iter()
            .map(|wr| self.write_item(wr))
            .collect::<TransportResult<Vec<_>>>()?;
        self.post_gather(Operation::Write, &items)
    }

    /// Posts one request, or a batch as one linked list with one
    /// `ibv_post_send` call (one doorbell) of which only the last request is
    /// signaled. On a reliable connection the send queue completes in order,
    /// so the last request's completion — success, error or flush — means
    /// every earlier one is finished too.
    fn post_gather(&self, op: Operation, items: &[GatherItem<'_, '_>]) -> TransportResult<u64> {
        let len = items.iter().map(|it| it.len).sum();
        self.post_list(op, len, items.len(), &mut |k, wr_id, signaled| {
            items[k].raw(wr_id, signaled)
        })
    }

    /// Posts `n` send-queue requests built by `build(index, wr_id, signaled)`
    /// as described at [`post_gather`](Self::post_gather). Every SGE the
    /// built requests name must come from a `GatherElement` or
    /// `ScatterElement` of the caller's request(s).
    fn post_list(
        &self,
        op: Operation,
        len: usize,
        n: usize,
        build: &mut dyn FnMut(usize, u64, bool) -> sys::ibv_send_wr,
    ) -> TransportResult<u64> {
        if n == 0 {
            return Err(TransportError::Post {
                operation: op,
                source: IbvError::InvalidArgument("empty batch".into()),
            });
        }
        let qp = &self.qp;
        self.post(op, len, n as u32, &mut |id| {
            if n == 1 {
                let mut wr = build(0, id, true);
                // Every SGE comes from a `GatherElement` (a live `&[u8]`) or a
                // `ScatterElement` (a live `&mut [u8]`), borrowed until the
                // completion is claimed.
                // SAFETY: blocking calls wait for the completion, scopes drain
                // it before returning, and `PendingWork` waits on drop.
                return unsafe { qp.post_send(&mut wr) };
            }
            let mut wrs: Vec<sys::ibv_send_wr> = (0..n)
                .map(|k| {
                    if k + 1 == n {
                        build(k, id, true)
                    } else {
                        build(k, id | BATCH_MEMBER, false)
                    }
                })
                .collect();
            let base = wrs.as_mut_ptr();
            for i in 0..n - 1 {
                // SAFETY: `i + 1 < n`: both are elements of `wrs`, which is
                // not moved or resized while the list is in use.
                unsafe { (*base.add(i)).next = base.add(i + 1) };
            }
            let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
            // SAFETY: as for a single request; the batch completes only with
            // its last request, after every earlier one (see above).
            let rc = unsafe { sys::ibv_post_send(qp.as_ptr(), base, &mut bad) };
            if rc == 0 {
                return Ok(());
            }
            if bad != base {
                // Part of the list was posted without a signaled request at
                // its end: its completion could never be observed. The checks
                // before posting (SGE counts, inline sizes, send-queue room)
                // rule this out; if a provider does it anyway, returning would
                // let the borrows end while the NIC may use the memory.
                crate::fatal::abort_with(format_args!(
                    "ibv_post_send posted part of a batch and failed (errno {rc})"
                ));
            }
            Err(IbvError::verb("ibv_post_send", rc))
        })
    }

    pub(crate) fn post_recv(&self, wr: &mut ReceiveWorkRequest<'_, '_>) -> TransportResult<u64> {
        self.check_sges(
            Operation::Receive,
            wr.scatter.len(),
            self.limits.caps.max_recv_sge,
        )?;
        let len = wr.len();
        let (list, n) = scatter_list(wr.scatter);
        let qp = &self.qp;
        self.post(Operation::Receive, len, 0, &mut |id| {
            let mut raw = sys::ibv_recv_wr {
                wr_id: id,
                sg_list: list,
                num_sge: n,
                next: std::ptr::null_mut(),
            };
            // SAFETY: every SGE comes from a `ScatterElement`, i.e. a live
            // `&mut [u8]` that stays exclusively borrowed until this request's
            // completion is claimed (see `post_gather`).
            unsafe { qp.post_recv(&mut raw) }
        })
    }

    /// Posts receives as one list with one `ibv_post_recv` call. Receives
    /// complete one by one, in order, each with its own completion; the
    /// returned range names the posted ones, which are tracked even when the
    /// call fails part-way (the error is returned beside them).
    pub(crate) fn post_recv_batch(
        &self,
        wrs: &mut [ReceiveWorkRequest<'_, '_>],
    ) -> (Range<u64>, TransportResult<()>) {
        if wrs.is_empty() {
            return (
                0..0,
                Err(TransportError::Post {
                    operation: Operation::Receive,
                    source: IbvError::InvalidArgument("empty batch".into()),
                }),
            );
        }
        for wr in wrs.iter() {
            if let Err(e) = self.check_sges(
                Operation::Receive,
                wr.scatter.len(),
                self.limits.caps.max_recv_sge,
            ) {
                return (0..0, Err(e));
            }
        }
        let lens: Vec<usize> = wrs.iter().map(|wr| wr.len()).collect();
        let mut raws: Vec<sys::ibv_recv_wr> = wrs
            .iter_mut()
            .map(|wr| {
                let (sg_list, num_sge) = scatter_list(wr.scatter);
                sys::ibv_recv_wr {
                    wr_id: 0,
                    sg_list,
                    num_sge,
                    next: std::ptr::null_mut(),
                }
            })
            .collect();
        let qp = &self.qp;
        self.post_receives(&lens, &mut |first| {
            let n = raws.len();
            let base = raws.as_mut_ptr();
            for k in 0..n {
                // SAFETY: `k < n`, and `k + 1 < n` where it is linked: all are
                // elements of `raws`, which is not moved or resized while the
                // list is in use.
                unsafe {
                    (*base.add(k)).wr_id = first + k as u64;
                    if k + 1 < n {
                        (*base.add(k)).next = base.add(k + 1);
                    }
                }
            }
            let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: every SGE comes from a `ScatterElement`, i.e. a live
            // `&mut [u8]` that stays exclusively borrowed until the receive's
            // completion is claimed (see `post_gather`).
            let rc = unsafe { sys::ibv_post_recv(qp.as_ptr(), base, &mut bad) };
            if rc == 0 {
                return (n, Ok(()));
            }
            // The provider names the first receive it did not post; those
            // before it are on the queue and must be tracked.
            let posted = (0..n).find(|&k| std::ptr::eq(base.wrapping_add(k), bad));
            match posted {
                Some(k) => (k, Err(IbvError::verb("ibv_post_recv", rc))),
                None => {
                    // Without knowing which receives were posted, returning
                    // could let the borrows end while the NIC may still write
                    // into the buffers.
                    crate::fatal::abort_with(format_args!(
                        "ibv_post_recv failed (errno {rc}) without naming the receive it stopped at"
                    ));
                }
            }
        })
    }

    pub(crate) fn post_read(&self, wr: &mut ReadWorkRequest<'_, '_>) -> TransportResult<u64> {
        self.post_read_batch(std::slice::from_mut(wr))
    }

    pub(crate) fn post_read_batch(
        &self,
        wrs: &mut [ReadWorkRequest<'_, '_>],
    ) -> TransportResult<u64> {
        let mut len = 0;
        for wr in wrs.iter() {
            self.check_sges(
                Operation::Read,
                wr.scatter.len(),
                self.limits.caps.max_send_sge,
            )?;
            check_remote_len(Operation::Read, wr.len(), &wr.remote)?;
            len += wr.len();
        }
        let count = wrs.len();
        let describe = |wr: &mut ReadWorkRequest<'_, '_>| -> ReadRaw {
            let (list, n) = scatter_list(wr.scatter);
            (list, n, wr.remote.address(), wr.remote.rkey())
        };
        // One read (the latency path) needs no allocation.
        let (single, many): ([ReadRaw; 1], Vec<ReadRaw>) = match wrs {
            [one] => ([describe(one)], Vec::new()),
            _ => (
                [(std::ptr::null_mut(), 0, 0, 0)],
                wrs.iter_mut().map(describe).collect(),
            ),
        };
        let lists: &[ReadRaw] = if many.is_empty() { &single } else { &many };
        self.post_list(Operation::Read, len, count, &mut |k, wr_id, signaled| {
            let (sg_list, num_sge, remote_addr, rkey) = lists[k];
            let mut raw = sys::ibv_send_wr {
                wr_id,
                sg_list,
                num_sge,
                opcode: sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
                send_flags: if signaled {
                    sys::ibv_send_flags::IBV_SEND_SIGNALED.0
                } else {
                    0
                },
                ..Default::default()
            };
            raw.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            raw
        })
    }
}

/// A read's scatter list, its length, remote address and rkey.
type ReadRaw = (*mut sys::ibv_sge, i32, u64, u32);

/// A validated send or RDMA write, ready to become an `ibv_send_wr`.
struct GatherItem<'a, 'd> {
    gather: &'a [GatherElement<'d>],
    len: usize,
    opcode: sys::ibv_wr_opcode,
    /// Flags other than `IBV_SEND_SIGNALED`.
    flags: sys::ibv_send_flags,
    imm_be: u32,
    rdma: Option<(u64, u32)>,
}

impl GatherItem<'_, '_> {
    fn raw(&self, wr_id: u64, signaled: bool) -> sys::ibv_send_wr {
        let mut flags = self.flags;
        if signaled {
            flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED;
        }
        let mut wr = sys::ibv_send_wr {
            wr_id,
            // `GatherElement` is `repr(transparent)` over `ibv_sge`; the
            // provider only reads the list.
            sg_list: self.gather.as_ptr() as *mut sys::ibv_sge,
            num_sge: self.gather.len() as i32,
            opcode: self.opcode,
            send_flags: flags.0,
            ..Default::default()
        };
        wr.__bindgen_anon_1.imm_data = self.imm_be;
        if let Some((remote_addr, rkey)) = self.rdma {
            wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        }
        wr
    }
}

fn check_remote_len(op: Operation, len: usize, remote: &RemoteMemoryRegion) -> TransportResult<()> {
    if len as u64 > remote.length() {
        return Err(TransportError::Post {
            operation: op,
            source: IbvError::InvalidArgument(format!(
                "{len} bytes do not fit the remote region of {} bytes",
                remote.length()
            )),
        });
    }
    Ok(())
}

fn scatter_list(scatter: &mut [ScatterElement<'_>]) -> (*mut sys::ibv_sge, i32) {
    // `ScatterElement` is `repr(transparent)` over `ibv_sge`.
    (scatter.as_mut_ptr().cast(), scatter.len() as i32)
}
