//! Send-queue work requests (`struct ibv_send_wr`): sends, RDMA writes and
//! reads, atomics, with their flags and UD destination.

use super::sge::{sg_list, sges_of, Sge};
use super::Linked;
use crate::ah::AddressHandle;
use crate::mr::{AccessFlags, MemoryRegion};
use crate::mw::MemoryWindow;
use ibverbs_sys as sys;
use std::fmt;
use std::marker::PhantomData;
use std::ptr;

bitflags::bitflags! {
    /// Flags of a send request (`enum ibv_send_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA reads and atomics of this QP to complete
        /// before starting.
        const FENCE = sys::ibv_send_flags::IBV_SEND_FENCE.0;
        /// Generate a completion (always on when the QP was created with
        /// `sq_sig_all`).
        const SIGNALED = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        /// Raise a solicited event at the receiver (sends and writes with
        /// immediate).
        const SOLICITED = sys::ibv_send_flags::IBV_SEND_SOLICITED.0;
        /// Copy the gathered bytes into the request at post time: the memory
        /// may be reused once the post returns and needs no lkey.
        const INLINE = sys::ibv_send_flags::IBV_SEND_INLINE.0;
        /// Offload the IP checksum (raw packet and UD over Ethernet QPs).
        const IP_CSUM = sys::ibv_send_flags::IBV_SEND_IP_CSUM.0;
    }
}

/// The operation of a send request (`enum ibv_wr_opcode`), as built here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SendOpcode {
    /// Send to the peer's next receive.
    Send,
    /// Send with 32 bits of immediate data.
    SendWithImm,
    /// RDMA write to the peer's memory.
    RdmaWrite,
    /// RDMA write, consuming a receive at the peer that carries the immediate.
    RdmaWriteWithImm,
    /// RDMA read from the peer's memory.
    RdmaRead,
    /// 64-bit atomic compare-and-swap in the peer's memory.
    AtomicCmpSwap,
    /// 64-bit atomic fetch-and-add in the peer's memory.
    AtomicFetchAdd,
    /// Bind a type 2 memory window.
    BindMw,
    /// Invalidate a local rkey (a type 2 window's).
    LocalInv,
    /// An opcode this type does not build.
    Other(u32),
}

impl SendOpcode {
    fn from_raw(raw: sys::ibv_wr_opcode) -> Self {
        use sys::ibv_wr_opcode as O;
        match raw {
            O::IBV_WR_SEND => SendOpcode::Send,
            O::IBV_WR_SEND_WITH_IMM => SendOpcode::SendWithImm,
            O::IBV_WR_RDMA_WRITE => SendOpcode::RdmaWrite,
            O::IBV_WR_RDMA_WRITE_WITH_IMM => SendOpcode::RdmaWriteWithImm,
            O::IBV_WR_RDMA_READ => SendOpcode::RdmaRead,
            O::IBV_WR_ATOMIC_CMP_AND_SWP => SendOpcode::AtomicCmpSwap,
            O::IBV_WR_ATOMIC_FETCH_AND_ADD => SendOpcode::AtomicFetchAdd,
            O::IBV_WR_BIND_MW => SendOpcode::BindMw,
            O::IBV_WR_LOCAL_INV => SendOpcode::LocalInv,
            other => SendOpcode::Other(other.0),
        }
    }
}

/// A send-queue work request (`struct ibv_send_wr`), borrowing its SGEs and
/// its UD address handle for `'a`.
///
/// Build one with a constructor per operation, then chain the flag and UD
/// setters:
///
/// ```
/// # use rdma_core::{SendRequest, Sge};
/// let sges = [Sge::new(0x1000, 64, 0x42)];
/// let wr = SendRequest::rdma_write(7, &sges, 0x2000, 0x99).signaled();
/// assert_eq!(wr.wr_id(), 7);
/// assert_eq!(wr.remote_addr(), Some(0x2000));
/// ```
///
/// Post a slice of them with
/// [`QueuePair::post_send_list`](crate::QueuePair::post_send_list), which
/// links them itself (the `next` field is not exposed).
#[repr(transparent)]
pub struct SendRequest<'a> {
    raw: sys::ibv_send_wr,
    borrows: PhantomData<&'a [Sge]>,
}

