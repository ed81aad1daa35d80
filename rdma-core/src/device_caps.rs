//! The extended device attributes programs check before using an optional
//! feature: on-demand paging, completion timestamps, device memory
//! (`struct ibv_device_attr_ex`, from
//! [`Context::query_device`](crate::Context::query_device)).

use crate::context::DeviceAttr;
use ibverbs_sys as sys;

/// On-demand paging support (`struct ibv_odp_caps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OdpCaps {
    /// `general_caps`: `IBV_ODP_SUPPORT`, `IBV_ODP_SUPPORT_IMPLICIT`.
    pub general: u64,
    /// What RC queue pairs may do on ODP memory (`IBV_ODP_SUPPORT_SEND`,
    /// `_RECV`, `_WRITE`, `_READ`, `_ATOMIC`, `_SRQ_RECV`).
    pub rc: u32,
    /// The same for UC queue pairs.
    pub uc: u32,
    /// The same for UD queue pairs.
    pub ud: u32,
}

impl OdpCaps {
    /// `IBV_ODP_SUPPORT`: the device can register on-demand-paging memory.
    pub fn supported(&self) -> bool {
        self.general & u64::from(sys::ibv_odp_general_caps::IBV_ODP_SUPPORT.0) != 0
    }
    /// `IBV_ODP_SUPPORT_IMPLICIT`: it can register the whole address space.
    pub fn implicit(&self) -> bool {
        self.general & u64::from(sys::ibv_odp_general_caps::IBV_ODP_SUPPORT_IMPLICIT.0) != 0
    }
    /// Whether RC sends and receives may use ODP memory.
    pub fn rc_send_recv(&self) -> bool {
        let need = sys::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_SEND.0
            | sys::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_RECV.0;
        self.rc & need == need
    }
    /// Whether RC sends, and receives through an SRQ, may use ODP memory.
    pub fn rc_send_srq_recv(&self) -> bool {
        let need = sys::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_SEND.0
            | sys::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_SRQ_RECV.0;
        self.rc & need == need
    }
}

impl DeviceAttr {
    /// On-demand paging support.
    pub fn odp_caps(&self) -> OdpCaps {
        let c = &self.0.odp_caps;
        OdpCaps {
            general: c.general_caps,
            rc: c.per_transport_caps.rc_odp_caps,
            uc: c.per_transport_caps.uc_odp_caps,
            ud: c.per_transport_caps.ud_odp_caps,
        }
    }
    /// The bits of a completion timestamp the device fills in (0: it
    /// gives no completion timestamps).
    pub fn completion_timestamp_mask(&self) -> u64 {
        self.0.completion_timestamp_mask
    }
    /// The frequency of the clock completion timestamps count, in kHz (0:
    /// unknown).
    pub fn hca_core_clock(&self) -> u64 {
        self.0.hca_core_clock
    }
    /// Bytes of on-device memory a program may allocate (`ibv_alloc_dm`;
    /// 0: none).
    pub fn max_dm_size(&self) -> u64 {
        self.0.max_dm_size
    }
}
