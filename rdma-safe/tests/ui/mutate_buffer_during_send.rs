// A buffer whose gather element is in an outstanding operation of a scope
// cannot be mutated: the NIC may be reading it.
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut Vec<u8>) {
    let _ = channel.scope(|s| {
        let send = s.post_send(SendWorkRequest::new(&[mr.gather_element(buf)]))?;
        buf[0] = 1;
        send.wait()
    });
}

fn main() {
    let _ = misuse;
}
