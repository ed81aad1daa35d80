//! Shared helpers of the device tests: the device, connected channel pairs,
//! registered buffers, deterministic byte patterns and the end-of-test
//! bookkeeping checks.
//!
//! Every device test is `#[ignore]`d so that a plain `cargo test` lists it as
//! ignored instead of passing silently; `cargo xtask test-rxe` runs the test
//! binaries with `--include-ignored` where an rxe device exists. The device is
//! named by `RDMA_TEST_DEVICE` (default `rxe0`).

// Each test binary uses a different subset of these helpers.
#![allow(dead_code, unreachable_pub)]

pub mod counting;
#[cfg(feature = "fault-injection")]
pub mod faults;
pub mod peer;
use rdma_safe::cm::{CmOptions, Listener};
use rdma_safe::error::{Error, Operation};
use rdma_safe::{
    memory::StableBuffer, Channel, ChannelBuilder, GatherElement, MemoryRegion, ProtectionDomain,
    RegisteredBuffer, ScatterElement,
};
use std::ops::Range;
use std::time::Duration;

/// Byte that unwritten parts of target buffers hold.
pub const FILL: u8 = 0xEE;
/// Bytes past the end of every transfer that must stay untouched.
pub const CANARY: usize = 64;
/// Sizes every operation is tried with.
pub const SIZES: [usize; 6] = [0, 1, 7, 4096, 65536 + 13, 4 << 20];

/// The device the tests run on.
pub fn device_name() -> String {
    std::env::var("RDMA_TEST_DEVICE").unwrap_or_else(|_| "rxe0".to_owned())
}

/// Opens the test device and allocates a protection domain, or panics with a
/// message saying how to run these tests.
pub fn pd() -> ProtectionDomain {
    let name = device_name();
    ProtectionDomain::open(&name).unwrap_or_else(|e| {
        panic!(
            "cannot open RDMA device {name:?}: {e}\n\
             These tests need an RDMA device: run `cargo xtask test-rxe` (boots a VM with \
             soft-RoCE when the host has none), or set RDMA_TEST_DEVICE to an existing device \
             (see `ibv_devices`)."
        )
    })
}

/// Two channels of `pd` connected to each other.
pub fn pair(pd: &ProtectionDomain) -> (Channel, Channel) {
    pair_with(pd, |b| b)
}

/// Two channels connected to each other, both built with `config` applied.
pub fn pair_with<'pd>(
    pd: &'pd ProtectionDomain,
    config: impl Fn(ChannelBuilder<'pd>) -> ChannelBuilder<'pd>,
) -> (Channel, Channel) {
    let mut a = config(pd.channel_builder())
        .build()
        .expect("create channel a");
    let mut b = config(pd.channel_builder())
        .build()
        .expect("create channel b");
    Channel::connect_pair(&mut a, &mut b).expect("connect the pair");
    (a, b)
}

/// A shared receive queue of `slots` slots of `size` bytes, refilled only
/// by hand (`refill`), and a pair connected by [`srq_attached_pair`].
pub fn srq_pair(
    pd: &ProtectionDomain,
    slots: u32,
    size: usize,
) -> (rdma_safe::SharedReceiveQueue, Channel, Channel) {
    let mut srq =
        rdma_safe::SharedReceiveQueue::new(pd, slots, size).expect("shared receive queue");
    srq.set_refill_batch(usize::MAX);
    let (a, b) = srq_attached_pair(pd, &srq);
    (srq, a, b)
}

/// Two connected channels of which the second receives through `srq`.
pub fn srq_attached_pair(
    pd: &ProtectionDomain,
    srq: &rdma_safe::SharedReceiveQueue,
) -> (Channel, Channel) {
    let mut a = pd.create_channel().expect("sender");
    let mut b = pd
        .channel_builder()
        .shared_receive_queue(srq)
        .build()
        .expect("receiver on the shared queue");
    Channel::connect_pair(&mut a, &mut b).expect("connect the pair");
    (a, b)
}

/// Like [`pair`] with a short timeout on both channels.
pub fn pair_with_timeout(pd: &ProtectionDomain, timeout: Duration) -> (Channel, Channel) {
    pair_with(pd, |b| b.timeout(timeout))
}