// SAFETY: a request is plain data plus pointers to an `&'a [Sge]` (plain
// data) and an `&'a AddressHandle` (Sync), which may be shared with and sent
// to other threads; `next` is only written by the post functions through
// `&mut`.
unsafe impl Send for SendRequest<'_> {}
// SAFETY: as above: `&SendRequest` only reads.
unsafe impl Sync for SendRequest<'_> {}

impl<'a> SendRequest<'a> {
    #[inline]
    fn with_opcode(wr_id: u64, opcode: sys::ibv_wr_opcode, sges: &'a [Sge]) -> Self {
        // SAFETY: the union is plain C data (integers and pointers), for
        // which all zero bytes are a valid value.
        Self::assemble(wr_id, opcode, sges, 0, 0, unsafe { std::mem::zeroed() })
    }

    /// A request with every field given (`imm_data` in network order),
    /// built as one value; the unions no constructor here uses are zero.
    #[inline(always)]
    fn assemble(
        wr_id: u64,
        opcode: sys::ibv_wr_opcode,
        sges: &'a [Sge],
        send_flags: u32,
        imm_data: u32,
        wr: sys::ibv_send_wr__bindgen_ty_2,
    ) -> Self {
        let (sg_list, num_sge) = sg_list(sges);
        SendRequest {
            raw: sys::ibv_send_wr {
                wr_id,
                next: ptr::null_mut(),
                sg_list,
                num_sge,
                opcode,
                send_flags,
                __bindgen_anon_1: sys::ibv_send_wr__bindgen_ty_1 { imm_data },
                wr,
                // SAFETY: C unions of integers and pointers (all zero bytes
                // are a valid value), unused by the requests built here
                // or set after (`bind_mw`).
                qp_type: unsafe { std::mem::zeroed() },
                // SAFETY: as above.
                __bindgen_anon_2: unsafe { std::mem::zeroed() },
            },
            borrows: PhantomData,
        }
    }

    /// A send (`remote` is `None`) or an RDMA write to `remote`'s (address,
    /// rkey), with immediate data if `imm` is given (host order), and the
    /// flags `flags`: the four data-path requests built in one step.
    ///
    /// What [`send`](Self::send), [`send_with_imm`](Self::send_with_imm),
    /// [`rdma_write`](Self::rdma_write) and
    /// [`rdma_write_with_imm`](Self::rdma_write_with_imm) build (they call
    /// it), with the flags set in the same step: a batch that builds its
    /// requests straight into its list stores each field once instead of
    /// building a request aside, setting flags and copying its 128 bytes.
    ///
    /// ```
    /// # use rdma_core::{SendFlags, SendRequest, Sge};
    /// let sges = [Sge::new(0x1000, 64, 0x42)];
    /// let wr = SendRequest::send_or_write(7, &sges, Some((0x2000, 0x99)), Some(5), SendFlags::INLINE);
    /// assert_eq!(wr.remote_addr(), Some(0x2000));
    /// assert_eq!(wr.imm_data(), Some(5));
    /// assert_eq!(wr.flags(), SendFlags::INLINE);
    /// ```
    #[inline(always)]
    pub fn send_or_write(
        wr_id: u64,
        sges: &'a [Sge],
        remote: Option<(u64, u32)>,
        imm: Option<u32>,
        flags: SendFlags,
    ) -> Self {
        use sys::ibv_wr_opcode as O;
        let opcode = match (remote.is_some(), imm.is_some()) {
            (false, false) => O::IBV_WR_SEND,
            (false, true) => O::IBV_WR_SEND_WITH_IMM,
            (true, false) => O::IBV_WR_RDMA_WRITE,
            (true, true) => O::IBV_WR_RDMA_WRITE_WITH_IMM,
        };
        // SAFETY: the union is plain C data (integers and pointers), for
        // which all zero bytes are a valid value (a send's is unused).
        let mut wr: sys::ibv_send_wr__bindgen_ty_2 = unsafe { std::mem::zeroed() };
        if let Some((remote_addr, rkey)) = remote {
            wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        }
        let imm = imm.unwrap_or(0).to_be();
        Self::assemble(wr_id, opcode, sges, flags.bits(), imm, wr)
    }

