// The scopes of two channels cannot be swapped: each scope's lifetime is
// its own, so a handle cannot end up waited for by the wrong scope.
use rdma_safe::{Channel, Error};

fn misuse(a: &mut Channel, b: &mut Channel) {
    let _ = a.scope(|sa| {
        let _ = b.scope(|sb| {
            std::mem::swap(sa, sb);
            Ok::<_, Error>(())
        });
        Ok::<_, Error>(())
    });
}

fn main() {
    let _ = misuse;
}
