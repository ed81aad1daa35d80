//! Short timeouts fire on time, on a real device: a 1 ms bound on a
//! receive nobody answers ends it within a few milliseconds (the wait's
//! clock starts with the wait, not after thousands of polls), blocking and
//! owned alike, busy-polling and sleeping on completion events alike. The
//! bound asserted is generous (a loaded CI machine is slow); what is
//! printed is the measurement.

mod common;

use common::{pair_with, pd, registered};
use rdma_safe::owned::Request;
use rdma_safe::{BufferPool, Error, ReceiveWorkRequest};
use std::time::{Duration, Instant};

/// Catches a wait that ignores its bound, not a slow machine.
const HANG: Duration = Duration::from_secs(5);

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_one_millisecond_timeout_fires_within_milliseconds() {
    let pd = pd();
    for events in [false, true] {
        let timeout = Duration::from_millis(1);
        let (_a, mut b) = pair_with(&pd, |c| c.completion_events(events).timeout(timeout));
        let mut buf = registered(&pd, vec![0u8; 64]);
        let mut list = [buf.scatter(..)];
        let start = Instant::now();
        let r = b.receive(ReceiveWorkRequest::new(&mut list));
        let took = start.elapsed();
        eprintln!("blocking receive, events {events}, timeout {timeout:?}: {took:?}");
        assert!(
            matches!(r, Err(Error::Timeout { .. })),
            "expected a timeout, got {r:?}"
        );
        assert!(took < HANG, "the 1 ms bound took {took:?}");
        assert!(!b.is_usable(), "a timeout shuts the channel down");

        let (_a, b) = pair_with(&pd, |c| c.completion_events(events).timeout(timeout));
        let pool = BufferPool::new(&pd, 64, 1).expect("pool");
        let sb = b.shared();
        let start = Instant::now();
        let (r, buf) = sb.run(Request::receive(pool.try_alloc().expect("buffer")));
        let took = start.elapsed();
        eprintln!("owned receive, events {events}, timeout {timeout:?}: {took:?}");
        assert!(
            matches!(r, Err(Error::Timeout { .. })),
            "expected a timeout, got {r:?}"
        );
        assert!(took < HANG, "the 1 ms bound took {took:?}");
        drop(buf);
        assert_eq!(pool.available(), 1, "the buffer came back");
    }
}
