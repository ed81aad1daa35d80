// A RegisteredBuffer cannot be read while its scatter element is in a posted receive.
use rdma_safe::{Channel, ReceiveWorkRequest, RegisteredBuffer};

fn misuse(channel: &mut Channel, rx: &mut RegisteredBuffer) {
    let _ = channel.scope(|s| {
        let mut scatter = [rx.scatter(..)];
        let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        println!("{}", rx[0]);
        recv.wait()
    });
}

fn main() {
    let _ = misuse;
}
