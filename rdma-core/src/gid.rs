//! GIDs: the 128-bit addresses of RoCE/InfiniBand ports.

use ibverbs_sys as sys;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// A GID (`union ibv_gid`), in network byte order.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
    /// Whether every byte is zero (an unused table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// The GID as an IP address: IPv4 for `::ffff:a.b.c.d`, IPv6 otherwise.
    pub fn to_ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
    /// Whether this is an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn is_ipv4_mapped(&self) -> bool {
        Ipv6Addr::from(self.0).to_ipv4_mapped().is_some()
    }
}

impl From<sys::ibv_gid> for Gid {
    fn from(raw: sys::ibv_gid) -> Self {
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        Gid(unsafe { raw.raw })
    }
}

impl From<Gid> for sys::ibv_gid {
    fn from(gid: Gid) -> Self {
        sys::ibv_gid { raw: gid.0 }
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
}

/// The `ibv_devinfo` form: eight groups of four hex digits.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl std::str::FromStr for Gid {
    type Err = crate::Error;
    /// Parses the `ibv_devinfo` form or any IPv6/IPv4 address text.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || crate::Error::InvalidArgument(format!("not a GID: {s:?}"));
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Gid::from(ip));
        }
        let hex: String = s.chars().filter(|c| *c != ':').collect();
        if hex.len() != 32 {
            return Err(bad());
        }
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Gid(out))
    }
}

/// Kind of GID (`enum ibv_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, no IP header).
    RoceV1,
    /// RoCE v2 (UDP/IP encapsulation, routable).
    RoceV2,
    /// A value these headers do not know.
    Unknown(u32),
}

impl GidType {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match sys::ibv_gid_type(raw) {
            sys::ibv_gid_type::IBV_GID_TYPE_IB => GidType::Ib,
            sys::ibv_gid_type::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            sys::ibv_gid_type::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
            _ => GidType::Unknown(raw),
        }
    }
}

/// One valid entry of a port's GID table (`struct ibv_gid_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table (the `sgid_index` of a GRH).
    pub index: u32,
    /// The port number.
    pub port: u32,
    /// The GID's type.
    pub gid_type: GidType,
    /// Interface index of the net device it belongs to (RoCE), or 0.
    pub ndev_ifindex: u32,
}

impl From<&sys::ibv_gid_entry> for GidEntry {
    fn from(raw: &sys::ibv_gid_entry) -> Self {
        GidEntry {
            gid: Gid::from(raw.gid),
            index: raw.gid_index,
            port: raw.port_num,
            gid_type: GidType::from_raw(raw.gid_type),
            ndev_ifindex: raw.ndev_ifindex,
        }
    }
}

pub(crate) fn format_guid(guid: u64) -> String {
    let b = guid.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let gid = Gid::from("10.0.2.15".parse::<IpAddr>().unwrap());
        assert_eq!(gid.to_string(), "0000:0000:0000:0000:0000:ffff:0a00:020f");
        assert!(gid.is_ipv4_mapped());
        assert_eq!(gid.to_string().parse::<Gid>().unwrap(), gid);
        assert_eq!("::ffff:10.0.2.15".parse::<Gid>().unwrap(), gid);
        assert_eq!(gid.to_ip(), "10.0.2.15".parse::<IpAddr>().unwrap());
        assert!("zz".parse::<Gid>().is_err());
        assert!("0000:0000".parse::<Gid>().is_err());
    }

    #[test]
    fn guid_format() {
        assert_eq!(format_guid(0x0011_2233_4455_6677), "0011:2233:4455:6677");
    }
}
