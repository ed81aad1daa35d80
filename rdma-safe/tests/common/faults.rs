//! The fault scenarios' shared world (`faults_*.rs`, built with the
//! `fault-injection` feature): a connected pair with a source and the
//! peer's memory, the safe paths a scenario runs on, and the checks every
//! scenario ends with — the peer's bytes, and the memory oracle holding
//! nothing of the pair's queue pairs or buffers.

use super::{pattern, pd, registered, seed};
use rdma_core::fault::{self, Installed, Site};
use rdma_safe::owned::{Completed, OwnedBuffer, OwnedRequest, Request};
use rdma_safe::work::WcStatus;
use rdma_safe::{
    error::{ErrorKind, Operation},
    BufferPool, Channel, Error, ProtectionDomain, RegisteredBuffer, RemoteAccessBuffer,
    RemoteMemoryRegion, WorkSuccess, WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// Bytes of one piece of a batch.
pub const PIECE: usize = 1000;
/// Requests in a batch.
pub const BATCH: usize = 4;
/// What the peer's memory holds where nothing was written.
pub const FILL: u8 = 0xEE;
/// Linux's errno values the faults use.
pub const EINVAL: i32 = 22;
pub const ENOMEM: i32 = 12;
pub const EFAULT: i32 = 14;
/// The channels' bounded wait: short, since a failed scenario may wait it
/// out; long enough for rxe under emulation.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The safe paths a scenario runs on.
#[derive(Clone, Copy, Debug)]
pub enum Path {
    /// `Channel::write` / `Channel::run_batch`.
    Blocking,
    /// `PollingScope::post` / `post_batch`, then `wait`.
    Scope,
    /// `SharedChannel::run` of an owning write or batch.
    Owned,
    /// An owning operation's future (`SharedChannel::submit`), awaited on
    /// a current-thread tokio runtime over completion events.
    Async,
}

pub const PATHS: [Path; 4] = [Path::Blocking, Path::Scope, Path::Owned, Path::Async];

/// What may have landed in the peer's memory after a scenario.
#[derive(Clone, Copy, Debug)]
pub enum Landed {
    /// Every piece, byte for byte.
    All,
    /// Pieces from this index on were never posted: untouched. Each
    /// piece before it is untouched or whole.
    AtMost(usize),
}

/// One scenario's world: a connected pair, a source, the peer's memory.
pub struct World {
    pub pd: ProtectionDomain,
    pub a: Channel,
    pub b: Channel,
    pub src: RegisteredBuffer<Vec<u8>>,
    pub peer: RemoteAccessBuffer,
    pub pool: BufferPool,
}

impl World {
    /// The world of a scenario on `path` (the async path's channels have
    /// completion events; the others busy-poll).
    pub fn new(path: Path, tag: &str) -> World {
        let pd = pd();
        let events = matches!(path, Path::Async);
        let (a, b) = super::pair_with(&pd, |c| c.timeout(TIMEOUT).completion_events(events));
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

    /// Replaces the pair with a new one on the same protection domain (the
    /// same device context), as a reconnecting caller makes, after
    /// checking that the oracle holds nothing of the old pair.
    #[track_caller]
    pub fn reconnect(&mut self, path: Path, what: &str) {
        assert_oracle_clear(what, &self.qps(), &[&self.src[..]]);
        let events = matches!(path, Path::Async);
        let (a, b) = super::pair_with(&self.pd, |c| c.timeout(TIMEOUT).completion_events(events));
        self.a = a;
        self.b = b;
    }

    pub fn qps(&self) -> [u32; 2] {
        [self.a.qp_num(), self.b.qp_num()]
    }

    /// Piece `i` of the peer's memory, as a remote region.
    pub fn remote(&self, i: usize) -> RemoteMemoryRegion {
        self.peer
            .remote()
            .slice((i * PIECE) as u64, PIECE as u64)
            .expect("a piece")
    }

    /// Writes pieces `0..n` of the source to the peer on `path`, in one
    /// post (a batch when `n` > 1).
    pub fn write(&mut self, path: Path, n: usize) -> rdma_safe::Result<WorkSuccess> {
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
            Path::Owned | Path::Async => {
                let bytes = |i: usize| super::frozen(&self.pool, &self.src[i * PIECE..][..PIECE]);
                if n == 1 {
                    run_owned(path, &self.a, Request::write(bytes(0), remotes[0])).0
                } else {
                    let reqs = (0..n)
                        .map(|i| OwnedRequest::write(bytes(i), remotes[i]))
                        .collect();
                    run_owned(path, &self.a, Request::batch(reqs)).0
                }
            }
        }
    }

    /// The peer's memory against `landed`, and the oracle: nothing of the
    /// pair's queue pairs recorded, nothing naming the source, every pool
    /// buffer back.
    #[track_caller]
    pub fn verify(&self, what: &str, landed: Landed) {
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
pub fn assert_oracle_clear(what: &str, qps: &[u32], bufs: &[&[u8]]) {
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
pub fn assert_post_error<T: std::fmt::Debug>(what: &str, r: rdma_safe::Result<T>, errno: i32) {
    match r {
        Err(e @ Error::Post { .. }) => assert_eq!(e.errno(), Some(errno), "{what}: {e}"),
        other => panic!("{what}: expected a post error (errno {errno}), got {other:?}"),
    }
}

/// The plan fired `n` faults at `site` (never a scenario that passes
/// because its fault did not happen).
#[track_caller]
pub fn assert_fired(what: &str, installed: &Installed, site: Site, n: usize) {
    assert_eq!(
        installed.count(site),
        n,
        "{what}: faults injected at {site:?}"
    );
}

/// A channel that a failure poisoned: unusable, and says so at once.
#[track_caller]
pub fn assert_poisoned(what: &str, w: &mut World, path: Path) {
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

/// `r` is the failure of a flushed write (or of the write before it, which
/// the flush may have caught in flight).
#[track_caller]
pub fn assert_flushed(what: &str, r: &rdma_safe::Result<WorkSuccess>) {
    match r {
        Err(Error::WorkCompletion {
            operation: Operation::Write,
            status: WcStatus::WrFlushError,
            ..
        }) => {}
        other => panic!("{what}: expected a flushed write, got {other:?}"),
    }
}

/// Runs the owning `req` on `ch`: blocking (`SharedChannel::run`) on
/// [`Path::Owned`], else as a future on a current-thread tokio runtime
/// (this thread: the fault plan is this thread's).
pub fn run_owned<B: OwnedBuffer>(path: Path, ch: &Channel, req: Request<B>) -> Completed<B> {
    if !matches!(path, Path::Async) {
        return ch.shared().run(req);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let sa = ch.shared().with_tokio().expect("register with tokio");
        sa.submit(req).await
    })
}
