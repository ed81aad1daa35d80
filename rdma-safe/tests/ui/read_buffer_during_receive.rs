// A buffer held by a scatter element of an outstanding receive cannot be
// read: the NIC may be writing it.
use rdma_safe::{Channel, MemoryRegion, ReceiveWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut Vec<u8>) {
    let _ = channel.scope(|s| {
        let mut scatter = [mr.scatter_element(buf)];
        let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        println!("{}", buf[0]);
        recv.wait()
    });
}

fn main() {
    let _ = misuse;
}
