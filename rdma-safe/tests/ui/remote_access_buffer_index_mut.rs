// A RemoteAccessBuffer cannot be indexed or written as bytes: no `&mut [u8]`
// over memory a peer may read or write concurrently.
use rdma_safe::{ProtectionDomain, RemoteAccessBuffer};

fn misuse(pd: &ProtectionDomain) {
    let mut shared = RemoteAccessBuffer::new(pd, 64).unwrap();
    shared[0] = 1;
}

fn main() {
    let _ = misuse;
}
