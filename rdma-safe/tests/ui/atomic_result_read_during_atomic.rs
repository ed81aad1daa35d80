// The result buffer of an outstanding atomic cannot be read: the NIC is
// about to write the old value into it.
use rdma_safe::{AtomicWorkRequest, Channel, ProtectionDomain, RegisteredBuffer, RemoteMemoryRegion};

fn misuse(pd: &ProtectionDomain, channel: &mut Channel, target: RemoteMemoryRegion) {
    let mut old = RegisteredBuffer::new(pd, 8).unwrap();
    let _ = channel.scope(|s| {
        let mut result = old.scatter(..);
        let op = s.post(AtomicWorkRequest::fetch_and_add(target, 1, &mut result))?;
        println!("{}", old[0]);
        op.wait()
    });
}

fn main() {
    let _ = misuse;
}
