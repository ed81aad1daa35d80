// Outside scopes too: while a scatter element holds a buffer, the buffer
// cannot be read, even before the element is posted.
use rdma_safe::{Channel, MemoryRegion, ReceiveWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut [u8]) {
    let mut scatter = [mr.scatter_element(buf)];
    let first = buf[0];
    let _ = channel.receive(ReceiveWorkRequest::new(&mut scatter));
    let _ = first;
}

fn main() {
    let _ = misuse;
}