/// Registers `buf` for local access; the registration owns (or, for a
/// `&mut [u8]`, exclusively borrows) it until dropped or `into_inner`.
/// `buf` must be non-empty.
pub fn registered<B: StableBuffer>(pd: &ProtectionDomain, buf: B) -> RegisteredBuffer<B> {
    let len = buf.len();
    RegisteredBuffer::register(pd, buf)
        .unwrap_or_else(|e| panic!("register {len} bytes for local access: {e}"))
}

/// Registers `buf` with remote read and write access.
///
/// # Safety
/// `buf` must stay allocated while the region lives (declare the buffer
/// before the region, so that the region is dropped first), and Rust must not
/// access it while a peer may read or write it.
pub unsafe fn shared_mr(pd: &ProtectionDomain, buf: &mut [u8]) -> MemoryRegion {
    // SAFETY: forwarded to the caller.
    unsafe { MemoryRegion::register_shared_mr(pd, buf.as_mut_ptr(), buf.len()) }
        .unwrap_or_else(|e| panic!("register {} bytes for remote access: {e}", buf.len()))
}

/// A gather list over `range` of `buf`: empty for an empty range (a
/// zero-byte operation), otherwise one element (which panics if the range is
/// outside the buffer).
pub fn gather<B: StableBuffer>(
    buf: &RegisteredBuffer<B>,
    range: Range<usize>,
) -> Vec<GatherElement<'_>> {
    if range.is_empty() {
        Vec::new()
    } else {
        vec![buf.gather(range)]
    }
}

/// A scatter list over `range` of `buf`: empty for an empty range, otherwise
/// one element.
pub fn scatter<B: StableBuffer>(
    buf: &mut RegisteredBuffer<B>,
    range: Range<usize>,
) -> Vec<ScatterElement<'_>> {
    if range.is_empty() {
        Vec::new()
    } else {
        vec![buf.scatter(range)]
    }
}

/// One single-element scatter list per `chunk`-byte piece of `buf`'s
/// memory (the last piece may be shorter).
pub fn scatter_chunks<B: StableBuffer>(
    buf: &mut RegisteredBuffer<B>,
    chunk: usize,
) -> Vec<[ScatterElement<'_>; 1]> {
    let (mr, bytes) = buf.split_mut();
    bytes
        .chunks_mut(chunk)
        .map(|c| [mr.scatter_element(c)])
        .collect()
}

/// A 64-bit seed from a test's tag and a size, so that every test and size
/// moves different bytes.
pub fn seed(tag: &str, n: usize) -> u64 {
    // FNV-1a.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes().chain((n as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `len` deterministic pseudo-random bytes (splitmix64 of `seed`). Never
/// contains long runs of [`FILL`], so a transfer that did not happen shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A deterministic permutation of `0..n`.
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let r = pattern(seed, n * 8);
    for i in (1..n).rev() {
        let x = u64::from_le_bytes(r[i * 8..i * 8 + 8].try_into().unwrap());
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Asserts `actual == expected` byte for byte, reporting the first
/// difference instead of dumping megabytes.
#[track_caller]
pub fn assert_bytes(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    if let Some(i) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, expected {:#04x}",
            actual.len(),
            actual[i],
            expected[i]
        );
    }
}

/// Asserts every byte of `data` is [`FILL`] (nothing was written there).
#[track_caller]
pub fn assert_untouched(data: &[u8], what: &str) {
    if let Some(i) = data.iter().position(|&b| b != FILL) {
        panic!("{what}: byte {i} was overwritten ({:#04x})", data[i]);
    }
}

/// The end-of-test bookkeeping check: nothing outstanding, completions never
/// outnumber posts, and — since nothing is outstanding — every post got
/// exactly one completion (a flushed one counts).
#[track_caller]
pub fn assert_quiescent(ch: &Channel, name: &str) {
    assert_eq!(ch.outstanding(), 0, "channel {name}: outstanding work");
    let (posted, completed) = ch.totals();
    assert!(
        completed <= posted,
        "channel {name}: {completed} completions for {posted} posts"
    );
    assert_eq!(
        completed, posted,
        "channel {name}: nothing outstanding, so every post has completed"
    );
}

/// QP numbers the device currently has, from `rdma res show qp` (iproute2),
/// or `None` if the tool cannot be run here. Lets a test prove that a
/// channel's queue pair was destroyed.
pub fn live_qp_numbers() -> Option<Vec<u32>> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show", "qp"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut qpns = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        while let Some(w) = words.next() {
            if w == "lqpn" {
                if let Some(n) = words.next().and_then(|n| n.parse().ok()) {
                    qpns.push(n);
                }
            }
        }
    }
    Some(qpns)
}

