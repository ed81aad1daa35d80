//! Loopback transfer between two channels of one process: a send/receive in
//! a polling scope, an RDMA write and an RDMA read, each verified byte for
//! byte.
//!
//! Run on a soft-RoCE device: `cargo xtask vm -- target/debug/examples/loopback`
//! (or natively: `cargo run -p rdma-safe --example loopback -- rxe0`).

use rdma_safe::{
    Channel, MemoryRegion, ProtectionDomain, ReadWorkRequest, ReceiveWorkRequest, RegisteredBuffer,
    SendWorkRequest, WriteWorkRequest,
};

#[allow(dead_code)] // the `examples` test includes this file and calls `run`
fn main() -> Result<(), rdma_safe::Error> {
    let device = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("RXE_DEVICE").ok())
        .unwrap_or_else(|| "rxe0".into());
    run(&device)
}

/// The whole program on `device`.
pub(crate) fn run(device: &str) -> Result<(), rdma_safe::Error> {
    let pd = ProtectionDomain::open(device)?;
    let (mut a, mut b) = (pd.create_channel()?, pd.create_channel()?);
    Channel::connect_pair(&mut a, &mut b)?;
    println!(
        "connected QP {} <-> QP {} on {device}",
        a.local_endpoint().qp_num,
        b.local_endpoint().qp_num
    );

    // Two-sided: b receives what a sends.
    // Registered buffers own their memory: it cannot be freed or moved
    // while the NIC may use it.
    let tx = RegisteredBuffer::register(&pd, b"hello, RDMA".to_vec())?;
    let mut rx = RegisteredBuffer::new(&pd, 64)?;
    let got = b.scope(|s| {
        let mut scatter = [rx.scatter(..)];
        let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
        recv.wait()
    })?;
    assert_eq!(&rx[..got.bytes()], b"hello, RDMA");
    println!(
        "send/receive: {} bytes: {:?}",
        got.bytes(),
        String::from_utf8_lossy(&rx[..got.bytes()])
    );

    // One-sided: a writes into, then reads back from, b's exposed buffer.
    let mut exposed = vec![0u8; 4096];
    // SAFETY: `exposed` outlives `exposed_mr` (dropped first, below) and is
    // not accessed from Rust while the peer may write or read it.
    let exposed_mr =
        unsafe { MemoryRegion::register_shared_mr(&pd, exposed.as_mut_ptr(), exposed.len()) }?;
    let remote = exposed_mr.remote();
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let src = RegisteredBuffer::register(&pd, src)?;
    a.write(WriteWorkRequest::new(&[src.gather(..)], remote))?;
    let mut back = RegisteredBuffer::new(&pd, 4096)?;
    a.read(ReadWorkRequest::new(&mut [back.scatter(..)], remote))?;
    drop(exposed_mr);
    assert_eq!(exposed[..], src[..], "RDMA write landed");
    assert_eq!(back[..], src[..], "RDMA read returned the written bytes");
    println!("RDMA write + read of 4096 bytes verified");
    let (posted, completed) = a.totals();
    assert!(completed <= posted);
    println!("loopback: OK ({posted} requests posted on a, {completed} completions)");
    Ok(())
}
