// A buffer lent to a scoped receive cannot be read before its handle gives
// it back: the NIC may still be writing it.
use rdma_safe::{Channel, MemoryRegion};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut [u8]) {
    let _ = channel.scope(|s| {
        let pending = s.post_receive_lent(mr, buf)?;
        let first = buf[0];
        let (_, back) = pending.wait()?;
        back[0] = first;
        Ok::<_, rdma_safe::Error>(())
    });
}

fn main() {
    let _ = misuse;
}
