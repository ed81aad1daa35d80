//! Socket addresses between Rust's [`SocketAddr`] and the C `sockaddr`s the
//! connection manager takes and reports.

use ibverbs_sys as sys;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Storage big enough for any address the connection manager takes.
pub(crate) struct RawAddr(libc::sockaddr_storage);

impl RawAddr {
    /// The C form of `addr`.
    pub(crate) fn new(addr: SocketAddr) -> Self {
        // SAFETY: all-zero bytes are a valid (unspecified) sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // sockaddr_in.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // sockaddr_in6.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            }
        }
        RawAddr(storage)
    }

    /// A pointer the connection manager's verbs take; valid while `self` is.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut sys::sockaddr {
        (&mut self.0 as *mut libc::sockaddr_storage).cast()
    }
}

/// Reads the address at `sa`, if it is an IPv4 or IPv6 one.
///
/// # Safety
/// `sa` must be null or point to a `sockaddr` whose family says how many
/// bytes are valid (as the connection manager's `sockaddr`s do).
pub(crate) unsafe fn from_raw(sa: *const sys::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: `sa` points to at least a `sockaddr` (caller's contract).
    let family = i32::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in; read unaligned as
            // the C struct may sit inside a union of any alignment.
            let sin = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let sin6 = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_v4_and_v6() {
        for text in ["10.0.2.15:7174", "[fe80::1%2]:18515", "0.0.0.0:0"] {
            let addr: SocketAddr = text.parse().unwrap();
            let mut raw = RawAddr::new(addr);
            // SAFETY: `raw` holds a valid sockaddr of the family it says.
            assert_eq!(unsafe { from_raw(raw.as_mut_ptr()) }, Some(addr));
        }
    }
}
