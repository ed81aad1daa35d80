// A Vec lent to `RegisteredBuffer::register` cannot be freed while registered.
use rdma_safe::{ProtectionDomain, RegisteredBuffer};

fn misuse(pd: &ProtectionDomain, mut v: Vec<u8>) {
    let buf = RegisteredBuffer::register(pd, &mut v[..]).unwrap();
    drop(v);
    drop(buf);
}

fn main() {
    let _ = misuse;
}
