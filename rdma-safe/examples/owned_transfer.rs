//! Owned transfers from a buffer pool: the pool's buffers move into each
//! operation and come back with its completion — blocking, then as futures
//! on tokio. Every byte is checked. `cargo xtask test-rxe` runs this on a
//! soft-RoCE device (rdma-safe's `examples` test); the `pool` and `owned`
//! module docs show it.

use rdma_safe::owned::Request;
use rdma_safe::{BufferPool, Channel, ProtectionDomain, SharedChannel};

/// The whole program on `device`.
pub(crate) fn run(device: &str) -> rdma_safe::Result<()> {
    let pd = ProtectionDomain::open(device)?;
    // Completion events: futures sleep instead of spinning.
    let builder = || pd.channel_builder().completion_events(true).build();
    let (mut a, mut b) = (builder()?, builder()?);
    Channel::connect_pair(&mut a, &mut b)?;
    // 16 buffers of 4 KiB, registered once: the data path registers nothing.
    let pool = BufferPool::new(&pd, 4096, 16)?;

    // Blocking: each call owns its buffer until the NIC is done with it.
    let (sa, sb) = (a.shared(), b.shared());
    let (posted, rx) = {
        let rx = pool.try_alloc()?;
        let mut tx = pool.try_alloc()?;
        tx.fill_from(b"owned, then given back");
        // The receive goes first (on another thread: a blocking receive
        // waits for the send).
        let receiver = std::thread::spawn(move || sb.run(Request::receive(rx)));
        let (sent, _tx) = sa.run(Request::send(tx.freeze()));
        sent?;
        receiver.join().expect("the receiving thread")
    };
    let n = posted?.bytes();
    assert_eq!(&rx[..n], b"owned, then given back");

    // Async (tokio): the same operations as futures; dropping one never
    // frees memory the NIC may still use.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let sa: SharedChannel = a.shared().with_tokio()?;
        let sb: SharedChannel = b.shared().with_tokio()?;
        let receive = sb.submit(Request::receive(pool.alloc().await));
        let mut tx = pool.alloc().await;
        tx.fill_from(b"and as futures");
        let ((sent, _), (got, rx)) = tokio::join!(sa.submit(Request::send(tx.freeze())), receive);
        sent?;
        let n = got?.bytes();
        assert_eq!(&rx[..n], b"and as futures");
        Ok::<_, rdma_safe::Error>(())
    })?;
    drop(rx);
    assert_eq!(pool.available(), pool.capacity(), "every buffer is back");
    println!("owned_transfer: blocking and async transfers checked");
    Ok(())
}

#[allow(dead_code)] // the `examples` test includes this file and calls `run`
fn main() -> rdma_safe::Result<()> {
    run(&std::env::var("RXE_DEVICE").unwrap_or_else(|_| "rxe0".into()))
}
