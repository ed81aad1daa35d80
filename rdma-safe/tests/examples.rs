//! The example programs, run on the device: their sources are compiled into
//! this test (so `cargo xtask test-rxe` runs them like any device test) and
//! their entry points called with the test device. `kv_reader` and
//! `cm_service` are a newcomer's two programs (a blocking one-sided table
//! reader, a tokio service over the CM): neither needs a thread bridge,
//! `spawn_blocking` or a second protection domain.

mod common;

use common::device_ip;

// The examples' entry points are `pub` for their own `main`; inside this
// test crate nothing re-exports them.
#[allow(unreachable_pub)]
#[path = "../examples/cm_service.rs"]
mod cm_service;
#[allow(unreachable_pub)]
#[path = "../examples/kv_reader.rs"]
mod kv_reader;
#[allow(unreachable_pub)]
#[path = "../examples/loopback.rs"]
mod loopback;
#[allow(unreachable_pub)]
#[path = "../examples/owned_transfer.rs"]
mod owned_transfer;
#[allow(unreachable_pub)]
#[path = "../examples/request_response.rs"]
mod request_response;
#[allow(unreachable_pub)]
#[path = "../examples/tcp_write.rs"]
mod tcp_write;

/// The IPv4 address of the test device's net device (`RXE_IPV4`, set by
/// `cargo xtask test-rxe`; 10.0.2.15 in its VM).
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

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn kv_reader_example_runs() {
    kv_reader::both(&common::device_name(), &device_ip()).expect("the kv_reader example");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn cm_service_example_runs() {
    cm_service::both(&common::device_name(), &device_ip()).expect("the cm_service example");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn owned_transfer_example_runs() {
    owned_transfer::run(&common::device_name()).expect("the owned_transfer example");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn request_response_example_runs() {
    request_response::run(&common::device_name()).expect("the request_response example");
}
