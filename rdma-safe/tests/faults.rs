//! Named provider scenarios under rdma-core's fault-injecting layer (the
//! `fault-injection` feature), on a real device: each fault on the
//! blocking calls, a polling scope and owned operations, each ending in a
//! typed error or a success whose bytes are checked, with the memory
//! oracle holding nothing of the test's queue pairs or buffers afterwards
//! (nothing returned while the NIC could still touch it).
//!
//! Built and run by `cargo xtask test-rxe` (which builds this file with the
//! feature); by hand: `cargo test -p rdma-safe --features fault-injection
//! --test faults -- --include-ignored --test-threads=1` beside a device.
#![cfg(feature = "fault-injection")]

mod common;

use common::{pattern, pd, registered, seed};
use rdma_core::fault::{self, Fault, Installed, Plan, Site, When};
use rdma_safe::owned::{OwnedRequest, Request};
use rdma_safe::work::WcStatus;
use rdma_safe::{
    error::{ErrorKind, Operation},
    BufferPool, Channel, Error, ProtectionDomain, ReceiveWorkRequest, RegisteredBuffer,
    RemoteAccessBuffer, RemoteMemoryRegion, ScopeError, SendWorkRequest, WorkSuccess,
    WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// Bytes of one piece of a batch.
const PIECE: usize = 1000;
/// Requests in a batch.
const BATCH: usize = 4;
/// What the peer's memory holds where nothing was written.
const FILL: u8 = 0xEE;
/// Linux's errno values the faults use.
const EINVAL: i32 = 22;
const ENOMEM: i32 = 12;
const EFAULT: i32 = 14;
/// The channels' bounded wait: short, since a failed scenario may wait it
/// out; long enough for rxe under emulation.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The safe paths a scenario runs on.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// `Channel::write` / `Channel::run_batch`.
    Blocking,
    /// `PollingScope::post` / `post_batch`, then `wait`.
    Scope,
    /// `SharedChannel::run` of an owning write or batch.
    Owned,
}

const PATHS: [Path; 3] = [Path::Blocking, Path::Scope, Path::Owned];

/// What may have landed in the peer's memory after a scenario.
#[derive(Clone, Copy, Debug)]
enum Landed {
    /// Every piece, byte for byte.
    All,
    /// Pieces from this index on were never posted: untouched. Each
    /// piece before it is untouched or whole.
    AtMost(usize),
}

/// One scenario's world: a connected pair, a source, the peer's memory.
struct World {
    pd: ProtectionDomain,
    a: Channel,
    b: Channel,
    src: RegisteredBuffer<Vec<u8>>,
    peer: RemoteAccessBuffer,
    pool: BufferPool,
}

impl World {
    fn new(tag: &str) -> World {
        let pd = pd();
        let (a, b) = common::pair_with_timeout(&pd, TIMEOUT);
        let src = registered(&pd, pattern(seed(tag, BATCH), BATCH * PIECE));
        let peer = RemoteAccessBuffer::new(&pd, BATCH * PIECE).expect("peer memory");
        peer.write(0, &[FILL; BATCH * PIECE])
            .expect("fill the peer");
        let pool = BufferPool::new(&pd, PIECE, 2 * BATCH).expect("pool");
        World {
            pd,
            a,
            b,
            src,
            peer,
            pool,
        }
    }

    fn qps(&self) -> [u32; 2] {
        [self.a.qp_num(), self.b.qp_num()]
    }

    /// Piece `i` of the peer's memory, as a remote region.
    fn remote(&self, i: usize) -> RemoteMemoryRegion {
        self.peer
            .remote()
            .slice((i * PIECE) as u64, PIECE as u64)
            .expect("a piece")
    }

