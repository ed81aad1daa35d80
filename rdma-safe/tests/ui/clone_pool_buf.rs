// A writable pool buffer has exactly one handle: it cannot be cloned.
use rdma_safe::pool::PoolBuf;

fn misuse(buf: PoolBuf) -> (PoolBuf, PoolBuf) {
    let other = buf.clone();
    (buf, other)
}

fn main() {
    let _ = misuse;
}
