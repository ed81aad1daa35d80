// `register_local_dmabuf_mr` is `unsafe`: its I/O address may coincide with a Rust slice.
use rdma_safe::{MemoryRegion, ProtectionDomain};
use std::os::fd::BorrowedFd;

fn misuse(pd: &ProtectionDomain, fd: BorrowedFd<'_>) {
    let _mr = MemoryRegion::register_local_dmabuf_mr(pd, fd, 0, 4096, 0);
}

fn main() {
    let _ = misuse;
}