    /// Writes pieces `0..n` of the source to the peer on `path`, in one
    /// post (a batch when `n` > 1).
    fn write(&mut self, path: Path, n: usize) -> rdma_safe::Result<WorkSuccess> {
        let remotes: Vec<_> = (0..n).map(|i| self.remote(i)).collect();
        match path {
            Path::Blocking | Path::Scope => {
                let gathers: Vec<_> = (0..n)
                    .map(|i| [self.src.gather(i * PIECE..(i + 1) * PIECE)])
                    .collect();
                let mut wrs: Vec<_> = (0..n)
                    .map(|i| WriteWorkRequest::new(&gathers[i], remotes[i]))
                    .collect();
                let a = &mut self.a;
                match (path, n) {
                    (Path::Blocking, 1) => a.write(wrs.pop().expect("one")),
                    (Path::Blocking, _) => a.run_batch(&mut wrs),
                    (_, 1) => Ok(a.scope(|s| s.post(wrs.pop().expect("one"))?.wait())?),
                    _ => Ok(a.scope(|s| s.post_batch(&mut wrs)?.wait())?),
                }
            }
            Path::Owned => {
                let sa = self.a.shared();
                let bytes = |i: usize| common::frozen(&self.pool, &self.src[i * PIECE..][..PIECE]);
                if n == 1 {
                    sa.run(Request::write(bytes(0), remotes[0])).0
                } else {
                    let reqs = (0..n)
                        .map(|i| OwnedRequest::write(bytes(i), remotes[i]))
                        .collect();
                    sa.run(Request::batch(reqs)).0
                }
            }
        }
    }

    /// The peer's memory against `landed`, and the oracle: nothing of the
    /// pair's queue pairs recorded, nothing naming the source, every pool
    /// buffer back.
    #[track_caller]
    fn verify(&self, what: &str, landed: Landed) {
        let mut got = vec![0; BATCH * PIECE];
        self.peer.read(0, &mut got).expect("read the peer");
        for i in 0..BATCH {
            let (piece, want) = (&got[i * PIECE..][..PIECE], &self.src[i * PIECE..][..PIECE]);
            let whole = piece == want;
            let untouched = piece.iter().all(|&x| x == FILL);
            match landed {
                Landed::All => assert!(whole, "{what}: piece {i} not written whole"),
                Landed::AtMost(k) if i >= k => {
                    assert!(
                        untouched,
                        "{what}: piece {i} written, but it was never posted"
                    )
                }
                Landed::AtMost(_) => assert!(whole || untouched, "{what}: piece {i} torn"),
            }
        }
        assert_oracle_clear(what, &self.qps(), &[&self.src[..]]);
        assert_eq!(
            self.pool.available(),
            self.pool.capacity(),
            "{what}: pool buffers missing"
        );
    }
}

/// The oracle records nothing of `qps` and no request names `bufs`.
#[track_caller]
fn assert_oracle_clear(what: &str, qps: &[u32], bufs: &[&[u8]]) {
    for &qp in qps {
        assert_eq!(
            fault::in_flight(qp),
            0,
            "{what}: QP {qp} still has requests in the NIC's hands"
        );
    }
    for b in bufs {
        if let Some(v) = fault::overlapping(b.as_ptr(), b.len()) {
            panic!("{what}: {v}");
        }
    }
}

/// `r` is a post error with `errno`.
#[track_caller]
fn assert_post_error<T: std::fmt::Debug>(what: &str, r: rdma_safe::Result<T>, errno: i32) {
    match r {
        Err(e @ Error::Post { .. }) => assert_eq!(e.errno(), Some(errno), "{what}: {e}"),
        other => panic!("{what}: expected a post error (errno {errno}), got {other:?}"),
    }
}

/// The plan fired `n` faults at `site` (never a scenario that passes
/// because its fault did not happen).
#[track_caller]
fn assert_fired(what: &str, installed: &Installed, site: Site, n: usize) {
    assert_eq!(
        installed.count(site),
        n,
        "{what}: faults injected at {site:?}"
    );
}

