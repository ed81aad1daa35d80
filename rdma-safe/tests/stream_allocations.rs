//! What a byte stream's write and read cost the allocator: nothing per
//! call once warm. Counted with a global allocator over many 4 KiB
//! round trips between our client and our server (both threads counted),
//! after a warm-up long enough for the engine's slot ring to reach its
//! size: it spans every id from the oldest request still posted to the
//! newest, and a stream keeps its 256 receives posted while writes and
//! credit updates take ids between them.

mod common;

use common::counting::{allocations, Counting};

use common::device_ip;
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::{RdmaStream, StreamListener};
use std::io::{Read, Write};
use std::time::Duration;

#[global_allocator]
static ALLOC: Counting = Counting;

const WARM: usize = 1500;
const ROUNDS: usize = 2000;
const SIZE: usize = 4096;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn writes_and_reads_allocate_nothing_per_call() {
    let opts = CmOptions::default().timeout(Duration::from_secs(20));
    let listener = StreamListener::bind_with(format!("{}:0", device_ip()), &opts).expect("listen");
    let addr = listener.local_addr().expect("bound");
    std::thread::scope(|t| {
        let server = t.spawn(move || {
            let mut s = listener.accept().expect("accept");
            let mut buf = vec![0u8; SIZE];
            // Echoes every round trip back.
            for _ in 0..WARM + ROUNDS {
                s.read_exact(&mut buf).expect("read");
                s.write_all(&buf).expect("echo");
            }
            s.flush().expect("flush");
        });
        let mut c = RdmaStream::connect_with(addr, &opts).expect("connect");
        let out: Vec<u8> = (0..SIZE).map(|i| (i * 7) as u8).collect();
        let mut back = vec![0u8; SIZE];
        let mut before = 0;
        for round in 0..WARM + ROUNDS {
            if round == WARM {
                before = allocations();
            }
            c.write_all(&out).expect("write");
            c.read_exact(&mut back).expect("read the echo");
        }
        let allocated = allocations() - before;
        assert!(back == out, "the echo is what was sent");
        assert_eq!(
            allocated, 0,
            "{allocated} allocations in {ROUNDS} round trips of {SIZE} bytes"
        );
        server.join().expect("server");
    });
}
