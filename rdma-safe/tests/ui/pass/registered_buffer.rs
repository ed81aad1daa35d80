// The registrations the compile-fail tests forbid, done right: a Vec lent to
// a registration grows and is freed after the registration is dropped, an
// owned buffer is read after its scope and taken back with `into_inner`, and
// raw registration is written inside `unsafe` with its contract.
use rdma_safe::{memory::AlignedBuffer, Channel, MemoryRegion, ProtectionDomain, ReceiveWorkRequest, RegisteredBuffer, SendWorkRequest};

fn borrowed_then_grown(
    pd: &ProtectionDomain,
    channel: &mut Channel,
    mut v: Vec<u8>,
) -> Result<(), rdma_safe::Error> {
    {
        let buf = RegisteredBuffer::register(pd, &mut v[..])?;
        channel.send(SendWorkRequest::new(&[buf.gather(..)]))?;
    }
    v.reserve_exact(1 << 20);
    drop(v);
    Ok(())
}

fn owned_read_after_scope(
    pd: &ProtectionDomain,
    channel: &mut Channel,
) -> Result<Vec<u8>, rdma_safe::Error> {
    let mut rx = RegisteredBuffer::register(pd, vec![0u8; 4096])?;
    let got = channel.scope(|s| {
        let (mr, bytes) = rx.split_mut();
        let (head, tail) = bytes.split_at_mut(64);
        let mut scatter = [mr.scatter_element(head), mr.scatter_element(tail)];
        s.post_receive(ReceiveWorkRequest::new(&mut scatter))?.wait()
    })?;
    println!("{}", rx[0]);
    let mut v = rx.into_inner().unwrap();
    v.truncate(got.bytes());
    Ok(v)
}

fn every_buffer_kind(pd: &ProtectionDomain) -> Result<(), rdma_safe::Error> {
    let _aligned: RegisteredBuffer<AlignedBuffer> = RegisteredBuffer::new(pd, 64)?;
    let _boxed = RegisteredBuffer::register(pd, vec![0u8; 64].into_boxed_slice())?;
    let _aligned2 = RegisteredBuffer::register(pd, AlignedBuffer::with_alignment(64, 1 << 12)?)?;
    let mut array = [0u8; 64];
    let _borrowed = RegisteredBuffer::register(pd, &mut array[..])?;
    Ok(())
}

fn raw_with_its_contract(pd: &ProtectionDomain, v: &mut Vec<u8>) -> Result<(), rdma_safe::Error> {
    // SAFETY: `v` is neither resized nor freed while `mr` lives (dropped at
    // the end of this function, while `v` is still borrowed).
    let mr = unsafe { MemoryRegion::register_local_mr(pd, v.as_mut_ptr(), v.len()) }?;
    drop(mr);
    Ok(())
}

fn main() {
    let _ = borrowed_then_grown;
    let _ = owned_read_after_scope;
    let _ = every_buffer_kind;
    let _ = raw_with_its_contract;
}
