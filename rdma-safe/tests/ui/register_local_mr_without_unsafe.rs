// Raw `register_local_mr` is `unsafe`: the range could be reallocated or freed while pinned.
use rdma_safe::{MemoryRegion, ProtectionDomain};

fn misuse(pd: &ProtectionDomain, buf: &mut Vec<u8>) {
    let _mr = MemoryRegion::register_local_mr(pd, buf.as_mut_ptr(), buf.len());
}

fn main() {
    let _ = misuse;
}
