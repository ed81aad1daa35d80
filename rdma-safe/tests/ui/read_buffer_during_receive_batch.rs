// The buffers of a batch of receives stay exclusively borrowed for the whole
// scope, even after every handle was waited for: a receive refused part-way
// through the batch, or a handle that was forgotten, may still be waited for
// only at the scope's end.
use rdma_safe::{Channel, MemoryRegion, ReceiveWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion, buf: &mut Vec<u8>) {
    let _ = channel.scope(|s| {
        let (x, y) = buf.split_at_mut(8);
        let mut lists = [[mr.scatter_element(x)], [mr.scatter_element(y)]];
        let [l0, l1] = &mut lists;
        let recvs =
            s.post_receive_batch(&mut [ReceiveWorkRequest::new(l0), ReceiveWorkRequest::new(l1)])?;
        for r in recvs {
            r.wait()?;
        }
        println!("{}", buf[0]);
        Ok::<_, rdma_safe::Error>(())
    });
}

fn main() {
    let _ = misuse;
}
