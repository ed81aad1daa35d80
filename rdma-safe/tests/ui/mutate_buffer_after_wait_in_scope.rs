// Even after its operation was waited for, a buffer lent to a scope stays
// borrowed until the scope ends (the borrow is for the whole scope).
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut [u8]) {
    let _ = channel.scope(|s| {
        let g = [mr.gather_element(buf)];
        s.post_send(SendWorkRequest::new(&g))?.wait()?;
        buf.fill(0);
        Ok::<_, rdma_safe::Error>(())
    });
}

fn main() {
    let _ = misuse;
}
