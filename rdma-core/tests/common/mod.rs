//! Helpers shared by the device tests of `rdma-core`.
//!
//! Device tests are `#[ignore]`d so that a plain `cargo test` lists them as
//! skipped; `cargo xtask test-rxe` runs them with `--include-ignored` where a
//! soft-RoCE device exists, with `RDMA_TEST_DEVICE=rxe0` and
//! `RDMA_TEST_REQUIRE_DEVICE=1`. Every wait is bounded ([`TIMEOUT`]): a test
//! fails with a message, it never hangs.
//!
//! Each test binary uses a subset of these helpers.
#![allow(dead_code)]

use rdma_core::sys;
use rdma_core::{
    AccessFlags, AddressVector, CompChannel, CompQueue, Context, GidEntry, MemoryRegion, Mtu,
    ProtectionDomain, QpType, QueuePair, RtrParams, RtsParams, Sge, WorkCompletion,
};
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};
use std::time::{Duration, Instant};

/// Longest a test waits for any completion or event before failing. Generous
/// because the CI runs rxe inside a VM under software emulation.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// The port every test uses (rxe devices have one).
pub(crate) const PORT: u8 = 1;

/// The device named by `RDMA_TEST_DEVICE`, if set.
pub(crate) fn device_name() -> Option<String> {
    std::env::var("RDMA_TEST_DEVICE")
        .ok()
        .filter(|name| !name.is_empty())
}

/// Opens the device named by `RDMA_TEST_DEVICE`, else the first device.
/// Panics with an explanation when there is none.
pub(crate) fn open_device() -> Context {
    let result = match device_name() {
        Some(name) => Context::open(&name),
        None => Context::open_first(),
    };
    result.unwrap_or_else(|err| {
        panic!(
            "this test needs an RDMA device ({err}).\n\
             Run `cargo xtask test-rxe` (boots a VM with a soft-RoCE device rxe0), or \
             on a kernel with rdma_rxe: `modprobe rdma_rxe; rdma link add rxe0 type rxe \
             netdev <if>; ulimit -l unlimited`, then `RDMA_TEST_DEVICE=rxe0 cargo test \
             -- --include-ignored`."
        )
    })
}

/// Bytes that differ with `seed` and with the position, without a short
/// period (so a shifted or truncated copy never matches by accident).
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..len)
        .map(|_| {
            // xorshift64*
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Asserts `got == want` byte for byte, reporting the first difference.
#[track_caller]
pub(crate) fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, want {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    }
}

/// Zero-initialised heap memory registered as one memory region.
///
/// The memory is only ever accessed through raw pointers (by the NIC and by
/// [`write`](Self::write)/[`read`](Self::read)), never through a Rust
/// reference that the NIC could invalidate. It is deregistered before it is
/// freed.
pub(crate) struct Buf {
    mr: ManuallyDrop<MemoryRegion>,
    mem: NonNull<[u8]>,
}

// SAFETY: the buffer is plain heap memory plus an MR (Send + Sync); tests
// move buffers into other threads to drop them there.
unsafe impl Send for Buf {}

impl Buf {
    /// `len` zero bytes registered in `pd` with `access`.
    pub(crate) fn new(pd: &ProtectionDomain, len: usize, access: AccessFlags) -> Buf {
        let mem = NonNull::from(Box::leak(vec![0u8; len].into_boxed_slice()));
        // SAFETY: the memory stays allocated until `drop`, which deregisters
        // first; it is only accessed through raw pointers while registered.
        let mr = unsafe { MemoryRegion::register(pd, mem.as_ptr().cast(), len, access) }
            .unwrap_or_else(|err| {
                // SAFETY: `mem` came from `Box::leak` and was not registered.
                drop(unsafe { Box::from_raw(mem.as_ptr()) });
                panic!("registering {len} bytes failed: {err} (is `ulimit -l` unlimited?)")
            });
        Buf {
            mr: ManuallyDrop::new(mr),
            mem,
        }
    }

    /// Local write, remote read and write: everything the tests need.
    pub(crate) fn full_access() -> AccessFlags {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
    }

    pub(crate) fn len(&self) -> usize {
        self.mem.len()
    }
    pub(crate) fn mr(&self) -> &MemoryRegion {
        &self.mr
    }
    pub(crate) fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
    pub(crate) fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
    /// The address of byte `offset` (as SGEs and remote peers use it).
    pub(crate) fn addr(&self, offset: usize) -> u64 {
        assert!(offset <= self.len());
        self.mem.as_ptr().cast::<u8>() as u64 + offset as u64
    }
    /// An SGE over `len` bytes from `offset`.
    pub(crate) fn sge(&self, offset: usize, len: usize) -> sys::ibv_sge {
        assert!(offset + len <= self.len(), "SGE beyond the buffer");
        sys::ibv_sge {
            addr: self.addr(offset),
            length: u32::try_from(len).unwrap(),
            lkey: self.lkey(),
        }
    }
    /// The typed SGE over `len` bytes from `offset`.
    pub(crate) fn entry(&self, offset: usize, len: usize) -> Sge {
        let raw = self.sge(offset, len);
        Sge::new(raw.addr, raw.length, raw.lkey)
    }
    /// Copies `data` in at `offset`. Only while the NIC is not using the range.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len());
        // SAFETY: in bounds; the tests call this only while no work request
        // names this range, so nothing else accesses it.
        unsafe {
            ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.mem.as_ptr().cast::<u8>().add(offset),
                data.len(),
            )
        }
    }
    /// Copies `len` bytes out from `offset`. Only after the completion of the
    /// work requests writing the range was polled.
    pub(crate) fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.len());
        let mut out = vec![0u8; len];
        // SAFETY: in bounds; see above.
        unsafe {
            ptr::copy_nonoverlapping(
                self.mem.as_ptr().cast::<u8>().add(offset),
                out.as_mut_ptr(),
                len,
            )
        }
        out
    }
    /// Sets every byte to `byte`.
    pub(crate) fn fill(&self, byte: u8) {
        self.write(0, &vec![byte; self.len()]);
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here; deregister before freeing.
        unsafe { ManuallyDrop::drop(&mut self.mr) };
        // SAFETY: `mem` came from `Box::leak` and the NIC can no longer use it.
        drop(unsafe { Box::from_raw(self.mem.as_ptr()) });
    }
}

