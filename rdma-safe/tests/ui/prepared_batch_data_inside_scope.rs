// A prepared batch's memory must outlive the scope it is posted in: a
// buffer created inside the closure does not.
use rdma_safe::{Channel, Error, MemoryRegion, SendWorkRequest};

fn misuse(channel: &mut Channel, mr: &MemoryRegion) {
    let _ = channel.scope(|s| {
        let buf = vec![0u8; 16];
        let gather = [mr.gather_element(&buf)];
        let wrs = [SendWorkRequest::new(&gather)];
        let mut batch = s.prepare_sends(&wrs)?;
        s.post_prepared(&mut batch)?.wait()?;
        Ok::<_, Error>(())
    });
}

fn main() {
    let _ = misuse;
}
