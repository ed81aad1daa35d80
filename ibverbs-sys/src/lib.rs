//! Raw FFI bindings to `libibverbs`, the RDMA verbs library of rdma-core, and
//! to `librdmacm`, its connection manager (`<rdma/rdma_cma.h>`: `rdma_*`).
//!
//! Everything `bindgen` can see in `<infiniband/verbs.h>` is generated at build
//! time (the library is located with `pkg-config`). What bindgen cannot bind —
//! the `static inline` verbs that dispatch through `ibv_context::ops` or the
//! extended `verbs_context`, and the verbs that are macros — is provided as
//! hand-written Rust shims in [`inline`](crate#shims) with the same names and
//! semantics as the C header:
//!
//! * data path: [`ibv_post_send`], [`ibv_post_recv`], [`ibv_post_srq_recv`],
//!   [`ibv_poll_cq`], [`ibv_req_notify_cq`];
//! * macro-wrapped verbs: [`ibv_query_port`] (the inline `___ibv_query_port`,
//!   not the legacy symbol), [`ibv_reg_mr`] / [`ibv_reg_mr_iova`] (which switch
//!   to `ibv_reg_mr_iova2` when `IBV_ACCESS_OPTIONAL_RANGE` bits are set);
//! * extended verbs: [`ibv_create_cq_ex`], [`ibv_start_poll`],
//!   [`ibv_next_poll`], [`ibv_end_poll`], the `ibv_wc_read_*` family,
//!   [`ibv_qp_to_qp_ex`] and the `ibv_wr_*` family, [`ibv_query_device_ex`],
//!   [`ibv_create_qp_ex`], [`ibv_create_srq_ex`], …;
//! * the connection manager's inline helpers: [`rdma_get_local_addr`],
//!   [`rdma_get_peer_addr`].
//!
//! # Enums
//!
//! C enums are generated as `#[repr(transparent)]` newtypes with associated
//! constants (`ibv_wc_status::IBV_WC_SUCCESS`), never as Rust `enum`s: a
//! provider newer than these headers may report a value they do not list, and
//! a Rust `enum` holding an unlisted value is undefined behaviour. Enums that
//! are bit flags (`ibv_access_flags`, `ibv_send_flags`, `ibv_qp_attr_mask`, …)
//! additionally implement `|`, `&`, `|=`, `&=`.
//!
//! # Shims
//!
//! Every shim names the C function it mirrors and documents its `# Safety`
//! contract, which is the C function's: valid, live pointers from this
//! library, and whatever the verbs man page requires of the arguments.

/// What bindgen generates from `<infiniband/verbs.h>` and
/// `<rdma/rdma_cma.h>`: C names, no docs.
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#[allow(missing_docs, missing_debug_implementations, unreachable_pub)]
#[allow(rustdoc::all, unsafe_op_in_unsafe_fn)]
#[allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub use bindings::*;

mod inline;
pub use inline::*;

mod layout;
