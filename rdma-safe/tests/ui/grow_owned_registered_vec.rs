// A RegisteredBuffer owning a Vec exposes only its bytes, never the Vec: it cannot grow.
use rdma_safe::{ProtectionDomain, RegisteredBuffer};

fn misuse(pd: &ProtectionDomain) {
    let mut buf = RegisteredBuffer::register(pd, vec![0u8; 1 << 17]).unwrap();
    buf.reserve_exact(1 << 20);
}

fn main() {
    let _ = misuse;
}
