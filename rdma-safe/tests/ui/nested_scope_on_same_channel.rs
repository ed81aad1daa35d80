// A second scope on a channel that a scope already holds is rejected.
use rdma_safe::{Channel, TransportError};

fn misuse(channel: &mut Channel) {
    let _ = channel.scope(|_outer| {
        let _ = channel.scope(|_inner| Ok::<_, TransportError>(()));
        Ok::<_, TransportError>(())
    });
}

fn main() {
    let _ = misuse;
}
