//! Registrations that own their memory (issue 10): every kind of
//! [`RegisteredBuffer`] carries sends, receives, RDMA writes and reads byte
//! for byte; `into_inner` gives the memory back with what was received;
//! out-of-range elements and empty buffers are errors; a batch with a member
//! forced inline above the queue pair's limit is refused before anything is
//! posted; and [`rdma_safe::Error`] chains `?` across the specific error
//! types.

mod common;

use common::*;
use rdma_safe::{
    channel::Endpoint, error::AllocError, error::Operation, error::RemoteRegionError,
    error::ScatterGatherElementError, error::VerbsError, memory::AlignedBuffer,
    memory::StableBuffer, work::WcOpcode, Channel, Error, ProtectionDomain, ReadWorkRequest,
    ReceiveWorkRequest, RegisteredBuffer, RemoteMemoryRegion, ScopeError, SendWorkRequest,
    WriteWorkRequest,
};
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Length of the buffers moved between kinds: above glibc's mmap threshold
/// (128 KiB), where a growing `Vec` would be `mremap`ed, and not a multiple
/// of a page.
const LEN: usize = 200_003;

/// A page-aligned buffer of `len` bytes holding `bytes`, then `FILL`.
fn aligned(bytes: &[u8], len: usize) -> AlignedBuffer {
    let mut buf = AlignedBuffer::new(len).expect("allocate an aligned buffer");
    buf.fill(FILL);
    buf[..bytes.len()].copy_from_slice(bytes);
    buf
}

/// `a` sends all of `tx` into `rx` (at least `CANARY` bytes longer, filled
/// with `FILL`) at `b`; checks both completions, the data byte for byte and
/// that nothing past the message was written.
fn send_between<S: StableBuffer, R: StableBuffer>(
    a: &mut Channel,
    b: &mut Channel,
    tx: &RegisteredBuffer<S>,
    rx: &mut RegisteredBuffer<R>,
    what: &str,
) {
    let n = tx.len();
    assert!(rx.len() >= n + CANARY, "{what}: target too short");
    let (sent, got) = b
        .scope(|s| {
            let mut scatter = [rx.scatter(..)];
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            let sent = a.send(SendWorkRequest::new(&[tx.gather(..)]).with_immediate(n as u32))?;
            Ok::<_, Error>((sent, recv.wait()?))
        })
        .unwrap_or_else(|e| panic!("{what}: send/receive failed: {e}"));
    assert_eq!(sent.bytes(), n, "{what}: bytes sent");
    assert_eq!(got.bytes(), n, "{what}: bytes received");
    assert_eq!(got.opcode(), WcOpcode::Recv, "{what}");
    assert_eq!(got.immediate(), Some(n as u32), "{what}: immediate");
    assert_bytes(&rx[..n], tx, what);
    assert_untouched(&rx[n..], &format!("{what}: past the message"));
}

