// A buffer given to an owning receive is moved into the operation: the
// program cannot read or write it until the operation gives it back.
use rdma_safe::owned::Request;
use rdma_safe::{pool::PoolBuf, SharedChannel};

async fn misuse(channel: &SharedChannel, mut buf: PoolBuf) {
    let op = channel.submit(Request::receive(buf));
    buf[0] = 1;
    let _ = op.await;
}

fn main() {
    let _ = misuse;
}
