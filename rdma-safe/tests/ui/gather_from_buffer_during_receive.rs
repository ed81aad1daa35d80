// A buffer being received into cannot at the same time be sent from.
use rdma_safe::{Channel, MemoryRegion, ReceiveWorkRequest, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut Vec<u8>) {
    let _ = channel.scope(|s| {
        let mut scatter = [mr.scatter_element(buf)];
        let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        let send = s.post_send(SendWorkRequest::new(&[mr.gather_element(buf)]))?;
        send.wait()?;
        recv.wait()
    });
}

fn main() {
    let _ = misuse;
}