/// A signaled send work request over `sges` (set the union members for RDMA
/// and UD afterwards).
pub(crate) fn send_wr(
    wr_id: u64,
    opcode: sys::ibv_wr_opcode,
    sges: &mut [sys::ibv_sge],
) -> sys::ibv_send_wr {
    sys::ibv_send_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: if sges.is_empty() {
            ptr::null_mut()
        } else {
            sges.as_mut_ptr()
        },
        num_sge: sges.len() as i32,
        opcode,
        send_flags: sys::ibv_send_flags::IBV_SEND_SIGNALED.0,
        ..Default::default()
    }
}

/// An RDMA work request (`opcode` write, write with immediate, or read) to
/// `remote_addr` with `rkey`.
pub(crate) fn rdma_wr(
    wr_id: u64,
    opcode: sys::ibv_wr_opcode,
    sges: &mut [sys::ibv_sge],
    remote_addr: u64,
    rkey: u32,
) -> sys::ibv_send_wr {
    let mut wr = send_wr(wr_id, opcode, sges);
    wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
    wr
}

/// Sets the immediate data (host order in, network order in the request).
pub(crate) fn set_imm(wr: &mut sys::ibv_send_wr, imm: u32) {
    wr.__bindgen_anon_1.imm_data = imm.to_be();
}

/// A receive work request over `sges`.
pub(crate) fn recv_wr(wr_id: u64, sges: &mut [sys::ibv_sge]) -> sys::ibv_recv_wr {
    sys::ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: if sges.is_empty() {
            ptr::null_mut()
        } else {
            sges.as_mut_ptr()
        },
        num_sge: sges.len() as i32,
    }
}

/// Polls `cq` until exactly `n` completions arrived, within [`TIMEOUT`].
///
/// Panics if the CQ returns more than `n` (completions must never outnumber
/// posts: rdma-core 44's rxe provider had such a bug in extended polling), or
/// if one more poll right after the `n`th finds another.
#[track_caller]
pub(crate) fn poll_exactly(cq: &CompQueue, n: usize, what: &str) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::with_capacity(n);
    let mut slots = [WorkCompletion::default(); 16];
    let mut idle_polls = 0u32;
    while got.len() < n {
        let polled = cq
            .poll(&mut slots)
            .unwrap_or_else(|err| panic!("{what}: {err}"));
        got.extend_from_slice(polled);
        assert!(
            got.len() <= n,
            "{what}: the CQ returned {} completions for {n} posted requests: {got:#?}",
            got.len()
        );
        if polled.is_empty() {
            if Instant::now() > deadline {
                panic!(
                    "{what}: only {} of {n} completions within {TIMEOUT:?}: {got:#?}",
                    got.len()
                );
            }
            idle_polls += 1;
            if idle_polls > 100 {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::thread::yield_now();
            }
        }
    }
    let extra = cq.poll(&mut slots).expect("poll");
    assert!(
        extra.is_empty(),
        "{what}: the CQ returned completions beyond the {n} posted: {extra:#?}"
    );
    got
}

/// Polls one completion and checks it succeeded.
#[track_caller]
pub(crate) fn poll_success(cq: &CompQueue, what: &str) -> WorkCompletion {
    let wc = poll_exactly(cq, 1, what)[0];
    if let Err(err) = wc.result() {
        panic!("{what}: {err}");
    }
    wc
}

