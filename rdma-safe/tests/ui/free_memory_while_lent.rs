// Memory lent to a peer cannot be freed inside the scope that lends it.
use rdma_safe::{memory::AccessFlags, Channel};

fn misuse(channel: &mut Channel) {
    let mut memory = vec![0u8; 64];
    let _ = channel.lend(&mut memory, AccessFlags::REMOTE_WRITE, |_, _window| {
        drop(memory);
    });
}

fn main() {
    let _ = misuse;
}
