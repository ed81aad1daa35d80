// The correct counterparts: the buffer comes back with the outcome, and a
// shared payload can be sent while clones of it are kept.
use rdma_safe::owned::Request;
use rdma_safe::{pool::PoolBuf, pool::PoolBytes, SharedChannel};

async fn receive_then_use(channel: &SharedChannel, buf: PoolBuf) -> u8 {
    let (outcome, mut buf) = channel.submit(Request::receive(buf)).await;
    let _ = outcome;
    buf[0] = 1;
    buf[0]
}

async fn send_twice(a: &SharedChannel, b: &SharedChannel, payload: PoolBytes) {
    let (r1, r2) = (a.submit(Request::send(payload.clone())), b.submit(Request::send(payload.clone())));
    let _ = (r1.await, r2.await);
    assert_eq!(payload.len(), payload.len());
}

fn main() {
    let _ = receive_then_use;
    let _ = send_twice;
}
