// A RemoteAccessBuffer never derefs to bytes: a peer may write them at any
// time, so Rust code must not hold a `&[u8]` over them.
use rdma_safe::{ProtectionDomain, RemoteAccessBuffer};

fn misuse(pd: &ProtectionDomain) {
    let shared = RemoteAccessBuffer::new(pd, 64).unwrap();
    let bytes: &[u8] = &shared;
    println!("{}", bytes[0]);
}

fn main() {
    let _ = misuse;
}
