// Memory posted in a scope must outlive the scope: a buffer created inside
// the closure does not.
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion) {
    let _ = channel.scope(|s| {
        let buf = vec![0u8; 16];
        let send = s.post_send(SendWorkRequest::new(&[mr.gather_element(&buf)]))?;
        send.wait()
    });
}

fn main() {
    let _ = misuse;
}
