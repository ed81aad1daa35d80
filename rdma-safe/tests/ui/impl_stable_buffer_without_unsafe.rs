// Only an `unsafe impl` may declare a buffer type's pages stable (StableBuffer).
use rdma_safe::memory::StableBuffer;
use std::ops::{Deref, DerefMut};

struct Growable(Vec<u8>);

impl Deref for Growable {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for Growable {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl StableBuffer for Growable {}

fn main() {}
