// Memory lent to a peer cannot be read (or written) by Rust code while the
// window is open: the peer may be writing it.
use rdma_safe::{memory::AccessFlags, Channel};

fn misuse(channel: &mut Channel) {
    let mut memory = vec![0u8; 64];
    let _ = channel.lend(&mut memory, AccessFlags::REMOTE_WRITE, |_, _window| {
        println!("{}", memory[0]);
    });
}

fn main() {
    let _ = misuse;
}
