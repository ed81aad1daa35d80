//! Pool buffers and owning operations on a real device, without a runtime:
//! the pool's accounting and exhaustion, blocking owned transfers of every
//! kind checked byte for byte, and completion callbacks.

mod common;

use common::{assert_bytes, assert_idle, pair_with, pattern, pd, seed, shared_mr};
use rdma_safe::owned::Request;
use rdma_safe::{error::PoolError, BufferPool, Error, RemoteMemoryRegion};
use std::time::Duration;

const NEEDS_DEVICE: &str = "needs an RDMA device: run `cargo xtask test-rxe`";

/// Buffers of `size` bytes filled with `data` and frozen.
fn bytes_of(pool: &BufferPool, data: &[u8]) -> rdma_safe::pool::PoolBytes {
    let mut buf = pool.try_alloc().expect("a free buffer");
    buf.fill_from(data);
    buf.freeze()
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn pool_hands_out_every_buffer_once_and_takes_them_back() {
    let _ = NEEDS_DEVICE;
    let pd = pd();
    // Small slabs, so that buffers come from several registrations.
    let pool = BufferPool::with_slab_size(&pd, 1000, 10, 4096).expect("pool");
    assert_eq!(
        pool.slabs(),
        3,
        "4 buffers of 1024-byte stride per 4 KiB slab"
    );
    let mut held: Vec<_> = (0..10).map(|_| pool.try_alloc().expect("alloc")).collect();
    assert_eq!(pool.available(), 0);
    match pool.try_alloc() {
        Err(Error::Pool(PoolError::Exhausted {
            capacity: 10,
            buffer_size: 1000,
        })) => {}
        other => panic!("expected Exhausted, got {other:?}"),
    }
    // A bounded wait on an empty pool fails instead of hanging.
    assert!(matches!(
        pool.alloc_timeout(Duration::from_millis(20)),
        Err(Error::Pool(PoolError::Exhausted { .. }))
    ));
    // Distinct, non-overlapping memory: write a different byte into each.
    for (i, b) in held.iter_mut().enumerate() {
        assert_eq!(b.len(), 1000);
        b.fill(i as u8);
    }
    for (i, b) in held.iter().enumerate() {
        assert!(
            b.iter().all(|&x| x == i as u8),
            "buffer {i} was overwritten"
        );
    }
    // Shared slices keep their buffer out of the pool until the last goes.
    let frozen = held.pop().expect("a buffer").freeze();
    let tail = frozen.slice(990..);
    let copy = frozen.clone();
    drop(frozen);
    drop(copy);
    assert_eq!(pool.available(), 0, "a slice still holds the buffer");
    assert_eq!(&tail[..], &[9u8; 10][..]);
    drop(tail);
    assert_eq!(pool.available(), 1);
    // Writable again only through its last handle, and only from its start.
    let frozen = held.pop().expect("a buffer").freeze();
    let tail = frozen.slice(990..);
    let frozen = frozen.try_into_mut().expect_err("a slice shares it");
    let tail = tail.try_into_mut().expect_err("a slice from byte 990");
    drop(tail);
    let head = frozen.slice(..5);
    drop(frozen);
    let mut again = head.try_into_mut().expect("the only handle, from 0");
    assert_eq!(&again[..], &[8u8; 5][..]);
    again[0] = 1;
    assert_eq!(pool.available(), 1, "the buffer is still out");
    drop(again);
    assert_eq!(pool.available(), 2);
    drop(held);
    assert_eq!(pool.available(), pool.capacity());
    assert!(matches!(
        BufferPool::new(&pd, 0, 1),
        Err(Error::Pool(PoolError::InvalidSize(_)))
    ));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn blocking_owned_send_receive_write_read_move_the_right_bytes() {
    let pd = pd();
    let (a, b) = pair_with(&pd, |c| c.completion_events(true));
    let (a, b) = (a.shared(), b.shared().with_spin(Duration::from_micros(50)));
    let pool = BufferPool::new(&pd, 70_000, 8).expect("pool");
    for size in [0usize, 1, 7, 4096, 65536 + 13] {
        let data = pattern(seed("owned-blocking", size), size);
        // The receive first (on another thread: it blocks), then the send.
        let rx = pool.try_alloc().expect("rx buffer");
        let b2 = b.clone();
        let receiver = std::thread::spawn(move || b2.run(Request::receive(rx)));
        let tx = bytes_of(&pool, &data);
        // The receive may not be posted yet: the sender's RNR retries wait.
        let (sent, tx) = a.run(Request::send(tx));
        assert_eq!(sent.expect("send").bytes(), size);
        assert_bytes(&tx, &data, "the sent slice comes back unchanged");
        let (got, rx) = receiver.join().expect("receiver thread");
        assert_eq!(got.expect("receive").bytes(), size);
        assert_bytes(&rx, &data, "received bytes");
    }
    // One-sided: write into and read back from the peer's region.
    let mut target = vec![0u8; 70_000];
    // SAFETY: `target` outlives `mr` (declared first, dropped last) and is
    // not touched by Rust until both transfers completed.
    let mr = unsafe { shared_mr(&pd, &mut target) };
    let remote: RemoteMemoryRegion = mr.remote();
    let data = pattern(seed("owned-write", 65536 + 13), 65536 + 13);
    let (wrote, source) = a.run(Request::write(bytes_of(&pool, &data), remote));
    assert_eq!(wrote.expect("write").bytes(), data.len());
    // The completed write's source is the only handle again: writable.
    let mut source = source
        .try_into_mut()
        .expect("the engine gave its handle back");
    source[0] = !data[0];
    drop(source);
    let mut rd = pool.try_alloc().expect("read target");
    rd.set_len(data.len());
    rd.fill(0);
    let (read, rd) = a.run(Request::read(rd, remote));
    assert_eq!(read.expect("read").bytes(), data.len());
    assert_bytes(&rd, &data, "read back");
    drop(rd);
    drop(mr);
    assert_bytes(
        &target[..data.len()],
        &data,
        "written into the peer's memory",
    );
    // A source longer than the remote region is refused before posting,
    // and the slice comes back.
    let small = remote.slice(0, 4).expect("sub-region");
    let (refused, back) = a.run(Request::write(bytes_of(&pool, &[1; 8]), small));
    assert!(refused.is_err(), "8 bytes into a 4-byte region");
    assert_eq!(&back[..], &[1; 8][..]);
    drop(back);
    assert_idle(&a, "a");
    assert_idle(&b, "b");
    assert_eq!(pool.available(), pool.capacity(), "every buffer back");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn callbacks_get_their_outcome_and_buffer_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let pd = pd();
    let (a, b) = pair_with(&pd, |c| c.send_depth(256).recv_depth(256));
    let (a, b) = (a.shared(), b.shared());
    let pool = BufferPool::new(&pd, 512, 512).expect("pool");
    const N: usize = 200;
    let received = Arc::new(Mutex::new(vec![None::<Vec<u8>>; N]));
    let sends_done = Arc::new(AtomicUsize::new(0));
    for _ in 0..N {
        let rec = received.clone();
        b.run_then(
            Request::receive(pool.try_alloc().expect("rx")),
            move |r, buf| {
                let s = r.expect("receive");
                let i = u16::from_le_bytes([buf[0], buf[1]]) as usize;
                assert_eq!(s.bytes(), buf.len());
                let mut slots = rec.lock().unwrap();
                assert!(slots[i].is_none(), "message {i} delivered twice");
                slots[i] = Some(buf.to_vec());
            },
        )
        .map_err(|(e, _)| e)
        .expect("post receive");
    }
    for i in 0..N {
        let mut msg = pattern(seed("callbacks", i), 64 + i);
        msg[..2].copy_from_slice(&(i as u16).to_le_bytes());
        let done = sends_done.clone();
        a.run_then(Request::send(bytes_of(&pool, &msg)), move |r, _bytes| {
            r.expect("send");
            done.fetch_add(1, Ordering::SeqCst);
        })
        .map_err(|(e, _)| e)
        .expect("post send");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut ran = 0;
    while ran < 2 * N {
        ran += a.run_callbacks().expect("a callbacks") + b.run_callbacks().expect("b callbacks");
        assert!(
            std::time::Instant::now() < deadline,
            "only {ran} callbacks ran"
        );
        std::thread::yield_now();
    }
    assert_eq!(sends_done.load(Ordering::SeqCst), N);
    for (i, got) in received.lock().unwrap().iter().enumerate() {
        let mut msg = pattern(seed("callbacks", i), 64 + i);
        msg[..2].copy_from_slice(&(i as u16).to_le_bytes());
        assert_bytes(got.as_deref().expect("delivered"), &msg, "callback message");
    }
    assert_idle(&a, "a");
    assert_idle(&b, "b");
    assert_eq!(pool.available(), pool.capacity());
}
