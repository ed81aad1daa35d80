// A RemoteAccessBuffer cannot be dropped (deregistered and freed) while a
// scatter element over it is still in use by an operation.
use rdma_safe::{AtomicWorkRequest, Channel, ProtectionDomain, RemoteAccessBuffer, RemoteMemoryRegion};

fn misuse(pd: &ProtectionDomain, channel: &mut Channel, target: RemoteMemoryRegion) {
    let results = RemoteAccessBuffer::new(pd, 8).unwrap();
    let mut old = results.scatter(..).unwrap();
    drop(results);
    let _ = channel.run(AtomicWorkRequest::fetch_and_add(target, 1, &mut old));
}

fn main() {
    let _ = misuse;
}