    /// A send of the bytes gathered from `sges` (`IBV_WR_SEND`).
    #[inline]
    pub fn send(wr_id: u64, sges: &'a [Sge]) -> Self {
        Self::send_or_write(wr_id, sges, None, None, SendFlags::empty())
    }

    /// A send carrying `imm` (host order; sent in network order) in the
    /// receiver's completion (`IBV_WR_SEND_WITH_IMM`).
    #[inline]
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge], imm: u32) -> Self {
        Self::send_or_write(wr_id, sges, None, Some(imm), SendFlags::empty())
    }

    /// An RDMA write of the bytes gathered from `sges` to `remote_addr` in
    /// the peer's region with `rkey` (`IBV_WR_RDMA_WRITE`).
    #[inline]
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        let remote = Some((remote_addr, rkey));
        Self::send_or_write(wr_id, sges, remote, None, SendFlags::empty())
    }

    /// An RDMA write that also consumes a receive at the peer, whose
    /// completion carries `imm` (`IBV_WR_RDMA_WRITE_WITH_IMM`).
    #[inline]
    pub fn rdma_write_with_imm(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Self {
        let remote = Some((remote_addr, rkey));
        Self::send_or_write(wr_id, sges, remote, Some(imm), SendFlags::empty())
    }

    /// An RDMA read from `remote_addr` in the peer's region with `rkey`,
    /// scattered into `sges` (`IBV_WR_RDMA_READ`).
    #[inline]
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        let mut wr = Self::with_opcode(wr_id, sys::ibv_wr_opcode::IBV_WR_RDMA_READ, sges);
        wr.raw.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        wr
    }

    /// An atomic compare-and-swap of the 8 aligned bytes at `remote_addr`:
    /// if they equal `compare` they become `swap`; the original value lands
    /// in `sges` (one 8-byte element) (`IBV_WR_ATOMIC_CMP_AND_SWP`).
    #[inline]
    pub fn atomic_cmp_swap(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        let mut wr = Self::with_opcode(wr_id, sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP, sges);
        wr.raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr,
            compare_add: compare,
            swap,
            rkey,
        };
        wr
    }

    /// An atomic fetch-and-add of `add` to the 8 aligned bytes at
    /// `remote_addr`; the original value lands in `sges` (one 8-byte
    /// element) (`IBV_WR_ATOMIC_FETCH_AND_ADD`).
    #[inline]
    pub fn atomic_fetch_add(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> Self {
        let mut wr =
            Self::with_opcode(wr_id, sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD, sges);
        wr.raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr,
            compare_add: add,
            swap: 0,
            rkey,
        };
        wr
    }

    /// A bind of the type 2 window `mw` over `addr..addr+length` of `mr`,
    /// giving it the key `rkey` (the window's previous key with a new tag:
    /// [`MemoryWindow::next_rkey`]) and the remote rights in `access`
    /// (`IBV_WR_BIND_MW`). Once it completes, the QP's peer may use `rkey`
    /// on that range.
    #[inline]
    pub fn bind_mw(
        wr_id: u64,
        mw: &'a MemoryWindow,
        rkey: u32,
        mr: &'a MemoryRegion,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> Self {
        let mut wr = Self::with_opcode(wr_id, sys::ibv_wr_opcode::IBV_WR_BIND_MW, &[]);
        wr.raw.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
            mw: mw.as_ptr(),
            rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr: mr.as_ptr(),
                addr,
                length,
                mw_access_flags: access.bits(),
            },
        };
        wr
    }

    /// An invalidation of the local key `rkey` (a type 2 window's): once it
    /// completes, remote accesses with it fail (`IBV_WR_LOCAL_INV`).
    #[inline]
    pub fn local_inv(wr_id: u64, rkey: u32) -> Self {
        let mut wr = Self::with_opcode(wr_id, sys::ibv_wr_opcode::IBV_WR_LOCAL_INV, &[]);
        wr.raw.__bindgen_anon_1.invalidate_rkey = rkey;
        wr
    }

    /// Addresses a send on a UD QP: the destination's address handle, QP
    /// number and QKey. (UD QPs only take sends; on an RDMA or atomic
    /// request this would overwrite the remote address.)
    #[inline]
    pub fn ud(mut self, ah: &'a AddressHandle, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.raw.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: ah.as_ptr(),
            remote_qpn,
            remote_qkey,
        };
        self
    }

    /// Adds [`SendFlags::SIGNALED`]: the request generates a completion.
    #[inline]
    pub fn signaled(self) -> Self {
        self.with_flag(SendFlags::SIGNALED)
    }
    /// Adds [`SendFlags::INLINE`]: the bytes are copied at post time.
    #[inline]
    pub fn inline(self) -> Self {
        self.with_flag(SendFlags::INLINE)
    }
    /// Adds [`SendFlags::SOLICITED`]: the receiver gets a solicited event.
    #[inline]
    pub fn solicited(self) -> Self {
        self.with_flag(SendFlags::SOLICITED)
    }
    /// Adds [`SendFlags::FENCE`]: waits for earlier reads and atomics.
    #[inline]
    pub fn fence(self) -> Self {
        self.with_flag(SendFlags::FENCE)
    }
    #[inline]
    fn with_flag(mut self, flag: SendFlags) -> Self {
        self.raw.send_flags |= flag.bits();
        self
    }

    /// The flags.
    #[inline]
    pub fn flags(&self) -> SendFlags {
        SendFlags::from_bits_retain(self.raw.send_flags)
    }
    /// Replaces the flags.
    #[inline]
    pub fn set_flags(&mut self, flags: SendFlags) {
        self.raw.send_flags = flags.bits();
    }

    /// The caller's identifier, returned in the completion.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }
    /// Replaces the identifier.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.raw.wr_id = wr_id;
    }

    /// The scatter/gather list.
    #[inline]
    pub fn sges(&self) -> &'a [Sge] {
        // SAFETY: `sg_list`/`num_sge` were set from an `&'a [Sge]`.
        unsafe { sges_of(self.raw.sg_list, self.raw.num_sge) }
    }
    /// Replaces the scatter/gather list.
    #[inline]
    pub fn set_sges(&mut self, sges: &'a [Sge]) {
        (self.raw.sg_list, self.raw.num_sge) = sg_list(sges);
    }

    /// The operation.
    #[inline]
    pub fn opcode(&self) -> SendOpcode {
        SendOpcode::from_raw(self.raw.opcode)
    }

    /// The immediate data (host order) of a `*_WITH_IMM` request.
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        match self.opcode() {
            SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm => {
                // SAFETY: the union holds `imm_data` for these opcodes (both
                // members are plain `u32`s).
                Some(u32::from_be(unsafe { self.raw.__bindgen_anon_1.imm_data }))
            }
            _ => None,
        }
    }

    /// Sets the immediate data (host order) of a `*_WITH_IMM` request and
    /// returns true; returns false and changes nothing for any other
    /// opcode. For a request built once and posted many times, each time
    /// with its own immediate.
    ///
    /// ```
    /// # use rdma_core::{SendRequest, Sge};
    /// let sges = [Sge::new(0x1000, 64, 0x42)];
    /// let mut wr = SendRequest::send_with_imm(1, &sges, 5);
    /// assert!(wr.set_imm_data(6));
    /// assert_eq!(wr.imm_data(), Some(6));
    /// let mut plain = SendRequest::send(2, &sges);
    /// assert!(!plain.set_imm_data(6));
    /// assert_eq!(plain.imm_data(), None);
    /// ```
    #[inline]
    pub fn set_imm_data(&mut self, imm: u32) -> bool {
        match self.opcode() {
            SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm => {
                self.raw.__bindgen_anon_1 = sys::ibv_send_wr__bindgen_ty_1 {
                    imm_data: imm.to_be(),
                };
                true
            }
            _ => false,
        }
    }

    /// The remote address of an RDMA or atomic request.
    #[inline]
    pub fn remote_addr(&self) -> Option<u64> {
        // SAFETY: the union member read is the one the opcode's constructor
        // wrote; all members are plain integers and pointers.
        unsafe {
            match self.opcode() {
                SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm | SendOpcode::RdmaRead => {
                    Some(self.raw.wr.rdma.remote_addr)
                }
                SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd => {
                    Some(self.raw.wr.atomic.remote_addr)
                }
                _ => None,
            }
        }
    }

    /// The remote key of an RDMA or atomic request.
    #[inline]
    pub fn rkey(&self) -> Option<u32> {
        // SAFETY: as in `remote_addr`.
        unsafe {
            match self.opcode() {
                SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm | SendOpcode::RdmaRead => {
                    Some(self.raw.wr.rdma.rkey)
                }
                SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd => {
                    Some(self.raw.wr.atomic.rkey)
                }
                _ => None,
            }
        }
    }

    /// The raw request (its `next` field is whatever the last post left).
    #[inline]
    pub fn as_raw(&self) -> &sys::ibv_send_wr {
        &self.raw
    }
}

