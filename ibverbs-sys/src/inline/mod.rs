//! Rust shims for the `static inline` and macro-wrapped verbs of
//! `<infiniband/verbs.h>`, which have no symbol in `libibverbs.so`.
//!
//! Each function mirrors the C function of the same name line for line:
//! dispatch through `ibv_context::ops`, through the extended `verbs_context`
//! found by `container_of` (see [`verbs_get_ctx`]), or through the function
//! pointers of `ibv_qp_ex` / `ibv_cq_ex`.
//!
//! This file holds the dispatch helpers; each family of verbs has its own
//! file: `post` (data path), `wrapped` (macro-wrapped queries and
//! registration), `extended` (extended creation, XRC), `cq_ex` (extended
//! polling, `ibv_wc_read_*`), `wr` (`ibv_wr_*`), `memory` (windows, device
//! memory), `wq` (work queues, SRQ operations), `flow` (steering, counters),
//! `misc`, and `cm` (the inline helpers of `<rdma/rdma_cma.h>`).

use crate::*;
use core::ffi::{c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};
use core::ptr;

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` marker of a context that is
/// embedded in a `struct verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `IBV_ACCESS_OPTIONAL_RANGE`: access bits that a provider may ignore; when
/// any is set, `ibv_reg_mr` must go through `ibv_reg_mr_iova2`.
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint =
    ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE.0 as c_uint;

/// Symbols whose names the header shadows with macros. Only the shims use them.
mod legacy {
    use crate::*;
    use core::ffi::c_int;
    extern "C" {
        /// The exported `ibv_reg_mr` symbol (no optional-range semantics).
        #[link_name = "ibv_reg_mr"]
        pub(super) fn ibv_reg_mr_symbol(
            pd: *mut ibv_pd,
            addr: *mut core::ffi::c_void,
            length: usize,
            access: c_int,
        ) -> *mut ibv_mr;
        /// The exported `ibv_reg_mr_iova` symbol.
        #[link_name = "ibv_reg_mr_iova"]
        pub(super) fn ibv_reg_mr_iova_symbol(
            pd: *mut ibv_pd,
            addr: *mut core::ffi::c_void,
            length: usize,
            iova: u64,
            access: c_int,
        ) -> *mut ibv_mr;
        /// The exported, legacy-ABI `ibv_query_port` symbol, which fills only
        /// the fields of `struct _compat_ibv_port_attr`.
        #[link_name = "ibv_query_port"]
        pub(super) fn ibv_query_port_symbol(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut _compat_ibv_port_attr,
        ) -> c_int;
    }
}

fn set_errno(value: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for writes for the lifetime of the thread.
    unsafe { *libc::__errno_location() = value };
}

/// `verbs_get_ctx`—Returns the `verbs_context` that embeds `ctx`, or null for
/// a context of a provider that predates the extended ABI.
///
/// # Safety
/// `ctx` must be a valid context returned by `ibv_open_device`.
#[inline]
pub unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: the caller guarantees `ctx` is valid for reads.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return ptr::null_mut();
    }
    // SAFETY: an extended context is the last field of a `verbs_context`
    // allocation (container_of), as the C header itself assumes.
    unsafe { ctx.byte_sub(offset_of!(verbs_context, context)).cast() }
}

/// `verbs_get_ctx_op`—Returns the extended operation `$op` of a context, if
/// the provider's `verbs_context` is large enough to have it and sets it.
macro_rules! verbs_get_ctx_op {
    ($ctx:expr, $op:ident) => {{
        let vctx = verbs_get_ctx($ctx);
        if vctx.is_null()
            || (*vctx).sz < size_of::<verbs_context>() - offset_of!(verbs_context, $op)
        {
            None
        } else {
            (*vctx).$op
        }
    }};
}

/// What a verb gives when the provider lacks its extended operation, as the
/// C header does: `EOPNOTSUPP` for verbs returning an errno, a null pointer
/// with errno set to `EOPNOTSUPP` for verbs creating an object.
trait Unsupported {
    fn unsupported() -> Self;
}

impl Unsupported for c_int {
    fn unsupported() -> c_int {
        libc::EOPNOTSUPP
    }
}

impl<T> Unsupported for *mut T {
    fn unsupported() -> *mut T {
        set_errno(libc::EOPNOTSUPP);
        ptr::null_mut()
    }
}

/// Calls the extended operation `$op` of context `$ctx` with `$args`, or
/// returns [`Unsupported::unsupported`] when the provider lacks it. Expands
/// to code that must be inside `unsafe`, with `$ctx` a valid context.
macro_rules! ctx_op {
    ($ctx:expr, $op:ident($($arg:expr),* $(,)?)) => {
        match verbs_get_ctx_op!($ctx, $op) {
            Some(op) => op($($arg),*),
            None => Unsupported::unsupported(),
        }
    };
}

mod cm;
mod cq_ex;
mod extended;
mod flow;
mod memory;
mod misc;
mod post;
mod wq;
mod wr;
mod wrapped;

pub use cm::*;
pub use cq_ex::*;
pub use extended::*;
pub use flow::*;
pub use memory::*;
pub use misc::*;
pub use post::*;
pub use wq::*;
pub use wr::*;
pub use wrapped::*;
