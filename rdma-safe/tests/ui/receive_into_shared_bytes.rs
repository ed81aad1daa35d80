// The NIC writes a receive's buffer: shared, immutable bytes are refused.
use rdma_safe::owned::Request;
use rdma_safe::{pool::PoolBytes, SharedChannel};

async fn misuse(channel: &SharedChannel, bytes: PoolBytes) {
    let _ = channel.submit(Request::receive(bytes)).await;
}

fn main() {
    let _ = misuse;
}
