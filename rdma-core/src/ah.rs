//! `ibv_create_ah`: address handles, and the address vector they (and
//! connected QPs) are built from.

use crate::error::{Error, Result};
use crate::gid::Gid;
use crate::pd::ProtectionDomain;
use crate::wrapper::{deleter, Wrapper};
use ibverbs_sys as sys;
use std::fmt;

deleter!(sys::ibv_ah, ibv_destroy_ah);

/// How to reach a remote port (`struct ibv_ah_attr`). On RoCE (and rxe) there
/// are no LIDs: set `grh` with the peer's GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    /// Local port.
    pub port: u8,
    /// Destination LID (InfiniBand only; 0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Global route header: required on RoCE.
    pub grh: Option<GlobalRoute>,
}

/// The global route (GRH) part of an address (`struct ibv_global_route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalRoute {
    /// The peer's GID.
    pub dgid: Gid,
    /// Index of the local GID to send from.
    pub sgid_index: u8,
    /// Hop limit (TTL).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

impl AddressVector {
    /// An address through `port` to the peer with GID `dgid`, sending from
    /// local GID `sgid_index` (the RoCE form).
    pub fn global(port: u8, dgid: Gid, sgid_index: u8) -> Self {
        AddressVector {
            port,
            dlid: 0,
            sl: 0,
            grh: Some(GlobalRoute {
                dgid,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }),
        }
    }

    /// An InfiniBand address by LID, without GRH.
    pub fn local(port: u8, dlid: u16) -> Self {
        AddressVector {
            port,
            dlid,
            sl: 0,
            grh: None,
        }
    }

    /// The raw attributes.
    pub fn to_raw(&self) -> sys::ibv_ah_attr {
        let mut attr = sys::ibv_ah_attr {
            dlid: self.dlid,
            sl: self.sl,
            port_num: self.port,
            ..Default::default()
        };
        if let Some(g) = self.grh {
            attr.is_global = 1;
            attr.grh = sys::ibv_global_route {
                dgid: g.dgid.into(),
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
            };
        }
        attr
    }
}

/// An address handle: the destination of UD sends. Keeps its PD alive.
pub struct AddressHandle {
    raw: Wrapper<sys::ibv_ah>,
    _pd: ProtectionDomain,
}

// SAFETY: an AH is immutable after creation; the verbs are thread-safe.
unsafe impl Send for AddressHandle {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle {}

impl AddressHandle {
    /// `ibv_create_ah`—Creates an address handle for `av` in `pd`.
    pub fn new(pd: &ProtectionDomain, av: &AddressVector) -> Result<Self> {
        let mut attr = av.to_raw();
        // SAFETY: the PD is alive; `attr` is valid for reads.
        let ptr = unsafe { sys::ibv_create_ah(pd.as_ptr(), &mut attr) };
        // SAFETY: a non-null AH is ours to destroy.
        let raw = unsafe { Wrapper::from_created("ibv_create_ah", ptr) }?;
        Ok(AddressHandle {
            raw,
            _pd: pd.clone(),
        })
    }

    /// The raw AH (for `ibv_send_wr.wr.ud.ah`), valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_ah {
        self.raw.as_ptr()
    }

    /// `ibv_destroy_ah`—Destroys the address handle now, reporting a failure
    /// that dropping it could only log.
    ///
    /// # Errors
    /// The errno of `ibv_destroy_ah`, with the handle, not destroyed.
    pub fn close(self) -> std::result::Result<(), (Self, Error)> {
        let AddressHandle { raw, _pd } = self;
        raw.close()
            .map_err(|(raw, err)| (AddressHandle { raw, _pd }, err))
    }
}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddressHandle")
            .field("ptr", &self.as_ptr())
            .finish()
    }
}
