// A buffer whose gather element is in an outstanding operation of a scope
// cannot be dropped before the scope ends.
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: Vec<u8>) {
    let _ = channel.scope(|s| {
        let send = s.post_send(SendWorkRequest::new(&[mr.gather_element(&buf)]))?;
        drop(buf);
        send.wait()
    });
}

fn main() {
    let _ = misuse;
}
