// A DMA-BUF registration takes an `AsFd`, not a raw integer such as -1.
use rdma_safe::{MemoryRegion, ProtectionDomain};

fn misuse(pd: &ProtectionDomain) {
    // SAFETY: (not reached: this does not compile).
    let _mr = unsafe { MemoryRegion::register_local_dmabuf_mr(pd, -1, 0, 4096, 0) };
}

fn main() {
    let _ = misuse;
}
