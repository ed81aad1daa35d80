//! Which protection domain a CM connection uses: the caller's, when it
//! serves the device the connection came in on, or by default one shared
//! by every connection on that device — so that one registered table or
//! one buffer pool serves many clients.
//!
//! A domain serves a connection when it was allocated on the device
//! context the connection manager uses for that device (librdmacm opens
//! each device once): [`ProtectionDomain::open`] allocates there, so its
//! memory and pools work with [`Listener`](super::Listener) and
//! [`Channel::connect_to`](crate::Channel::connect_to).

use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use rdma_core::Context;
use std::sync::Mutex;

/// One domain per device context, shared by the default CM paths for the
/// life of the process (as librdmacm keeps its contexts).
static SHARED: Mutex<Vec<ProtectionDomain>> = Mutex::new(Vec::new());

/// The domain connections on `ctx` use: `chosen` if given (refused with an
/// error naming both devices when it does not serve `ctx`), else the one
/// shared by every default connection on that device.
///
/// # Errors
/// The refusal of `chosen`, or the error of allocating the shared domain.
pub(super) fn domain_for(
    ctx: &Context,
    chosen: Option<&ProtectionDomain>,
) -> Result<ProtectionDomain> {
    if let Some(pd) = chosen {
        if serves(pd, ctx) {
            return Ok(pd.clone());
        }
        return Err(Error::Verbs(rdma_core::Error::InvalidArgument(refusal(
            pd, ctx,
        ))));
    }
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pd) = shared.iter().find(|pd| serves(pd, ctx)) {
        return Ok(pd.clone());
    }
    let pd = ProtectionDomain::new(ctx)?;
    shared.push(pd.clone());
    Ok(pd)
}

/// Whether `pd` was allocated on the context `ctx`.
fn serves(pd: &ProtectionDomain, ctx: &Context) -> bool {
    std::ptr::eq(pd.context().as_ptr(), ctx.as_ptr())
}

#[cold]
fn refusal(pd: &ProtectionDomain, ctx: &Context) -> String {
    let (ours, theirs) = (pd.context().name(), ctx.name());
    if ours == theirs {
        format!(
            "the protection domain on {ours} was allocated on a device context of its own, not \
             the one the connection manager uses for {theirs}: allocate it with \
             ProtectionDomain::open(\"{ours}\"), which shares the connection manager's context"
        )
    } else {
        format!(
            "the protection domain is on device {ours}, but the connection is on device \
             {theirs}: memory of one device's domain cannot be used on another"
        )
    }
}
