//! What a newcomer hit, pinned (issue 24, point 6), on a real device: the
//! messages say what to do, and the small obstacles are gone.

mod common;

use common::{pair, pd, registered};
use rdma_safe::{
    channel::QpCapabilities, memory::AccessFlags, BufferPool, Channel, ReceiveWorkRequest,
    RemoteAccessBuffer, SendWorkRequest,
};

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_element_list_is_reused_across_blocking_calls() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, vec![9u8; 32]);
    let mut rx = registered(&pd, vec![0u8; 32]);
    // Blocking calls borrow the list for the call only: the same list
    // goes to a second call, and the channel is used in between.
    let list = [tx.gather(..)];
    for round in 0..2 {
        let mut into = [rx.scatter(..)];
        let receiver = std::thread::scope(|s| {
            let h = s.spawn(|| {
                b.receive(ReceiveWorkRequest::new(&mut into))
                    .map(|w| w.bytes())
            });
            a.send(SendWorkRequest::new(&list)).expect("send");
            h.join().expect("receiver")
        });
        assert_eq!(receiver.expect("receive"), 32, "round {round}");
        assert_eq!(a.outstanding(), 0);
    }
    assert_eq!(&rx[..], &[9u8; 32][..]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn remote_write_without_local_write_names_the_rule() {
    let pd = pd();
    let err =
        RemoteAccessBuffer::with_access(&pd, 64, AccessFlags::REMOTE_WRITE).expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("add AccessFlags::LOCAL_WRITE"), "{msg}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_oversized_fill_names_fill_from_and_the_capacity() {
    let pd = pd();
    let pool = BufferPool::new(&pd, 16, 1).expect("pool");
    let mut buf = pool.try_alloc().expect("buffer");
    let capacity = buf.capacity();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        buf.fill_from(&[0u8; 100]);
    }))
    .expect_err("100 bytes do not fit");
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("fill_from") && msg.contains(&format!("capacity of {capacity}")),
        "{msg}"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn connecting_to_loopback_says_why_it_cannot_work() {
    let err = Channel::connect_to_with(
        "127.0.0.1:7471",
        &[],
        &rdma_safe::cm::CmOptions::default().timeout(std::time::Duration::from_secs(5)),
    )
    .expect_err("no RDMA device on lo");
    let msg = err.to_string();
    assert!(msg.contains("loopback"), "{msg}");
    // The capabilities type is reachable from rdma-safe itself.
    let caps = QpCapabilities::default();
    assert!(caps.max_send_wr > 0);
}
