// A buffer a scoped operation gave back is still lent to the scope: it
// cannot leave it (the scope waits for everything it lent when it ends).
use rdma_safe::{Channel, MemoryRegion};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut [u8]) {
    let mut out = None;
    let _ = channel.scope(|s| {
        let (_, back) = s.post_receive_lent(mr, buf)?.wait()?;
        out = Some(back);
        Ok::<_, rdma_safe::Error>(())
    });
    if let Some(back) = out {
        back[0] = 1;
    }
}

fn main() {
    let _ = misuse;
}
