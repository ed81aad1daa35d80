// While a scope holds a channel, the channel cannot be used directly.
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &[u8]) {
    let _ = channel.scope(|_s| channel.send(SendWorkRequest::new(&[mr.gather_element(buf)])));
}

fn main() {
    let _ = misuse;
}
