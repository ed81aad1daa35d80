// Even the unsafe unpolled API keeps the data borrowed while the pending
// work exists.
use rdma_safe::{Channel, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion) {
    let pending;
    {
        let buf = vec![0u8; 16];
        let g = [mr.gather_element(&buf)];
        // SAFETY: (not reached: this does not compile).
        pending = unsafe { channel.send_unpolled(SendWorkRequest::new(&g)) };
    }
    drop(pending);
}

fn main() {
    let _ = misuse;
}
