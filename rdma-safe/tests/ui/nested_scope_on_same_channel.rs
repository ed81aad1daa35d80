// A second scope on a channel that a scope already holds is rejected.
use rdma_safe::{Channel, Error};

fn misuse(channel: &mut Channel) {
    let _ = channel.scope(|_outer| {
        let _ = channel.scope(|_inner| Ok::<_, Error>(()));
        Ok::<_, Error>(())
    });
}

fn main() {
    let _ = misuse;
}
