//! The borrow checker rejects misuse of the safe API: every file in
//! `tests/ui/` is a program that must fail to compile, with the error
//! recorded in the `.stderr` file beside it; `tests/ui/pass/` holds the
//! correct counterparts, which must compile. Needs no RDMA device.
//!
//! Regenerate the expected output after a compiler upgrade with
//! `TRYBUILD=overwrite cargo test -p rdma-safe --test compile_fail`, then
//! review every `.stderr`: each must fail on the misusing line with the error
//! its first comment line names — a borrow-checker error for buffers, scopes
//! and elements; E0133 for a raw registration without `unsafe`; a missing
//! trait or method where the API refuses a type — not on a typo.

#[test]
fn misuse_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}

/// Channels and everything that refers to registered memory may cross
/// threads (the handshake and scope tests rely on it).
#[test]
fn types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<rdma_safe::Channel>();
    send_sync::<rdma_safe::ProtectionDomain>();
    send_sync::<rdma_safe::MemoryRegion>();
    send_sync::<rdma_safe::memory::AlignedBuffer>();
    send_sync::<rdma_safe::RegisteredBuffer>();
    send_sync::<rdma_safe::RegisteredBuffer<Vec<u8>>>();
    send_sync::<rdma_safe::RegisteredBuffer<Box<[u8]>>>();
    send_sync::<rdma_safe::RegisteredBuffer<&'static mut [u8]>>();
    send_sync::<rdma_safe::RemoteMemoryRegion>();
    send_sync::<rdma_safe::RemoteAccessBuffer>();
    send_sync::<rdma_safe::DatagramEndpoint>();
    send_sync::<rdma_safe::datagram::DatagramPeer>();
    send_sync::<rdma_safe::SharedReceiveQueue>();
    send_sync::<rdma_safe::AtomicWorkRequest<'static, 'static>>();
    send_sync::<rdma_safe::GatherElement<'static>>();
    send_sync::<rdma_safe::ScatterElement<'static>>();
    send_sync::<rdma_safe::PendingWork<'static>>();
    send_sync::<rdma_safe::scope::ScopedPendingWork<'static>>();
    send_sync::<rdma_safe::scope::LentWork<'static>>();
    send_sync::<rdma_safe::PreparedBatch<'static, 'static>>();
    send_sync::<rdma_safe::Error>();
    send_sync::<rdma_safe::ScopeError<rdma_safe::Error>>();
    send_sync::<rdma_safe::Error>();
}
