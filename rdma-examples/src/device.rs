//! Opening a device and checking the port and GID index a program was
//! given, so that a server fails at start-up, not when a client arrives.

use crate::fail;
use crate::Result;
use rdma_safe::{channel::Context, ProtectionDomain};

/// Opens the device called `name`, or the first device if `None`, and
/// allocates a protection domain on it — on the connection manager's
/// context for that device where there is one, so that the domain serves
/// CM connections too.
///
/// # Errors
/// No such device, no device at all, or the verbs failing.
pub fn open_pd(name: Option<&str>) -> Result<ProtectionDomain> {
    match name {
        Some(n) => Ok(ProtectionDomain::open(n)?),
        None => {
            let name = Context::open_first()?.name().to_owned();
            Ok(ProtectionDomain::open(&name)?)
        }
    }
}

/// Opens the device as [`open_pd`] does and checks that `port` exists and
/// that `gid_index` (or, without one, the port's preferred RoCE v2 GID)
/// names a valid GID: the checks a channel builder makes, made before a
/// server listens.
///
/// # Errors
/// The device cannot be opened, the port does not exist, or the GID index
/// is not valid on it; the message names the option.
pub fn open_checked(
    name: Option<&str>,
    port: u8,
    gid_index: Option<u32>,
) -> Result<ProtectionDomain> {
    let pd = open_pd(name)?;
    let ctx = pd.context();
    ctx.query_port(port)
        .map_err(|e| fail(format!("port {port} of {}: {e} (check -i)", ctx.name())))?;
    match gid_index {
        Some(i) => {
            ctx.query_gid_entry(port, i).map_err(|e| {
                fail(format!(
                    "GID index {i} of {} port {port}: {e} (check -g/-x)",
                    ctx.name()
                ))
            })?;
        }
        None => {
            ctx.preferred_gid(port)?;
        }
    }
    Ok(pd)
}
