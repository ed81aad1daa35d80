//! A safe RDMA API: the borrow checker, not the programmer's discipline,
//! keeps the NIC away from freed or exclusively borrowed memory.
//!
//! Which part of the API to use for latency or for throughput, inline
//! data, busy polling or events, batches, prepared requests and the build
//! profile: the [performance guide](docs::performance).
//!
//! # Safety architecture
//!
//! * **Registration** ([`RegisteredBuffer`], [`MemoryRegion`]). The NIC uses
//!   the physical pages pinned at registration, not virtual addresses, so a
//!   registration is sound only while its range stays on those pages. A
//!   [`RegisteredBuffer`] owns (or exclusively borrows, carrying the borrow's
//!   lifetime) the memory it registers and deregisters before releasing it:
//!   that is the safe way to register. Registering a raw address range
//!   ([`MemoryRegion::register_local_mr`]) is `unsafe`, its caller promising
//!   the range is not freed, reallocated or remapped while registered — a
//!   documented departure from the design this crate follows, whose local
//!   registration was safe (see the [`memory`] module for why it cannot be).
//!   Registering a byte buffer with *remote* access is `unsafe` as well: a
//!   peer can then read or write the memory at any time, outside any Rust
//!   borrow. [`RemoteAccessBuffer`] is the safe way: memory Rust reaches only
//!   through atomic 8-byte accesses, never as a slice (see its module docs).
//! * **Atomics** ([`AtomicWorkRequest`]): compare-and-swap and fetch-and-add
//!   on an aligned remote word, checked before posting; the old value lands
//!   in an 8-byte scatter element, borrowed like any other.
//! * **Memory windows** ([`Channel::lend`]): an exclusively borrowed slice is
//!   lent to the peer through a type 2 window for the length of a closure;
//!   the callee invalidates the window and deregisters the memory before the
//!   borrow ends, so the peer's key fails afterwards (see the [`window`]
//!   module for the threat model).
//! * **Datagrams and shared receive queues** ([`DatagramEndpoint`],
//!   [`SharedReceiveQueue`]): the receive memory is owned by the endpoint or
//!   queue, reached by Rust only through atomic copies, and outlives every
//!   queue pair that can write it; messages are copied out, so no user
//!   memory is lent to a receive that may complete at any time.
//! * **Scatter/gather elements**. A [`GatherElement<'a>`](GatherElement) holds a
//!   `&'a [u8]` (the NIC reads; nobody writes), a
//!   [`ScatterElement<'a>`](ScatterElement) a `&'a mut [u8]` (the NIC writes;
//!   nobody else touches it); both borrow their region. With the page
//!   identity above, an element over a slice inside its region names exactly
//!   that slice's pages; a slice outside its region is caught by the hardware
//!   (Local Protection Error), never undefined behaviour.
//! * **Operations** ([`Channel`]). Blocking operations return only after the
//!   completion. [`Channel::scope`] and [`Channel::manual_scope`] let many
//!   operations be in flight and guarantee — in the callee, with
//!   `catch_unwind`, not in a guard's `Drop` — that all of them completed
//!   before the scope returns, even if handles were `mem::forget`-ed or the
//!   closure panicked (see the [`scope`] module). The `*_unpolled` methods
//!   rely on `Drop` and are therefore `unsafe`.
//! * **Batches**. [`Channel::run_batch`] and [`PollingScope::post_batch`]
//!   post many sends, writes, reads or atomics with one doorbell and
//!   signal only the last: a reliable connection completes its send queue in order, so the
//!   last completion (success, error or flush) covers the whole batch.
//!   [`PollingScope::post_receive_batch`] posts many receives with one
//!   `ibv_post_recv` call; receives complete one by one, so each keeps its
//!   own handle ([`PollingScope::post_receive_batch_into`] appends them to
//!   a collection of the caller's). The verb's list of a batch of up to 32
//!   requests is built on the stack, not allocated. A loop that posts the
//!   same requests again and again prepares them once
//!   ([`PollingScope::prepare_sends`], `prepare_writes`, `prepare_reads`):
//!   a [`PreparedBatch`] keeps the checked, built list, and
//!   [`PollingScope::post_prepared`] only gives it its id, as perftest
//!   posts its prebuilt requests.
//! * **Owned buffers** ([`BufferPool`], [`SharedChannel`]). For services
//!   and async code, operations can instead take pool buffers by value and
//!   give them back with the completion (blocking, callback, or future). The
//!   engine's slot for the request holds the buffer until the completion
//!   was seen, so dropping or forgetting any handle or future is harmless
//!   (see the [`owned`] module).
//! * **Bounded waits**. Every wait has a timeout. When it expires the queue
//!   pair is moved to the error state, which makes the NIC flush all
//!   outstanding work; the flush completions are drained before the call
//!   returns. A timed-out call therefore never returns while the NIC may
//!   still touch borrowed memory, and never waits forever.
//! * **User code inside the library.** No code of the user's — an
//!   `Extend` that handles go to, a `Waker` (its `wake` or its `Drop`), a
//!   completion callback, a pool waiter's waker woken by a returned buffer
//!   — runs while the library's bookkeeping is incomplete, while it holds
//!   the engine's lock, or inside a wait that must not unwind. Every posted
//!   id is recorded before user code sees a handle (a scope waits for the
//!   receives of an `Extend` that took none of their handles; the futures
//!   of [`SharedChannel::start_receives`] that an `Extend` drops are
//!   abandoned, their buffers returned once their completions are seen).
//!   Completions are recorded under the lock, and the wakers they wake, the
//!   wakers replaced by newer ones and the memory of abandoned requests are
//!   woken or dropped once it is released, each with its panic contained
//!   and reported through `log`: a panicking waker loses no completion and
//!   aborts nothing. A callback's panic unwinds to the caller of
//!   [`SharedChannel::run_callbacks`], every other completion delivered and
//!   the other callbacks still queued. (A waker is still *cloned* under the
//!   lock: a clone only makes a reference.)
//!
//! # Where things are
//!
//! The crate root holds what a program starts from: [`ProtectionDomain`],
//! [`Channel`] and its builder, the memory types, the elements and work
//! requests, [`PollingScope`], [`SharedChannel`] and [`BufferPool`],
//! [`Listener`], [`DatagramEndpoint`], [`SharedReceiveQueue`], and the one
//! [`Error`] with its [`Result`]. Everything else lives in its module:
//!
//! | module | holds |
//! |---|---|
//! | [`channel`] | connecting: [`ConnectOptions`](channel::ConnectOptions), [`Endpoint`](channel::Endpoint), the verbs-layer parameter types; [`SharedCompletionQueue`](channel::SharedCompletionQueue), one completion queue polled for many channels |
//! | [`cm`] | the connection manager: options, [`Connector`](cm::Connector), [`Incoming`](cm::Incoming) |
//! | [`memory`] | why registration is sound; [`AccessFlags`](memory::AccessFlags), [`AlignedBuffer`](memory::AlignedBuffer), [`StableBuffer`](memory::StableBuffer) |
//! | [`work`] | atomics' operands, [`PendingWork`], completion opcodes and statuses |
//! | [`scope`] | how scopes keep borrowed memory sound |
//! | [`owned`] | owned operations: requests, futures, streams, reactors |
//! | [`pool`] | pool buffers |
//! | [`datagram`], [`srq`], [`window`] | datagrams, shared receive queues, memory windows |
//! | [`stream`] | byte streams that speak rsocket: [`RdmaStream`](stream::RdmaStream) (`Read`/`Write`, tokio's `AsyncRead`/`AsyncWrite`), [`StreamListener`](stream::StreamListener) |
//! | [`exchange`] | deadline-bounded out-of-band exchanges over TCP: [`Bounded`](exchange::Bounded), [`swap`](exchange::swap) |
//! | [`error`] | the error's kinds and details, [`Operation`](error::Operation) |
//!
//! # Which memory for which job
//!
//! | the job | use | why |
//! |---|---|---|
//! | buffers for your own sends, receives, reads and writes (blocking or scoped) | [`RegisteredBuffer`] | owns or borrows its memory; elements borrow it for each operation |
//! | a table or region peers read (or write, or update atomically) at any time | [`RemoteAccessBuffer`] | no `unsafe`: Rust reaches it only through atomic copies, so a peer's access never races a Rust borrow; send [`RemoteAccessBuffer::remote`] with the CM's accept or over a stream |
//! | lending one of your slices to a peer for a while | [`Channel::lend`] | a memory window the callee revokes before the borrow ends: the peer's key stops working first |
//! | memory you manage yourself, exposed to peers | `unsafe` [`MemoryRegion::register_shared_mr`] | you promise not to touch or free it while peers may (the only unchecked way) |
//! | async services, callbacks, many requests in flight | [`BufferPool`] + [`SharedChannel`] | each operation owns its buffer and gives it back with the completion: dropping a future is harmless |
//! | one memory for many connections | [`ProtectionDomain::open`] + `Listener::bind_in` / `Channel::connect_in` (or their `*_async` forms) | every CM connection in your domain: one table, one pool |
//!
//! Replies matched to requests over one channel need one task that owns
//! the receive stream and hands each reply to the request waiting for it
//! (a router): `rdma-safe/examples/cm_service.rs` shows one, next to
//! `kv_reader.rs`, a blocking one-sided table reader. A server whose
//! clients speak first posts its receives before it accepts
//! ([`cm::Incoming::prepare`]): a client may send before the server sees
//! the connection established.
//!
//! # Cargo features
//!
//! Both are off by default: the core is runtime-agnostic, and its futures
//! busy-poll when no reactor drives them.
//!
//! | feature | adds |
//! |---|---|
//! | `tokio` | `SharedChannel::with_tokio` and `TokioReactor` (futures sleep on the completion channel, woken by one driver task per channel), the `*_async` connection-manager calls (`Listener::accept_async`, `Channel::connect_to_async`, …); implies `futures` |
//! | `futures` | `futures_core::Stream` for [`RecvStream`](owned::RecvStream) (the end of the stream on a clean disconnect) |
//!
//! Items that need a feature say so in these docs (docs.rs builds them
//! with every feature).
//!
//! # Example: loopback transfer
//!
//! ```no_run
//! use rdma_safe::{Channel, ProtectionDomain, ReceiveWorkRequest, RegisteredBuffer, SendWorkRequest};
//!
//! # fn main() -> Result<(), rdma_safe::Error> {
//! let pd = ProtectionDomain::open("rxe0")?;
//! let (mut a, mut b) = (pd.create_channel()?, pd.create_channel()?);
//! Channel::connect_pair(&mut a, &mut b)?;
//!
//! let tx = RegisteredBuffer::register(&pd, b"hello, RDMA".to_vec())?;
//! let mut rx = RegisteredBuffer::new(&pd, 64)?;
//!
//! let got = b.scope(|s| {
//!     let mut scatter = [rx.scatter(..)];
//!     let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
//!     a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
//!     recv.wait()
//! })?;
//! assert_eq!(&rx[..got.bytes()], b"hello, RDMA");
//! # Ok(())
//! # }
//! ```
//!
//! The same program is `rdma-safe/examples/loopback.rs`, which
//! `cargo xtask test-rxe` runs on a soft-RoCE device.
//!
//! # Adding a verb
//!
//! For contributors: the files a new operation touches, in order, as the
//! atomics were added. Required steps first.
//!
//! 1. **The work request** (`rdma-core`): a constructor on
//!    `rdma_core::SendRequest` (`rdma-core/src/wr/send.rs`) for the
//!    opcode; for a verb that exists only in the extended QP API
//!    (`ibv_wr_*`, e.g. RDMA flush or atomic write), a method on
//!    `rdma_core::WrBatch` (`rdma-core/src/qp_ex.rs`) that first checks the
//!    device's `send_ops_flags`, with a device test in
//!    `rdma-core/tests/`.
//! 2. **Its name**: a variant of [`Operation`](error::Operation) (`error.rs`), which every
//!    error of the verb carries.
//! 3. **Its typed request**: a type holding the borrowed elements and the
//!    remote side (`atomic.rs`, `work.rs`), whose lifetimes tie the memory
//!    to the operation.
//! 4. **Validation and the request**, in one engine file
//!    (`engine/atomic.rs`): refuse a malformed request before the verb
//!    (with a message naming the rule), build the `SendRequest`, and post
//!    through `WorkQueue::post_sends` / `post_sends_and_wait`. Those give
//!    the verb admission (usable channel, queue pair state, queue room),
//!    tracking, the bounded wait, and the settling of a failed post for
//!    free — never call the verb directly.
//! 5. **Its one path** (`verb.rs`): implement the sealed
//!    [`SendQueueRequest`] for the request type —
//!    how one is posted and how a batch is (and, if the engine has a
//!    cheaper blocking path, how one is posted and waited for). That is
//!    all the blocking ([`Channel::run`], [`Channel::run_batch`]) and
//!    scoped ([`PollingScope::post`], [`PollingScope::post_batch`]) modes
//!    need: they are generic over it.
//! 6. **Device tests** (`rdma-safe/tests/<verb>.rs`): every byte checked,
//!    a malformed request refused before posting, and a peer error
//!    reported with its status; on a device without the verb, a test
//!    pinning the "not supported by this device" error.
//!
//! Optional, each on its own: a named one-line form (as `send` is
//! [`Channel::run`] of a send), the owned form (a constructor of
//! [`owned::Request`] and a variant of the engine's `OwnedKind`; a batch
//! member: a variant of [`OwnedRequest`](owned::OwnedRequest)), and a
//! `perf` test in `rdma-examples`.

// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items get
// their "Available on crate feature" badge.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod atomic;
pub mod channel;
pub mod cm;
pub mod datagram;
mod datagram_options;
pub mod docs;
mod endpoint;
mod engine;
pub mod error;
pub mod exchange;
mod fatal;
#[cfg(feature = "fault-injection")]
mod fault;
pub mod memory;
pub mod owned;
mod pd;
mod pending;
pub mod pool;
pub mod prepared;
pub mod scope;
pub mod srq;
pub mod stream;
mod verb;
pub mod window;
pub mod work;

// What a program starts from; everything else lives in its module.
pub use channel::{Channel, ChannelBuilder};
pub use cm::Listener;
pub use datagram::DatagramEndpoint;
pub use error::{Error, Result, ScopeError};
pub use memory::{
    GatherElement, MemoryRegion, RegisteredBuffer, RemoteAccessBuffer, RemoteMemoryRegion,
    ScatterElement,
};
pub use owned::SharedChannel;
pub use pd::ProtectionDomain;
pub use pending::PendingWork;
pub use pool::BufferPool;
pub use prepared::PreparedBatch;
pub use scope::PollingScope;
pub use srq::SharedReceiveQueue;
pub use verb::SendQueueRequest;
pub use work::{
    AtomicWorkRequest, ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WorkSuccess,
    WriteWorkRequest,
};

/// The crate README's program compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeProgram;
