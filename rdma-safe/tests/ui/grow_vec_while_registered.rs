// A Vec lent to `RegisteredBuffer::register` cannot grow (realloc moves pinned pages).
use rdma_safe::{ProtectionDomain, RegisteredBuffer};

fn misuse(pd: &ProtectionDomain, mut v: Vec<u8>) {
    let buf = RegisteredBuffer::register(pd, &mut v[..]).unwrap();
    v.reserve_exact(1 << 20);
    drop(buf);
}

fn main() {
    let _ = misuse;
}
