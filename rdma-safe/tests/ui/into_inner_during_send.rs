// A RegisteredBuffer cannot be taken back with `into_inner` while a send borrows it.
use rdma_safe::{Channel, RegisteredBuffer, SendWorkRequest};

fn misuse(channel: &mut Channel, tx: RegisteredBuffer<Vec<u8>>) {
    let _ = channel.scope(|s| {
        let send = s.post_send(SendWorkRequest::new(&[tx.gather(..)]))?;
        let v: Vec<u8> = tx.into_inner().unwrap();
        drop(v);
        send.wait()
    });
}

fn main() {
    let _ = misuse;
}
