//! The example programs, run on the device: their sources are compiled into
//! this test (so `cargo xtask test-rxe` runs them like any device test) and
//! their entry points called with the test device.

mod common;

// The examples' entry points are `pub` for their own `main`; inside this
// test crate nothing re-exports them.
#[allow(unreachable_pub)]
#[path = "../examples/loopback.rs"]
mod loopback;
#[allow(unreachable_pub)]
#[path = "../examples/tcp_write.rs"]
mod tcp_write;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn loopback_example_runs() {
    loopback::run(&common::device_name()).expect("the loopback example");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn tcp_write_example_runs() {
    tcp_write::both(&common::device_name()).expect("the tcp_write example");
}
