// A gather element cannot outlive the RegisteredBuffer it was built from.
use rdma_safe::{Channel, ProtectionDomain, RegisteredBuffer, SendWorkRequest};

fn misuse(pd: &ProtectionDomain, channel: &mut Channel) {
    let element;
    {
        let buf = RegisteredBuffer::new(pd, 64).unwrap();
        element = buf.gather(..);
    }
    let _ = channel.send(SendWorkRequest::new(&[element]));
}

fn main() {
    let _ = misuse;
}
