// A RegisteredBuffer cannot be dropped while a scatter element over it still exists.
use rdma_safe::{Channel, ProtectionDomain, ReceiveWorkRequest, RegisteredBuffer};

fn misuse(pd: &ProtectionDomain, channel: &mut Channel) {
    let mut buf = RegisteredBuffer::register(pd, vec![0u8; 64]).unwrap();
    let mut scatter = [buf.scatter(..)];
    drop(buf);
    let _ = channel.receive(ReceiveWorkRequest::new(&mut scatter));
}

fn main() {
    let _ = misuse;
}
