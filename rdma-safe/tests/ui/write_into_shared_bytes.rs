// Shared pool bytes are immutable: another handle may be in a send.
use rdma_safe::pool::PoolBytes;

fn misuse(bytes: PoolBytes) {
    bytes[0] = 1;
}

fn main() {
    let _ = misuse;
}
