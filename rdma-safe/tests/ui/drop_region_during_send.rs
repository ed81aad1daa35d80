// The memory region of an outstanding operation cannot be deregistered.
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: MemoryRegion, buf: &[u8]) {
    let _ = channel.scope(|s| {
        let send = s.post_send(SendWorkRequest::new(&[mr.gather_element(buf)]))?;
        drop(mr);
        send.wait()
    });
}

fn main() {
    let _ = misuse;
}