/// `a` writes all of `src` into a fresh exposed buffer, then reads it back
/// into `dst` (at least `CANARY` bytes longer, filled with `FILL`); checks
/// the exposed buffer and `dst` byte for byte.
fn write_read_between<S: StableBuffer, D: StableBuffer>(
    a: &mut Channel,
    src: &RegisteredBuffer<S>,
    dst: &mut RegisteredBuffer<D>,
    what: &str,
) {
    let n = src.len();
    assert!(dst.len() >= n + CANARY, "{what}: target too short");
    let pd = a.pd().clone();
    let mut exposed = vec![FILL; n + CANARY];
    // SAFETY: `exposed` outlives `exposed_mr` (dropped below, before
    // `exposed` is read) and Rust does not touch it while the write and the
    // read are in flight.
    let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
    let remote = exposed_mr.remote();
    let written = a
        .write(WriteWorkRequest::new(&[src.gather(..)], remote))
        .unwrap_or_else(|e| panic!("{what}: write failed: {e}"));
    assert_eq!(written.bytes(), n, "{what}: bytes written");
    assert_eq!(written.opcode(), WcOpcode::RdmaWrite, "{what}");
    let read = a
        .read(ReadWorkRequest::new(
            &mut [dst.scatter(..n)],
            remote.slice(0, n as u64).expect("in bounds"),
        ))
        .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
    assert_eq!(read.bytes(), n, "{what}: bytes read");
    assert_eq!(read.opcode(), WcOpcode::RdmaRead, "{what}");
    drop(exposed_mr);
    assert_bytes(&exposed[..n], src, &format!("{what}: written"));
    assert_untouched(&exposed[n..], &format!("{what}: past the write"));
    assert_bytes(&dst[..n], src, &format!("{what}: read back"));
    assert_untouched(&dst[n..], &format!("{what}: past the read"));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_receive_with_every_buffer_kind() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let data = |tag: &str| pattern(seed(tag, LEN), LEN);

    // Every kind is a source once and a target once.
    let mut borrowed_target = vec![FILL; LEN + CANARY];
    {
        let tx = registered(&pd, data("kind vec"));
        let mut rx = registered(&pd, vec![FILL; LEN + CANARY].into_boxed_slice());
        send_between(&mut a, &mut b, &tx, &mut rx, "Vec -> Box<[u8]>");

        let tx = registered(&pd, data("kind box").into_boxed_slice());
        let mut rx = RegisteredBuffer::new(&pd, LEN + CANARY).expect("RegisteredBuffer::new");
        rx.fill(FILL);
        send_between(&mut a, &mut b, &tx, &mut rx, "Box<[u8]> -> AlignedBuffer");

        let tx = registered(&pd, aligned(&data("kind aligned"), LEN));
        let mut rx = registered(&pd, &mut borrowed_target[..]);
        send_between(&mut a, &mut b, &tx, &mut rx, "AlignedBuffer -> &mut [u8]");
    }
    // The borrowed target is ours again, holding the message.
    assert_bytes(
        &borrowed_target[..LEN],
        &data("kind aligned"),
        "borrowed target after its registration",
    );
    assert_untouched(&borrowed_target[LEN..], "borrowed target past the message");

    let mut borrowed_source = data("kind borrowed");
    let tx = registered(&pd, &mut borrowed_source[..]);
    let mut rx = registered(&pd, vec![FILL; LEN + CANARY]);
    send_between(&mut a, &mut b, &tx, &mut rx, "&mut [u8] -> Vec");
    drop(tx);
    assert_bytes(&borrowed_source, &data("kind borrowed"), "source unchanged");

    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_and_read_with_every_buffer_kind() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let data = |tag: &str| pattern(seed(tag, LEN), LEN);

    let src = registered(&pd, data("write vec"));
    let mut dst = registered(&pd, vec![FILL; LEN + CANARY].into_boxed_slice());
    write_read_between(&mut a, &src, &mut dst, "Vec -> Box<[u8]>");

    let src = registered(&pd, data("write box").into_boxed_slice());
    let mut dst = registered(&pd, aligned(&[], LEN + CANARY));
    write_read_between(&mut a, &src, &mut dst, "Box<[u8]> -> AlignedBuffer");

    let mut borrowed_target = vec![FILL; LEN + CANARY];
    let src = registered(&pd, aligned(&data("write aligned"), LEN));
    let mut dst = registered(&pd, &mut borrowed_target[..]);
    write_read_between(&mut a, &src, &mut dst, "AlignedBuffer -> &mut [u8]");
    drop(dst);
    assert_bytes(
        &borrowed_target[..LEN],
        &data("write aligned"),
        "borrowed read target after its registration",
    );
    assert_untouched(
        &borrowed_target[LEN..],
        "borrowed read target past the read",
    );

    let mut borrowed_source = data("write borrowed");
    let src = registered(&pd, &mut borrowed_source[..]);
    let mut dst = registered(&pd, vec![FILL; LEN + CANARY]);
    write_read_between(&mut a, &src, &mut dst, "&mut [u8] -> Vec");

    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

/// Receives a `LEN`-byte message from `a` into `buf` (registered here) at
/// `b`, then deregisters it and returns it.
fn receive_into<B: StableBuffer>(
    pd: &ProtectionDomain,
    a: &mut Channel,
    b: &mut Channel,
    buf: B,
    msg: &[u8],
) -> B {
    let tx = registered(pd, msg.to_vec());
    let mut rx = registered(pd, buf);
    let got = b
        .scope(|s| {
            let mut scatter = [rx.scatter(..)];
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
            recv.wait()
        })
        .expect("send/receive");
    assert_eq!(got.bytes(), msg.len());
    rx.into_inner()
        .expect("deregister and give the buffer back")
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn into_inner_gives_back_the_received_bytes() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let msg = |tag: &str| pattern(seed(tag, LEN), LEN);

    let v = receive_into(
        &pd,
        &mut a,
        &mut b,
        vec![FILL; LEN + CANARY],
        &msg("back vec"),
    );
    assert_eq!(v.len(), LEN + CANARY, "the Vec keeps its length");
    assert_bytes(&v[..LEN], &msg("back vec"), "Vec from into_inner");
    assert_untouched(&v[LEN..], "Vec past the message");
    // It is an ordinary Vec again: it may grow (and move) now.
    let mut v = v;
    v.reserve_exact(1 << 20);
    assert_bytes(&v[..LEN], &msg("back vec"), "Vec after growing");

    let boxed = receive_into(
        &pd,
        &mut a,
        &mut b,
        vec![FILL; LEN + CANARY].into_boxed_slice(),
        &msg("back box"),
    );
    assert_bytes(&boxed[..LEN], &msg("back box"), "Box from into_inner");
    assert_untouched(&boxed[LEN..], "Box past the message");

    let al = receive_into(
        &pd,
        &mut a,
        &mut b,
        aligned(&[], LEN + CANARY),
        &msg("back aligned"),
    );
    assert_eq!(al.alignment(), 4096);
    assert_eq!(al.as_ptr() as usize % 4096, 0);
    assert_bytes(
        &al[..LEN],
        &msg("back aligned"),
        "AlignedBuffer from into_inner",
    );
    assert_untouched(&al[LEN..], "AlignedBuffer past the message");

    let mut storage = vec![FILL; LEN + CANARY];
    let slice = receive_into(&pd, &mut a, &mut b, &mut storage[..], &msg("back slice"));
    assert_eq!(slice.len(), LEN + CANARY);
    slice[0] ^= 0xff; // the exclusive borrow is back in our hands
    slice[0] ^= 0xff;
    assert_bytes(&storage[..LEN], &msg("back slice"), "borrowed storage");
    assert_untouched(&storage[LEN..], "borrowed storage past the message");

    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn new_buffer_is_zeroed_page_aligned_and_exactly_registered() {
    let pd = pd();
    let buf = RegisteredBuffer::new(&pd, 10_000).expect("RegisteredBuffer::new");
    assert_eq!(buf.len(), 10_000);
    assert_eq!(buf.as_ptr() as usize % 4096, 0, "page-aligned");
    assert!(buf.iter().all(|&b| b == 0), "zeroed");
    let mr = buf.region();
    assert_eq!(mr.address(), buf.as_ptr() as usize);
    assert_eq!(mr.length(), 10_000);
    assert_eq!(
        mr.access(),
        rdma_safe::memory::AccessFlags::LOCAL_WRITE,
        "local access only"
    );
    let mut v = vec![7u8; 300];
    let (ptr, len) = (v.as_ptr() as usize, v.len());
    let mut borrowed = registered(&pd, &mut v[100..]);
    assert_eq!(borrowed.region().address(), ptr + 100);
    assert_eq!(borrowed.region().length(), len - 100);
    assert_eq!(borrowed.gather(..).len(), 200);
    let (mr, bytes) = borrowed.split_mut();
    let (head, tail) = bytes.split_at_mut(50);
    assert_eq!(mr.scatter_element_checked(head).unwrap().len(), 50);
    assert_eq!(mr.scatter_element_checked(tail).unwrap().len(), 150);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn out_of_range_elements_are_errors_or_panics() {
    let pd = pd();
    let mut buf = registered(&pd, vec![0u8; 100]);
    let oob = ScatterGatherElementError::OutOfBounds { len: 100 };
    let (start, end) = (60, 40); // a reversed range
    for (range, what) in [
        ((Bound::Included(0), Bound::Excluded(101)), "..101"),
        ((Bound::Included(0), Bound::Included(100)), "..=100"),
        ((Bound::Included(101), Bound::Unbounded), "101.."),
        ((Bound::Included(start), Bound::Excluded(end)), "60..40"),
        (
            (Bound::Excluded(usize::MAX), Bound::Unbounded),
            "after usize::MAX",
        ),
        ((Bound::Included(0), Bound::Included(usize::MAX)), "..=MAX"),
    ] {
        // The buffer's forms panic, as slice indexing does...
        for (which, result) in [
            (
                "gather",
                catch_unwind(AssertUnwindSafe(|| {
                    let _ = buf.gather(range);
                })),
            ),
            (
                "scatter",
                catch_unwind(AssertUnwindSafe(|| {
                    let _ = buf.scatter(range);
                })),
            ),
        ] {
            let payload = result.expect_err("an out-of-range element must panic");
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            assert!(msg.contains(&oob.to_string()), "{which} {what}: {msg:?}");
        }
    }
    assert!(oob.to_string().contains("100 bytes"), "{oob}");
    // ...and the region's checked forms (the seeds') are the fallible way,
    // for ranges that come from input: `?` turns theirs into the crate's
    // error.
    let inside = 10..20;
    let as_error = || -> rdma_safe::Result<()> {
        let (mr, bytes) = (buf.region(), &buf[..]);
        mr.gather_element_checked(&bytes[inside.clone()])?;
        let elsewhere = [0u8; 8];
        mr.gather_element_checked(&elsewhere)?;
        Ok(())
    };
    assert!(matches!(
        as_error(),
        Err(rdma_safe::Error::Element(
            ScatterGatherElementError::OutsideMemoryRegion { .. }
        ))
    ));
    // In range, including empty ranges at both ends.
    assert_eq!(buf.gather(..).len(), 100);
    assert_eq!(buf.gather(10..=19).len(), 10);
    assert!(buf.gather(100..).is_empty());
    assert!(buf.scatter(..0).is_empty());
    assert_eq!(buf.scatter(99..).len(), 1);

    // The panicking forms panic like slice indexing, naming the call.
    for (which, result) in [
        (
            "gather",
            catch_unwind(AssertUnwindSafe(|| {
                let _ = buf.gather(50..101);
            })),
        ),
        (
            "scatter",
            catch_unwind(AssertUnwindSafe(|| {
                let _ = buf.scatter(101..);
            })),
        ),
    ] {
        let payload = result.expect_err("an out-of-range element must panic");
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            msg.contains(&format!("RegisteredBuffer::{which}")) && msg.contains("100 bytes"),
            "panic message: {msg:?}"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn registering_an_empty_buffer_is_an_error() {
    let pd = pd();
    #[track_caller]
    fn assert_invalid<B: std::fmt::Debug>(r: rdma_safe::Result<B>, what: &str) {
        match r {
            Err(Error::Verbs(VerbsError::InvalidArgument(msg))) => {
                assert!(msg.contains("empty"), "{what}: {msg}")
            }
            other => panic!("{what}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert_invalid(
        RegisteredBuffer::register(&pd, Vec::<u8>::new()),
        "empty Vec",
    );
    assert_invalid(
        RegisteredBuffer::register(&pd, Vec::<u8>::with_capacity(4096)),
        "empty Vec with capacity",
    );
    assert_invalid(
        RegisteredBuffer::register(&pd, Vec::<u8>::new().into_boxed_slice()),
        "empty Box<[u8]>",
    );
    let mut v = [1u8; 16];
    assert_invalid(
        RegisteredBuffer::register(&pd, &mut v[16..]),
        "empty &mut [u8]",
    );
    match RegisteredBuffer::new(&pd, 0) {
        Err(rdma_safe::Error::Alloc(AllocError::InvalidLayout { len: 0, .. })) => {}
        other => panic!("expected an allocation error for 0 bytes, got {other:?}"),
    }
    // Registration still works after the refusals.
    assert_eq!(registered(&pd, &mut v[15..]).len(), 1);
}

/// Which member of a batch is forced inline above the limit.
const OVERSIZED: usize = 2;
/// Members of the batches below.
const MEMBERS: usize = 4;
/// Bytes each regular member carries.
const PIECE: usize = 48;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_batch_with_an_oversized_inline_member_posts_nothing() {
    let pd = pd();
    let (mut a, mut b) = pair_with(&pd, |c| c.max_inline_data(64));
    let limit = a.capabilities().max_inline_data as usize;
    let src = registered(&pd, pattern(seed("inline batch send", limit), limit + 1));
    let slot = limit + 1 + CANARY;
    let mut dst = registered(&pd, vec![FILL; MEMBERS * slot]);

    b.scope(|sb| {
        // One receive per member of the good batch, all posted before the
        // refused batch: a member of it that reached the NIC would land here
        // with its own immediate.
        let recvs: Vec<_> = scatter_chunks(&mut dst, slot)
            .iter_mut()
            .take(MEMBERS - 1)
            .map(|sc| sb.post_receive(ReceiveWorkRequest::new(sc)))
            .collect::<Result<_, _>>()?;

        let pieces: Vec<_> = (0..MEMBERS).map(|_| [src.gather(..PIECE)]).collect();
        let oversized = [src.gather(..limit + 1)];
        let mut bad: Vec<_> = (0..MEMBERS)
            .map(|i| {
                if i == OVERSIZED {
                    SendWorkRequest::new(&oversized)
                        .inline(true)
                        .with_immediate(100 + i as u32)
                } else {
                    SendWorkRequest::new(&pieces[i]).with_immediate(100 + i as u32)
                }
            })
            .collect();
        let before = a.totals();
        match a.run_batch(&mut bad) {
            Err(Error::Post {
                operation: Operation::Send,
                ..
            }) => {}
            other => panic!("expected a post error for the oversized member, got {other:?}"),
        }
        assert_eq!(a.outstanding(), 0, "nothing posted");
        assert_eq!(a.totals(), before, "nothing counted");
        assert!(a.is_usable(), "a refused batch leaves the channel usable");
        // The scoped form refuses it the same way.
        match a.scope(|s| s.post_batch(&mut bad).map(|_| ())) {
            Err(ScopeError::ClosureError(Error::Post {
                operation: Operation::Send,
                ..
            })) => {}
            other => panic!("expected the scoped batch to be refused, got {other:?}"),
        }
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.totals(), before);

        // Without the oversized member the batch goes through.
        let mut good: Vec<_> = (0..MEMBERS)
            .filter(|&i| i != OVERSIZED)
            .enumerate()
            .map(|(k, i)| SendWorkRequest::new(&pieces[i]).with_immediate(k as u32))
            .collect();
        let sent = a.run_batch(&mut good)?;
        assert_eq!(sent.bytes(), (MEMBERS - 1) * PIECE);
        for (k, r) in recvs.into_iter().enumerate() {
            let got = r.wait()?;
            assert_eq!(
                got.immediate(),
                Some(k as u32),
                "receive {k} got a member of the good batch"
            );
            assert_eq!(got.bytes(), PIECE);
        }
        Ok::<_, Error>(())
    })
    .expect("batches");
    for k in 0..MEMBERS {
        let chunk = &dst[k * slot..(k + 1) * slot];
        if k < MEMBERS - 1 {
            assert_bytes(&chunk[..PIECE], &src[..PIECE], &format!("message {k}"));
            assert_untouched(&chunk[PIECE..], &format!("past message {k}"));
        } else {
            assert_untouched(chunk, "slot without a receive");
        }
    }
    assert_eq!(a.totals(), ((MEMBERS - 1) as u64, (MEMBERS - 1) as u64));
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_batch_with_an_oversized_inline_member_posts_nothing() {
    let pd = pd();
    let (mut a, b) = pair_with(&pd, |c| c.max_inline_data(64));
    let limit = a.capabilities().max_inline_data as usize;
    let src = registered(&pd, pattern(seed("inline batch write", limit), limit + 1));
    let slot = limit + 1;
    // First half: targets of the good batch; second half: targets of the
    // refused one, which must stay untouched.
    let mut exposed = vec![FILL; 2 * MEMBERS * slot];
    // SAFETY: `exposed` outlives `exposed_mr` (dropped below, before
    // `exposed` is read) and Rust does not touch it while writes may land.
    let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
    let remote = exposed_mr.remote();
    let target = |i: usize, len: usize| remote.slice((i * slot) as u64, len as u64).unwrap();

    let pieces: Vec<_> = (0..MEMBERS).map(|_| [src.gather(..PIECE)]).collect();
    let oversized = [src.gather(..limit + 1)];
    let mut bad: Vec<_> = (0..MEMBERS)
        .map(|i| {
            if i == OVERSIZED {
                WriteWorkRequest::new(&oversized, target(MEMBERS + i, limit + 1)).inline(true)
            } else {
                WriteWorkRequest::new(&pieces[i], target(MEMBERS + i, PIECE))
            }
        })
        .collect();
    let before = a.totals();
    match a.run_batch(&mut bad) {
        Err(Error::Post {
            operation: Operation::Write,
            ..
        }) => {}
        other => panic!("expected a post error for the oversized member, got {other:?}"),
    }
    assert_eq!(a.outstanding(), 0, "nothing posted");
    assert_eq!(a.totals(), before, "nothing counted");
    assert!(a.is_usable(), "a refused batch leaves the channel usable");
    match a.scope(|s| s.post_batch(&mut bad).map(|_| ())) {
        Err(ScopeError::ClosureError(Error::Post {
            operation: Operation::Write,
            ..
        })) => {}
        other => panic!("expected the scoped batch to be refused, got {other:?}"),
    }
    assert_eq!(a.outstanding(), 0);
    assert_eq!(a.totals(), before);

    let mut good: Vec<_> = (0..MEMBERS)
        .filter(|&i| i != OVERSIZED)
        .map(|i| WriteWorkRequest::new(&pieces[i], target(i, PIECE)))
        .collect();
    let done = a
        .run_batch(&mut good)
        .expect("the batch without the oversized member");
    assert_eq!(done.bytes(), (MEMBERS - 1) * PIECE);
    drop(exposed_mr);
    for i in 0..MEMBERS {
        let chunk = &exposed[i * slot..(i + 1) * slot];
        if i == OVERSIZED {
            assert_untouched(chunk, "target of the left-out member");
        } else {
            assert_bytes(&chunk[..PIECE], &src[..PIECE], &format!("piece {i}"));
            assert_untouched(&chunk[PIECE..], &format!("past piece {i}"));
        }
    }
    assert_untouched(
        &exposed[MEMBERS * slot..],
        "targets of the refused batch: no member was posted",
    );
    assert_eq!(a.totals(), ((MEMBERS - 1) as u64, (MEMBERS - 1) as u64));
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

// ----- host test: one error type for `?` -------------------------------------

fn verbs_step() -> rdma_safe::Result<()> {
    rdma_safe::ProtectionDomain::open("no-such-rdma-device").map(drop)
}
fn transport_step() -> rdma_safe::Result<()> {
    Err(Error::Unusable("shut down by an earlier failure".into()))
}
fn element_step() -> Result<(), ScatterGatherElementError> {
    Err(ScatterGatherElementError::OutOfBounds { len: 8 })
}
fn alloc_step() -> rdma_safe::Result<AlignedBuffer> {
    AlignedBuffer::new(0)
}
fn endpoint_step() -> rdma_safe::Result<Endpoint> {
    Endpoint::from_bytes(&[])
}
fn remote_step() -> rdma_safe::Result<RemoteMemoryRegion> {
    RemoteMemoryRegion::new(0x1000, 16, 1).slice(8, 16)
}
fn io_step() -> std::io::Result<std::fs::File> {
    std::fs::File::open("/nonexistent/rdma-safe-test")
}
fn scope_step() -> Result<(), ScopeError<Error>> {
    Err(ScopeError::AutoPollError(Error::Unusable("flushed".into())))
}

/// Calls step `which` with `?` in a function returning the crate's `Result`.
fn chain(which: usize) -> rdma_safe::Result<()> {
    match which {
        0 => verbs_step()?,
        1 => transport_step()?,
        2 => element_step()?,
        3 => {
            alloc_step()?;
        }
        4 => {
            endpoint_step()?;
        }
        5 => {
            remote_step()?;
        }
        6 => {
            io_step()?;
        }
        _ => scope_step()?,
    }
    Ok(())
}

/// Needs no device: every specific error converts with `?` into
/// `rdma_safe::Error`, as the matching variant, keeping its message.
#[test]
fn error_chains_with_question_mark_across_the_specific_types() {
    use rdma_safe::Error;
    let messages = [
        verbs_step().unwrap_err().to_string(),
        transport_step().unwrap_err().to_string(),
        element_step().unwrap_err().to_string(),
        alloc_step().unwrap_err().to_string(),
        endpoint_step().unwrap_err().to_string(),
        remote_step().unwrap_err().to_string(),
        io_step().unwrap_err().to_string(),
        Error::Unusable("flushed".into()).to_string(),
    ];
    for (which, message) in messages.iter().enumerate() {
        let err = chain(which).expect_err("every step fails");
        let variant_ok = match which {
            0 => matches!(err, Error::Verbs(_)),
            1 => matches!(err, Error::Unusable(_)),
            2 => matches!(
                err,
                Error::Element(ScatterGatherElementError::OutOfBounds { len: 8 })
            ),
            3 => matches!(err, Error::Alloc(AllocError::InvalidLayout { .. })),
            4 => matches!(err, Error::EndpointDecode(_)),
            5 => matches!(
                err,
                Error::RemoteRegion(RemoteRegionError::OutOfBounds { .. })
            ),
            6 => matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::NotFound),
            _ => matches!(err, Error::Unusable(_)),
        };
        assert!(variant_ok, "step {which} became {err:?}");
        assert_eq!(&err.to_string(), message, "step {which} keeps its message");
    }
    // A closure error of a scope converts through its own type.
    let closure: rdma_safe::Result<()> = (|| {
        Err::<(), _>(ScopeError::ClosureError(std::io::Error::other("closure")))?;
        Ok(())
    })();
    assert!(matches!(closure, Err(Error::Io(_))), "{closure:?}");
}
