// A scoped handle cannot be returned out of its scope.
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &[u8]) {
    let handle = channel.scope(|s| s.post_send(SendWorkRequest::new(&[mr.gather_element(buf)])));
    let _ = handle;
}

fn main() {
    let _ = misuse;
}