impl fmt::Debug for SendRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendRequest")
            .field("wr_id", &self.wr_id())
            .field("opcode", &self.opcode())
            .field("flags", &self.flags())
            .field("sges", &self.sges())
            .field("remote_addr", &self.remote_addr())
            .field("rkey", &self.rkey())
            .field("imm_data", &self.imm_data())
            .finish_non_exhaustive()
    }
}

impl Linked for SendRequest<'_> {
    type Raw = sys::ibv_send_wr;
    #[inline]
    fn set_next(&mut self, next: *mut sys::ibv_send_wr) {
        self.raw.next = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use static_assertions::{assert_eq_align, assert_eq_size, assert_impl_all};

    assert_eq_size!(SendRequest<'static>, sys::ibv_send_wr);
    assert_eq_align!(SendRequest<'static>, sys::ibv_send_wr);
    assert_impl_all!(SendRequest<'static>: Send, Sync);

    const SGES: [Sge; 2] = [Sge::new(0x1000, 64, 0x11), Sge::new(0x2000, 8, 0x22)];

    #[test]
    fn send_and_flags() {
        let wr = SendRequest::send(5, &SGES)
            .signaled()
            .inline()
            .solicited()
            .fence();
        assert_eq!(wr.raw.opcode, sys::ibv_wr_opcode::IBV_WR_SEND);
        assert_eq!(wr.opcode(), SendOpcode::Send);
        assert_eq!(wr.wr_id(), 5);
        assert_eq!(wr.raw.num_sge, 2);
        assert_eq!(wr.raw.sg_list.cast_const(), SGES.as_ptr().cast());
        assert_eq!(wr.sges(), &SGES);
        assert!(wr.raw.next.is_null());
        let all = sys::ibv_send_flags::IBV_SEND_SIGNALED
            | sys::ibv_send_flags::IBV_SEND_INLINE
            | sys::ibv_send_flags::IBV_SEND_SOLICITED
            | sys::ibv_send_flags::IBV_SEND_FENCE;
        assert_eq!(wr.raw.send_flags, all.0);
        assert_eq!(wr.imm_data(), None);
        assert_eq!(wr.remote_addr(), None);
        let mut wr = SendRequest::send(1, &[]);
        assert_eq!(wr.raw.send_flags, 0);
        assert_eq!(wr.raw.num_sge, 0);
        wr.set_flags(SendFlags::SIGNALED);
        wr.set_wr_id(9);
        wr.set_sges(&SGES[1..]);
        assert_eq!(wr.raw.send_flags, sys::ibv_send_flags::IBV_SEND_SIGNALED.0);
        assert_eq!((wr.wr_id(), wr.raw.num_sge), (9, 1));
        assert_eq!(wr.sges(), &SGES[1..]);
    }

    #[test]
    fn immediate_data_is_network_order() {
        let wr = SendRequest::send_with_imm(1, &SGES, 0x0102_0304);
        assert_eq!(wr.raw.opcode, sys::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM);
        // SAFETY: `imm_data` is the member the constructor wrote.
        let raw = unsafe { wr.raw.__bindgen_anon_1.imm_data };
        assert_eq!(raw.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(wr.imm_data(), Some(0x0102_0304));
    }

    #[test]
    fn rdma_requests() {
        let w = SendRequest::rdma_write(2, &SGES, 0xaaaa_0000, 0x77);
        let wi = SendRequest::rdma_write_with_imm(3, &SGES, 0xbbbb_0000, 0x88, 42);
        let r = SendRequest::rdma_read(4, &SGES[..1], 0xcccc_0000, 0x99);
        for (wr, op, addr, rkey) in [
            (&w, sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, 0xaaaa_0000, 0x77),
            (
                &wi,
                sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                0xbbbb_0000,
                0x88,
            ),
            (&r, sys::ibv_wr_opcode::IBV_WR_RDMA_READ, 0xcccc_0000, 0x99),
        ] {
            assert_eq!(wr.raw.opcode, op);
            // SAFETY: `rdma` is the member the constructors wrote.
            let rdma = unsafe { wr.raw.wr.rdma };
            assert_eq!((rdma.remote_addr, rdma.rkey), (addr, rkey));
            assert_eq!((wr.remote_addr(), wr.rkey()), (Some(addr), Some(rkey)));
        }
        assert_eq!(wi.imm_data(), Some(42));
        assert_eq!(w.imm_data(), None);
        assert_eq!(r.raw.num_sge, 1);
    }

    #[test]
    fn window_requests() {
        let inv = SendRequest::local_inv(8, 0x1234_5601);
        assert_eq!(inv.raw.opcode, sys::ibv_wr_opcode::IBV_WR_LOCAL_INV);
        assert_eq!(inv.opcode(), SendOpcode::LocalInv);
        assert_eq!(inv.raw.num_sge, 0);
        // SAFETY: `invalidate_rkey` is the member the constructor wrote.
        let key = unsafe { inv.raw.__bindgen_anon_1.invalidate_rkey };
        assert_eq!(key, 0x1234_5601);
        assert_eq!((inv.remote_addr(), inv.rkey()), (None, None));
    }

    #[test]
    fn atomics() {
        let sge = [Sge::new(0x3000, 8, 0x33)];
        let cas = SendRequest::atomic_cmp_swap(6, &sge, 0x4000, 0x44, 10, 20);
        assert_eq!(
            cas.raw.opcode,
            sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
        );
        assert_eq!(cas.opcode(), SendOpcode::AtomicCmpSwap);
        // SAFETY: `atomic` is the member the constructor wrote.
        let a = unsafe { cas.raw.wr.atomic };
        assert_eq!(
            (a.remote_addr, a.rkey, a.compare_add, a.swap),
            (0x4000, 0x44, 10, 20)
        );
        let faa = SendRequest::atomic_fetch_add(7, &sge, 0x5000, 0x55, 3);
        assert_eq!(
            faa.raw.opcode,
            sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD
        );
        // SAFETY: as above.
        let a = unsafe { faa.raw.wr.atomic };
        assert_eq!((a.remote_addr, a.rkey, a.compare_add), (0x5000, 0x55, 3));
        assert_eq!((faa.remote_addr(), faa.rkey()), (Some(0x5000), Some(0x55)));
    }
}
