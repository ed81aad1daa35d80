//! Ports: their attributes (`ibv_query_port`), states, link layers and MTUs.

use ibverbs_sys as sys;
use std::fmt;

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// Converts the raw value.
    pub fn from_raw(raw: sys::ibv_mtu) -> Option<Self> {
        Some(match raw {
            sys::ibv_mtu::IBV_MTU_256 => Mtu::Mtu256,
            sys::ibv_mtu::IBV_MTU_512 => Mtu::Mtu512,
            sys::ibv_mtu::IBV_MTU_1024 => Mtu::Mtu1024,
            sys::ibv_mtu::IBV_MTU_2048 => Mtu::Mtu2048,
            sys::ibv_mtu::IBV_MTU_4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The raw value.
    pub fn to_raw(self) -> sys::ibv_mtu {
        match self {
            Mtu::Mtu256 => sys::ibv_mtu::IBV_MTU_256,
            Mtu::Mtu512 => sys::ibv_mtu::IBV_MTU_512,
            Mtu::Mtu1024 => sys::ibv_mtu::IBV_MTU_1024,
            Mtu::Mtu2048 => sys::ibv_mtu::IBV_MTU_2048,
            Mtu::Mtu4096 => sys::ibv_mtu::IBV_MTU_4096,
        }
    }
    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        256 << (self.to_raw().0 - 1)
    }
    /// The MTU of exactly `bytes` bytes.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ]
        .into_iter()
        .find(|m| m.bytes() == bytes)
    }
}

/// Logical state of a port (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PortState {
    /// No state change.
    Nop,
    /// Link down.
    Down,
    /// Link up, not yet configured.
    Init,
    /// Configured, not yet active.
    Armed,
    /// Ready for traffic.
    Active,
    /// Active, deferring.
    ActiveDefer,
    /// A value these headers do not know.
    Unknown(u32),
}

impl PortState {
    /// The `ibv_devinfo` spelling, e.g. `"PORT_ACTIVE"`.
    pub fn name(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
            PortState::ActiveDefer => "PORT_ACTIVE_DEFER",
            PortState::Unknown(_) => "PORT_<unknown>",
        }
    }
}

/// Link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkLayer {
    /// Not reported (treated as InfiniBand).
    Unspecified,
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE, rxe).
    Ethernet,
    /// A value these headers do not know.
    Unknown(u8),
}

/// Port attributes (`struct ibv_port_attr`, fully initialised through the
/// extended `query_port`).
#[derive(Clone, Copy)]
pub struct PortAttr(pub sys::ibv_port_attr);

impl PortAttr {
    /// Logical state.
    pub fn state(&self) -> PortState {
        use sys::ibv_port_state as S;
        match self.0.state {
            S::IBV_PORT_NOP => PortState::Nop,
            S::IBV_PORT_DOWN => PortState::Down,
            S::IBV_PORT_INIT => PortState::Init,
            S::IBV_PORT_ARMED => PortState::Armed,
            S::IBV_PORT_ACTIVE => PortState::Active,
            S::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            other => PortState::Unknown(other.0),
        }
    }
    /// Largest MTU the port supports.
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.max_mtu)
    }
    /// MTU in use.
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.active_mtu)
    }
    /// Entries in the GID table.
    pub fn gid_tbl_len(&self) -> i32 {
        self.0.gid_tbl_len
    }
    /// Base LID (0 on RoCE: there are no LIDs).
    pub fn lid(&self) -> u16 {
        self.0.lid
    }
    /// Largest message size.
    pub fn max_msg_sz(&self) -> u32 {
        self.0.max_msg_sz
    }
    /// Link layer.
    pub fn link_layer(&self) -> LinkLayer {
        let raw = u32::from(self.0.link_layer);
        if raw == sys::IBV_LINK_LAYER_UNSPECIFIED.0 {
            LinkLayer::Unspecified
        } else if raw == sys::IBV_LINK_LAYER_INFINIBAND.0 {
            LinkLayer::InfiniBand
        } else if raw == sys::IBV_LINK_LAYER_ETHERNET.0 {
            LinkLayer::Ethernet
        } else {
            LinkLayer::Unknown(self.0.link_layer)
        }
    }
    /// Whether addressing needs a GRH (RoCE: always).
    pub fn needs_grh(&self) -> bool {
        self.link_layer() == LinkLayer::Ethernet
    }
    /// Active link width (encoded as in `ibv_port_attr`).
    pub fn active_width(&self) -> u8 {
        self.0.active_width
    }
    /// Active link speed (encoded as in `ibv_port_attr`).
    pub fn active_speed(&self) -> u8 {
        self.0.active_speed
    }
    /// Port capability flags.
    pub fn port_cap_flags(&self) -> u32 {
        self.0.port_cap_flags
    }
}

impl fmt::Debug for PortAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortAttr")
            .field("state", &self.state())
            .field("max_mtu", &self.max_mtu())
            .field("active_mtu", &self.active_mtu())
            .field("link_layer", &self.link_layer())
            .field("lid", &self.lid())
            .field("gid_tbl_len", &self.gid_tbl_len())
            .finish_non_exhaustive()
    }
}