/// [`live_qp_numbers`], or a visible skip (a failure where the test
/// environment promises a device, `RDMA_TEST_REQUIRE_DEVICE=1`).
pub fn live_qp_numbers_or_skip(test: &str) -> Option<Vec<u32>> {
    let qpns = live_qp_numbers();
    if qpns.is_none() {
        let msg = format!("{test}: `rdma res show qp` (iproute2) cannot run here");
        if std::env::var("RDMA_TEST_REQUIRE_DEVICE").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED {msg}");
    }
    qpns
}

/// A pool buffer holding `data`, frozen into a shared slice.
pub fn frozen(pool: &rdma_safe::BufferPool, data: &[u8]) -> rdma_safe::pool::PoolBytes {
    let mut b = pool.try_alloc().expect("a free buffer");
    b.fill_from(data);
    b.freeze()
}

/// Nothing in flight or unclaimed on `ch`, every buffer of `pool` back.
#[track_caller]
pub fn assert_whole(ch: &rdma_safe::SharedChannel, pool: &rdma_safe::BufferPool, what: &str) {
    let (_, in_flight, _, slots) = ch.counters();
    assert_eq!(
        (in_flight, slots),
        (0, 0),
        "{what}: work left in the engine"
    );
    assert_eq!(pool.available(), pool.capacity(), "{what}: buffers missing");
}

/// Every buffer of `pool` back. After the last handle of a channel whose
/// completions a driver task reaps is dropped, that task may still be in a
/// round holding the engine: the engine drains and gives its buffers back
/// when the round ends. So this waits, boundedly (a hang or a leak fails).
#[track_caller]
pub fn assert_pool_full(pool: &rdma_safe::BufferPool, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pool.available() != pool.capacity() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(pool.available(), pool.capacity(), "{what}: buffers missing");
}

/// Nothing in flight or unclaimed on `ch`.
#[track_caller]
pub fn assert_idle(ch: &rdma_safe::SharedChannel, what: &str) {
    let (_, in_flight, _, slots) = ch.counters();
    assert_eq!(
        (in_flight, slots),
        (0, 0),
        "{what}: work left in the engine"
    );
}

/// The address of the test device's RoCE interface (`RXE_IPV4`).
pub fn device_ip() -> String {
    std::env::var("RXE_IPV4").unwrap_or_else(|_| "10.0.2.15".to_owned())
}

/// A channel accepted by a listener on the test device (with `server`'s
/// options, answering with `accept_data`) and the client channel that
/// connected to it (with `client`'s, sending `connect_data`).
pub fn cm_pair(
    pd: &ProtectionDomain,
    server: &CmOptions,
    client: &CmOptions,
    connect_data: &[u8],
    accept_data: &[u8],
) -> (Channel, Channel) {
    let listener = Listener::bind_in(pd, format!("{}:0", device_ip()), server).expect("listen");
    let addr = listener.local_addr().expect("bound");
    std::thread::scope(|t| {
        let accepted = t.spawn(|| {
            listener
                .incoming()
                .expect("a connect request")
                .accept(accept_data)
                .expect("accept")
        });
        let client = Channel::connect_in(pd, addr, connect_data, client).expect("connect");
        (accepted.join().expect("the accepting thread"), client)
    })
}

/// A receive stream's next item with its clean end said as every other
/// API says a departed peer: `None` is `Error::PeerDisconnected`.
pub fn ended_as_gone<T>(item: Option<T>) -> Result<T, Error> {
    item.ok_or(Error::PeerDisconnected {
        operation: Operation::Receive,
    })
}
