// A scoped handle cannot be stored in a variable that outlives the scope.
use rdma_safe::{Channel, MemoryRegion, scope::ScopedPendingWork, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &[u8]) {
    let mut outer: Option<ScopedPendingWork<'_>> = None;
    let _ = channel.scope(|s| {
        outer = Some(s.post_send(SendWorkRequest::new(&[mr.gather_element(buf)]))?);
        Ok::<_, rdma_safe::Error>(())
    });
    drop(outer);
}

fn main() {
    let _ = misuse;
}