/// A channel that a failure poisoned: unusable, and says so at once.
#[track_caller]
fn assert_poisoned(what: &str, w: &mut World, path: Path) {
    assert!(!w.a.is_usable(), "{what}: the channel is still usable");
    let started = Instant::now();
    let r = w.write(path, 1);
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::Unusable),
        "{what}: the next write on the poisoned channel: {r:?}"
    );
    assert!(
        started.elapsed() < TIMEOUT,
        "{what}: refused only after a wait"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn mlx5_bad_wr_in_a_batch_shuts_the_channel_down() {
    for path in PATHS {
        let what = &format!("{path:?}: bad_wr at request 2 of {BATCH}");
        let mut w = World::new("mlx5-bad-wr");
        let plan = Plan::new(1).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::bad_wr_at(2),
        );
        let installed = fault::install(plan);
        let r = w.write(path, BATCH);
        assert_fired(what, &installed, Site::PostSend, 1);
        assert_post_error(what, r, EINVAL);
        // Requests 0 and 1 were queued for real: they ran or were flushed.
        w.verify(what, Landed::AtMost(2));
        assert_poisoned(what, &mut w, path);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn mlx5_bad_wr_at_the_head_leaves_the_channel_usable() {
    for path in PATHS {
        for n in [1, BATCH] {
            let what = &format!("{path:?}: bad_wr at the head of {n}");
            let mut w = World::new("mlx5-head");
            let plan = Plan::new(2).at_qp(
                w.a.qp_num(),
                Site::PostSend,
                When::Call(0),
                Fault::bad_wr_at(0),
            );
            let installed = fault::install(plan);
            assert_post_error(what, w.write(path, n), EINVAL);
            assert_fired(what, &installed, Site::PostSend, 1);
            w.verify(what, Landed::AtMost(0));
            assert!(
                w.a.is_usable(),
                "{what}: nothing was queued, the channel stays usable"
            );
            let done = w
                .write(path, n)
                .unwrap_or_else(|e| panic!("{what}: the retry: {e}"));
            assert_eq!(done.bytes(), n * PIECE, "{what}");
            w.verify(what, Landed::AtMost(n));
            let mut got = vec![0; n * PIECE];
            w.peer.read(0, &mut got).expect("read the peer");
            assert_eq!(got[..], w.src[..n * PIECE], "{what}: the retry's bytes");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rxe_refused_doorbell_shuts_the_channel_down() {
    for path in PATHS {
        for n in [1, BATCH] {
            let what = &format!("{path:?}: refused doorbell on {n}");
            let mut w = World::new("rxe-doorbell");
            let plan = Plan::new(3).at_qp(
                w.a.qp_num(),
                Site::PostSend,
                When::Call(0),
                Fault::refused_doorbell(),
            );
            let installed = fault::install(plan);
            assert_post_error(what, w.write(path, n), EINVAL);
            assert_fired(what, &installed, Site::PostSend, 1);
            // Everything was queued: each piece ran whole or was flushed.
            w.verify(what, Landed::AtMost(n));
            assert_poisoned(what, &mut w, path);
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn enomem_on_a_full_queue() {
    for path in PATHS {
        // At the head: nothing queued, the channel usable, a retry lands.
        let what = &format!("{path:?}: ENOMEM at the head");
        let mut w = World::new("enomem-head");
        let plan = Plan::new(4).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::queue_full_at(0),
        );
        let installed = fault::install(plan);
        assert_post_error(what, w.write(path, 1), ENOMEM);
        assert_fired(what, &installed, Site::PostSend, 1);
        assert!(w.a.is_usable(), "{what}");
        w.write(path, 1)
            .unwrap_or_else(|e| panic!("{what}: the retry: {e}"));
        w.verify(what, Landed::AtMost(1));
        drop(installed);

        // At request 3 of 4: three queued, the channel shut down.
        let what = &format!("{path:?}: ENOMEM at request 3 of {BATCH}");
        let mut w = World::new("enomem-batch");
        let plan = Plan::new(5).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::queue_full_at(3),
        );
        let installed = fault::install(plan);
        assert_post_error(what, w.write(path, BATCH), ENOMEM);
        assert_fired(what, &installed, Site::PostSend, 1);
        w.verify(what, Landed::AtMost(3));
        assert_poisoned(what, &mut w, path);
    }
}

/// `r` is the failure of a flushed write (or of the write before it, which
/// the flush may have caught in flight).
#[track_caller]
fn assert_flushed(what: &str, r: &rdma_safe::Result<WorkSuccess>) {
    match r {
        Err(Error::WorkCompletion {
            operation: Operation::Write,
            status: WcStatus::WrFlushError,
            ..
        }) => {}
        other => panic!("{what}: expected a flushed write, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn flush_in_the_middle_of_a_batch() {
    for path in PATHS {
        let what = &format!("{path:?}: flush after request 2 of {BATCH}");
        let mut w = World::new("flush-mid-batch");
        let plan = Plan::new(6).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::FlushAt { at: 2 },
        );
        let installed = fault::install(plan);
        let started = Instant::now();
        let r = w.write(path, BATCH);
        assert_fired(what, &installed, Site::PostSend, 1);
        assert_flushed(what, &r);
        assert!(
            started.elapsed() < TIMEOUT,
            "{what}: the flush was waited out"
        );
        w.verify(what, Landed::AtMost(2));
        // The queue pair is in ERR: the next write fails, typed, at once.
        let started = Instant::now();
        let next = w.write(path, 1);
        assert!(
            next.is_err(),
            "{what}: a write on a flushed queue pair succeeded"
        );
        assert!(
            started.elapsed() < TIMEOUT,
            "{what}: {next:?} only after a wait"
        );
        w.verify(what, Landed::AtMost(2));
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn garbage_in_the_undefined_fields_of_error_completions() {
    for path in PATHS {
        // Flushed writes: their status survives, their other fields are noise.
        let what = &format!("{path:?}: garbled flush completions");
        let mut w = World::new("garbage-flush");
        let a = w.a.qp_num();
        let plan = Plan::new(7)
            .at_qp(a, Site::PostSend, When::Call(0), Fault::FlushAt { at: 0 })
            .at(Site::ErrorCompletion, When::Always, Fault::Garble);
        let installed = fault::install(plan);
        let r = w.write(path, BATCH);
        assert_flushed(what, &r);
        assert!(
            installed.count(Site::ErrorCompletion) >= 1,
            "{what}: nothing garbled"
        );
        w.verify(what, Landed::AtMost(0));
        drop(installed);

        // A remote access error: the peer refuses a wrong key.
        let what = &format!("{path:?}: garbled remote access error");
        let mut w = World::new("garbage-rkey");
        let plan = Plan::new(8).at(Site::ErrorCompletion, When::Always, Fault::Garble);
        let installed = fault::install(plan);
        let good = w.remote(0);
        let bad = RemoteMemoryRegion::new(good.address(), good.length(), good.rkey() ^ 0x5a5a_0000);
        let r = match path {
            Path::Owned => {
                w.a.shared()
                    .run(Request::write(
                        common::frozen(&w.pool, &w.src[..PIECE]),
                        bad,
                    ))
                    .0
            }
            _ => {
                let g = [w.src.gather(..PIECE)];
                w.a.write(WriteWorkRequest::new(&g, bad))
            }
        };
        match &r {
            Err(Error::WorkCompletion {
                operation: Operation::Write,
                status: WcStatus::RemoteAccessError,
                ..
            }) => {}
            other => panic!("{what}: expected a remote access error, got {other:?}"),
        }
        assert!(
            installed.count(Site::ErrorCompletion) >= 1,
            "{what}: nothing garbled"
        );
        w.verify(what, Landed::AtMost(0));
    }

    // Flushed receives: their operation comes from the engine's records,
    // not from the completion's opcode.
    for path in PATHS {
        let what = &format!("{path:?}: garbled flushed receive");
        let mut w = World::new("garbage-recv");
        let plan = Plan::new(9)
            .at_qp(
                w.b.qp_num(),
                Site::PostRecv,
                When::Call(0),
                Fault::FlushAt { at: 0 },
            )
            .at(Site::ErrorCompletion, When::Always, Fault::Garble);
        let installed = fault::install(plan);
        let mut rx = registered(&w.pd, vec![FILL; PIECE]);
        let r = match path {
            Path::Blocking => w.b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)])),
            Path::Scope => {
                w.b.scope(|s| {
                    let mut sc = [rx.scatter(..)];
                    s.post_receive(ReceiveWorkRequest::new(&mut sc))?.wait()
                })
                .map_err(ScopeError::flatten)
            }
            Path::Owned => {
                let buf = w.pool.try_alloc().expect("a buffer");
                w.b.shared().run(Request::receive(buf)).0
            }
        };
        assert_fired(what, &installed, Site::PostRecv, 1);
        match &r {
            Err(Error::WorkCompletion {
                operation: Operation::Receive,
                status: WcStatus::WrFlushError,
                ..
            }) => {}
            other => panic!("{what}: expected a flushed receive, got {other:?}"),
        }
        assert!(
            installed.count(Site::ErrorCompletion) >= 1,
            "{what}: nothing garbled"
        );
        assert!(
            rx.iter().all(|&x| x == FILL),
            "{what}: the flushed receive wrote"
        );
        assert_oracle_clear(what, &w.qps(), &[&rx[..]]);
        w.verify(what, Landed::AtMost(0));
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn poll_errors() {
    for path in PATHS {
        for when in [When::Call(0), When::Call(1), When::PerMille(300)] {
            let what = &format!("{path:?}: poll_cq fails at {when:?}");
            let mut w = World::new("poll-error");
            let installed = fault::install(Plan::new(10).at(Site::PollCq, when, Fault::PollError));
            let mut outcomes = Vec::new();
            for _ in 0..8 {
                let r = w.write(path, BATCH);
                let failed = r.is_err();
                outcomes.push(r.map(|d| d.bytes()));
                if failed {
                    break;
                }
            }
            assert!(installed.count(Site::PollCq) >= 1, "{what}: no poll failed");
            drop(installed);
            // Every outcome a success or the poll's failure, and nothing of
            // the writes still in the NIC's hands.
            // A failed poll either fails the wait (`Poll`) or, when the
            // engine met it while reaping for another purpose, shuts the
            // channel down, which the next operation reports (`Unusable`,
            // naming the poll).
            println!("{what}: {outcomes:?}");
            for o in &outcomes {
                match o {
                    Ok(bytes) => assert_eq!(*bytes, BATCH * PIECE, "{what}"),
                    Err(Error::Poll(_)) => {}
                    Err(Error::Unusable(why)) if why.contains("poll") => {}
                    Err(e) => panic!("{what}: {e} ({outcomes:?})"),
                }
            }
            let landed = if outcomes.iter().all(Result::is_ok) {
                Landed::All
            } else {
                Landed::AtMost(BATCH)
            };
            w.verify(what, landed);
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn completions_held_back() {
    for path in PATHS {
        for polls in [1, 3, 200] {
            let what = &format!("{path:?}: completions held back for {polls} polls");
            let mut w = World::new("held-back");
            let plan = Plan::new(11).at(
                Site::PollCq,
                When::Call(0),
                Fault::HoldCompletions { polls },
            );
            let installed = fault::install(plan);
            let started = Instant::now();
            let done = w
                .write(path, BATCH)
                .unwrap_or_else(|e| panic!("{what}: {e} after {:?}", started.elapsed()));
            assert_fired(what, &installed, Site::PollCq, 1);
            assert_eq!(done.bytes(), BATCH * PIECE, "{what}");
            w.verify(what, Landed::All);
            let mut got = vec![0; BATCH * PIECE];
            w.peer.read(0, &mut got).expect("read the peer");
            assert_eq!(got[..], w.src[..], "{what}: the bytes");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_registrations() {
    let pd = pd();
    for errno in [ENOMEM, EFAULT] {
        let what = &format!("registration refused with errno {errno}");
        let installed = fault::install(Plan::new(12).at(
            Site::RegisterMr,
            When::Call(0),
            Fault::Refuse { errno },
        ));
        match RegisteredBuffer::new(&pd, 4096) {
            Err(e) => assert_eq!(e.errno(), Some(errno), "{what}: {e}"),
            Ok(_) => panic!("{what}: registered"),
        }
        match RemoteAccessBuffer::new(&pd, 4096) {
            Ok(b) => drop(b),
            Err(e) => panic!("{what}: the next registration: {e}"),
        }
        assert_fired(what, &installed, Site::RegisterMr, 1);
        // A pool registers its slabs: refused, it is not made.
        let installed = fault::install(Plan::new(13).at(
            Site::RegisterMr,
            When::Always,
            Fault::Refuse { errno },
        ));
        assert!(BufferPool::new(&pd, 4096, 4).is_err(), "{what}: a pool");
        assert!(installed.count(Site::RegisterMr) >= 1, "{what}");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_creations() {
    let pd = pd();
    for site in [Site::CreateCq, Site::CreateQp] {
        let what = &format!("{site:?} refused");
        let installed =
            fault::install(Plan::new(14).at(site, When::Call(0), Fault::Refuse { errno: ENOMEM }));
        match pd.create_channel() {
            Err(e) => assert_eq!(e.errno(), Some(ENOMEM), "{what}: {e}"),
            Ok(_) => panic!("{what}: a channel was made"),
        }
        assert_fired(what, &installed, site, 1);
        let (mut a, mut b) = (pd.create_channel(), pd.create_channel());
        let (a, b) = (
            a.as_mut().expect("the next channel"),
            b.as_mut().expect("b"),
        );
        Channel::connect_pair(a, b).expect("connect after the refusal");
    }
    let installed = fault::install(Plan::new(15).at(
        Site::CreateSrq,
        When::Call(0),
        Fault::Refuse { errno: ENOMEM },
    ));
    match rdma_safe::SharedReceiveQueue::new(&pd, 16, 256) {
        Err(e) => assert_eq!(e.errno(), Some(ENOMEM), "SRQ refused: {e}"),
        Ok(_) => panic!("SRQ refused: made"),
    }
    assert_fired("SRQ", &installed, Site::CreateSrq, 1);
    // A refused connect step (INIT → RTR): a typed error, nothing else.
    let (mut a, mut b) = (
        pd.create_channel().expect("a"),
        pd.create_channel().expect("b"),
    );
    let installed = fault::install(Plan::new(16).at_qp(
        b.qp_num(),
        Site::ModifyQp,
        When::Call(1),
        Fault::Refuse { errno: EINVAL },
    ));
    match Channel::connect_pair(&mut a, &mut b) {
        Err(e) => assert_eq!(e.errno(), Some(EINVAL), "refused RTR: {e}"),
        Ok(()) => panic!("connected through a refused modify"),
    }
    assert_fired("refused modify", &installed, Site::ModifyQp, 1);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_queue_pair_smaller_than_asked() {
    let pd = pd();
    let small = Fault::SmallerQp {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_inline_data: 0,
    };
    let installed = fault::install(Plan::new(17).at(Site::CreateQp, When::Call(0), small));
    let mut a = pd
        .channel_builder()
        .timeout(TIMEOUT)
        .build()
        .expect("a smaller channel");
    assert_fired("smaller QP", &installed, Site::CreateQp, 1);
    drop(installed);
    let mut b = pd.channel_builder().timeout(TIMEOUT).build().expect("b");
    Channel::connect_pair(&mut a, &mut b).expect("connect");
    let src = registered(&pd, pattern(seed("smaller-qp", 1), BATCH * PIECE));
    let peer = RemoteAccessBuffer::new(&pd, BATCH * PIECE).expect("peer");
    let gathers: Vec<_> = (0..BATCH)
        .map(|i| [src.gather(i * PIECE..(i + 1) * PIECE)])
        .collect();
    let remote = |i: usize| {
        peer.remote()
            .slice((i * PIECE) as u64, PIECE as u64)
            .expect("piece")
    };
    let mut wrs: Vec<_> = (0..BATCH)
        .map(|i| WriteWorkRequest::new(&gathers[i], remote(i)))
        .collect();
    // A batch larger than the queue: refused before the verb, typed.
    match a.run_batch(&mut wrs) {
        Err(e) => assert!(a.is_usable(), "refused, not poisoned: {e}"),
        Ok(_) => panic!("a batch of {BATCH} on a send queue of 2"),
    }
    // In a scope, a post beyond the queue's room is refused before the
    // verb (typed, the channel usable); two at a time fit.
    a.scope(|s| {
        let mut wrs = wrs.drain(..);
        let first: Vec<_> = wrs
            .by_ref()
            .take(2)
            .map(|wr| s.post(wr))
            .collect::<Result<_, _>>()?;
        let third = wrs.next().expect("a third write");
        match s.post(third) {
            Err(Error::Post { .. }) => {}
            other => panic!("a third write on a queue of 2: {other:?}"),
        }
        first.into_iter().try_for_each(|h| h.wait().map(drop))?;
        let rest: Vec<_> = [third]
            .into_iter()
            .chain(wrs)
            .map(|wr| s.post(wr))
            .collect::<Result<_, _>>()?;
        rest.into_iter().try_for_each(|h| h.wait().map(drop))
    })
    .expect("writes through a small queue");
    let mut got = vec![0; BATCH * PIECE];
    peer.read(0, &mut got).expect("read");
    assert_eq!(got[..], src[..], "the writes' bytes");
    assert_oracle_clear("smaller QP", &[a.qp_num(), b.qp_num()], &[&src[..]]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_shared_receive_queue_refills() {
    let pd = pd();
    let (mut srq, mut a, _b) = common::srq_pair(&pd, 8, 64);
    let tx = registered(&pd, pattern(seed("srq-refill", 1), 64));
    let mut buf = [0u8; 64];
    let mut exchange = |srq: &mut rdma_safe::SharedReceiveQueue, n: usize, what: &str| {
        for _ in 0..n {
            a.send(SendWorkRequest::new(&[tx.gather(..)]))
                .unwrap_or_else(|e| panic!("{what}: send: {e}"));
            let r = srq
                .receive(&mut buf, TIMEOUT)
                .unwrap_or_else(|e| panic!("{what}: receive: {e}"))
                .unwrap_or_else(|| panic!("{what}: no message"));
            assert_eq!(buf[..r.len()], tx[..], "{what}: the message");
        }
    };
    exchange(&mut srq, 4, "before the faults");
    for (fault, what) in [
        (Fault::refused_doorbell(), "rxe: the SRQ's doorbell refused"),
        (Fault::bad_wr_at(1), "mlx5: bad_wr at the second receive"),
        (Fault::queue_full_at(0), "mlx5: the SRQ full"),
    ] {
        let installed = fault::install(Plan::new(18).at(Site::PostSrqRecv, When::Call(0), fault));
        let r = srq.refill();
        assert_fired(what, &installed, Site::PostSrqRecv, 1);
        assert!(matches!(r, Err(Error::Post { .. })), "{what}: {r:?}");
        drop(installed);
        // What the refusal left posted still takes messages; a refill
        // posts the rest.
        exchange(&mut srq, 2, what);
        srq.refill()
            .unwrap_or_else(|e| panic!("{what}: the next refill: {e}"));
        exchange(&mut srq, 4, what);
    }
}

/// A receive of one message into `rx` on `path`, the message sent by `a`
/// from another thread (no plan there) once the receive may be posted.
fn receive_one(
    path: Path,
    w: &mut World,
    rx: &mut RegisteredBuffer<Vec<u8>>,
) -> rdma_safe::Result<WorkSuccess> {
    let (a, b, src, pool) = (&mut w.a, &mut w.b, &w.src, &w.pool);
    std::thread::scope(|t| {
        let sender = t.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            a.send(SendWorkRequest::new(&[src.gather(..PIECE)]))
        });
        let got = match path {
            Path::Blocking => b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..PIECE)])),
            Path::Scope => b
                .scope(|s| {
                    let mut sc = [rx.scatter(..PIECE)];
                    s.post_receive(ReceiveWorkRequest::new(&mut sc))?.wait()
                })
                .map_err(ScopeError::flatten),
            Path::Owned => {
                let (r, buf) = b
                    .shared()
                    .run(Request::receive(pool.try_alloc().expect("a buffer")));
                if r.is_ok() {
                    rx[..PIECE].copy_from_slice(&buf[..PIECE]);
                }
                r
            }
        };
        // A refused receive takes no message: the send then fails or
        // times out (the sender's bounded wait), which is not this test's.
        let _ = sender.join().expect("the sender");
        got
    })
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_receive_posts() {
    for path in PATHS {
        // mlx5, the head refused: nothing queued; the retry takes the message.
        let what = &format!("{path:?}: receive refused at the head");
        let mut w = World::new("recv-head");
        let mut rx = registered(&w.pd, vec![FILL; PIECE]);
        let plan = Plan::new(19).at_qp(
            w.b.qp_num(),
            Site::PostRecv,
            When::Call(0),
            Fault::bad_wr_at(0),
        );
        let installed = fault::install(plan);
        match path {
            Path::Blocking => {
                let r = w.b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]));
                assert_post_error(what, r, EINVAL);
            }
            Path::Scope => {
                let r = w.b.scope(|s| {
                    s.post_receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
                        .map(drop)
                });
                assert_post_error(what, r.map_err(ScopeError::flatten), EINVAL);
            }
            Path::Owned => {
                let buf = w.pool.try_alloc().expect("a buffer");
                let (r, _) = w.b.shared().run(Request::receive(buf));
                assert_post_error(what, r, EINVAL);
            }
        }
        assert_fired(what, &installed, Site::PostRecv, 1);
        assert!(w.b.is_usable(), "{what}: nothing was queued");
        assert!(rx.iter().all(|&x| x == FILL), "{what}: written");
        let done = receive_one(path, &mut w, &mut rx).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(done.bytes(), PIECE, "{what}");
        assert_eq!(rx[..], w.src[..PIECE], "{what}: the message");
        assert_oracle_clear(what, &w.qps(), &[&rx[..]]);
        drop(installed);

        // rxe, the doorbell refused: the receive may be queued; the channel
        // is shut down before the memory comes back.
        let what = &format!("{path:?}: receive doorbell refused");
        let mut w = World::new("recv-doorbell");
        let mut rx = registered(&w.pd, vec![FILL; PIECE]);
        let plan = Plan::new(20).at_qp(
            w.b.qp_num(),
            Site::PostRecv,
            When::Call(0),
            Fault::refused_doorbell(),
        );
        let installed = fault::install(plan);
        let r = match path {
            Path::Blocking => w.b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)])),
            Path::Scope => {
                w.b.scope(|s| {
                    s.post_receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))?
                        .wait()
                })
                .map_err(ScopeError::flatten)
            }
            Path::Owned => {
                let buf = w.pool.try_alloc().expect("a buffer");
                w.b.shared().run(Request::receive(buf)).0
            }
        };
        assert_fired(what, &installed, Site::PostRecv, 1);
        assert_post_error(what, r, EINVAL);
        assert!(!w.b.is_usable(), "{what}: still usable");
        assert!(rx.iter().all(|&x| x == FILL), "{what}: written");
        assert_oracle_clear(what, &w.qps(), &[&rx[..]]);
        assert_eq!(
            w.pool.available(),
            w.pool.capacity(),
            "{what}: pool buffers missing"
        );
    }
}
