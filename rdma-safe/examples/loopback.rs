//! Loopback transfer between two channels of one process: a send/receive in
//! a polling scope, an RDMA write and an RDMA read, each verified byte for
//! byte.
//!
//! Run on a soft-RoCE device: `cargo xtask vm -- target/debug/examples/loopback`
//! (or natively: `cargo run -p rdma-safe --example loopback -- rxe0`).

use rdma_safe::{
    Channel, MemoryRegion, ProtectionDomain, ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest,
    WriteWorkRequest,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("RXE_DEVICE").ok())
        .unwrap_or_else(|| "rxe0".into());
    let pd = ProtectionDomain::open(&device)?;
    let (mut a, mut b) = (pd.create_channel()?, pd.create_channel()?);
    Channel::connect_pair(&mut a, &mut b)?;
    println!(
        "connected QP {} <-> QP {} on {device}",
        a.local_endpoint().qp_num,
        b.local_endpoint().qp_num
    );

    // Two-sided: b receives what a sends.
    let mut tx = b"hello, RDMA".to_vec();
    let mut rx = vec![0u8; 64];
    let tx_mr = MemoryRegion::register_local_mr(&pd, tx.as_mut_ptr(), tx.len())?;
    let rx_mr = MemoryRegion::register_local_mr(&pd, rx.as_mut_ptr(), rx.len())?;
    let got = b.scope(|s| {
        let mut scatter = [rx_mr.scatter_element(&mut rx)];
        let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        a.send(SendWorkRequest::new(&[tx_mr.gather_element(&tx)]))?;
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
    let mut src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let src_mr = MemoryRegion::register_local_mr(&pd, src.as_mut_ptr(), src.len())?;
    a.write(WriteWorkRequest::new(
        &[src_mr.gather_element(&src)],
        remote,
    ))?;
    let mut back = vec![0u8; 4096];
    let back_mr = MemoryRegion::register_local_mr(&pd, back.as_mut_ptr(), back.len())?;
    a.read(ReadWorkRequest::new(
        &mut [back_mr.scatter_element(&mut back)],
        remote,
    ))?;
    drop(exposed_mr);
    assert_eq!(exposed, src, "RDMA write landed");
    assert_eq!(back, src, "RDMA read returned the written bytes");
    println!("RDMA write + read of 4096 bytes verified");
    let (posted, completed) = a.totals();
    assert!(completed <= posted);
    println!("loopback: OK ({posted} requests posted on a, {completed} completions)");
    Ok(())
}