/// Asserts that `cq` yields no completion for `wait`.
#[track_caller]
pub(crate) fn assert_no_completion(cq: &CompQueue, wait: Duration, what: &str) {
    let deadline = Instant::now() + wait;
    let mut slots = [WorkCompletion::default(); 4];
    while Instant::now() < deadline {
        let got = cq.poll(&mut slots).expect("poll");
        assert!(got.is_empty(), "{what}: unexpected completion {got:#?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An open device with a PD and the addressing its port needs.
pub(crate) struct TestDevice {
    pub(crate) ctx: Context,
    pub(crate) pd: ProtectionDomain,
    /// The RoCE v2 (IPv4-mapped if any) GID of [`PORT`].
    pub(crate) gid: GidEntry,
    /// min(active MTU, 1024).
    pub(crate) mtu: Mtu,
}

impl TestDevice {
    pub(crate) fn open() -> TestDevice {
        let ctx = open_device();
        let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
        let gid = ctx.preferred_gid(PORT).expect("preferred GID");
        let port = ctx.query_port(PORT).expect("ibv_query_port");
        let mtu = port.active_mtu().unwrap_or(Mtu::Mtu1024).min(Mtu::Mtu1024);
        TestDevice { ctx, pd, gid, mtu }
    }

    /// A CQ of 256 entries, with `channel` if given.
    pub(crate) fn cq(&self, channel: Option<&CompChannel>) -> CompQueue {
        self.ctx.create_cq(256, channel).expect("ibv_create_cq")
    }

    /// An RC QP completing to `cq`.
    pub(crate) fn rc_qp(&self, cq: &CompQueue) -> QueuePair {
        QueuePair::builder(&self.pd, QpType::Rc, cq, cq)
            .build()
            .expect("ibv_create_qp(RC)")
    }

    /// The address of this device's own port (loopback).
    pub(crate) fn av(&self) -> AddressVector {
        AddressVector::global(PORT, self.gid.gid, self.gid.index as u8)
    }

    /// Connects two RC QPs of this device to each other (RESET → RTS).
    pub(crate) fn connect(&self, a: &QueuePair, b: &QueuePair) {
        self.connect_with(a, b, |_| {});
    }

    /// As [`connect`](Self::connect), with `tweak` applied to both QPs'
    /// RTR → RTS parameters (timeouts, retry counts).
    pub(crate) fn connect_with(
        &self,
        a: &QueuePair,
        b: &QueuePair,
        tweak: impl Fn(&mut RtsParams),
    ) {
        self.connect_with_access(a, b, Buf::full_access(), tweak);
    }

    /// As [`connect_with`](Self::connect_with), granting peers `access`.
    pub(crate) fn connect_with_access(
        &self,
        a: &QueuePair,
        b: &QueuePair,
        access: AccessFlags,
        tweak: impl Fn(&mut RtsParams),
    ) {
        let (psn_a, psn_b) = (0x1234, 0x5678);
        for (qp, peer, rq_psn, sq_psn) in [(a, b, psn_b, psn_a), (b, a, psn_a, psn_b)] {
            qp.to_init(PORT, access).expect("RESET -> INIT");
            let mut rtr = RtrParams::new(peer.qp_num(), rq_psn, self.av());
            rtr.path_mtu = self.mtu;
            qp.to_rtr(&rtr).expect("INIT -> RTR");
            let mut rts = RtsParams::new(sq_psn);
            tweak(&mut rts);
            qp.to_rts(&rts).expect("RTR -> RTS");
        }
    }
}

/// Two connected RC QPs on one device, each with its own CQ.
pub(crate) struct RcPair {
    pub(crate) dev: TestDevice,
    pub(crate) cq_a: CompQueue,
    pub(crate) cq_b: CompQueue,
    pub(crate) a: QueuePair,
    pub(crate) b: QueuePair,
}

impl RcPair {
    pub(crate) fn new() -> RcPair {
        Self::build(TestDevice::open(), None)
    }

    /// As [`new`](Self::new), with B's CQ reporting events to a new
    /// completion channel when `channel` is true.
    pub(crate) fn with_channel(channel: bool) -> (RcPair, Option<CompChannel>) {
        let dev = TestDevice::open();
        let ch = channel.then(|| dev.ctx.create_comp_channel().expect("comp channel"));
        (Self::build(dev, ch.as_ref()), ch)
    }

    /// As [`new`](Self::new), with `tweak` applied to the RTS parameters.
    pub(crate) fn with_rts(tweak: impl Fn(&mut RtsParams)) -> RcPair {
        Self::build_with(TestDevice::open(), None, tweak)
    }

    fn build(dev: TestDevice, ch: Option<&CompChannel>) -> RcPair {
        Self::build_with(dev, ch, |_| {})
    }

    fn build_with(
        dev: TestDevice,
        ch: Option<&CompChannel>,
        tweak: impl Fn(&mut RtsParams),
    ) -> RcPair {
        let cq_a = dev.cq(None);
        let cq_b = dev.cq(ch);
        let a = dev.rc_qp(&cq_a);
        let b = dev.rc_qp(&cq_b);
        dev.connect_with(&a, &b, tweak);
        RcPair {
            dev,
            cq_a,
            cq_b,
            a,
            b,
        }
    }

    /// A buffer of `len` bytes with full access, in the pair's PD.
    pub(crate) fn buf(&self, len: usize) -> Buf {
        Buf::new(&self.dev.pd, len, Buf::full_access())
    }
}
