//! `ibv_get_device_list`: the RDMA devices of this host.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::wrapper::Wrapper;
use ibverbs_sys as sys;
use std::ffi::{c_int, CStr};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

impl crate::wrapper::Deleter for *mut sys::ibv_device {
    const DESTROY_VERB: &'static str = "ibv_free_device_list";
    unsafe fn delete(ptr: *mut Self) -> c_int {
        // SAFETY: `ptr` is the array returned by `ibv_get_device_list`.
        unsafe { sys::ibv_free_device_list(ptr) };
        0
    }
}

struct ListInner {
    raw: Wrapper<*mut sys::ibv_device>,
    len: usize,
}

// SAFETY: the list is immutable after `ibv_get_device_list`; libibverbs keeps
// the devices reference-counted, so reading it from several threads is sound.
unsafe impl Send for ListInner {}
// SAFETY: as above: shared access only reads the array.
unsafe impl Sync for ListInner {}

/// The RDMA devices present when it was taken (`ibv_get_device_list`).
///
/// Devices taken from it stay valid while any of them (or the list) is alive.
#[derive(Clone)]
pub struct DeviceList {
    inner: Arc<ListInner>,
}

impl DeviceList {
    /// `ibv_get_device_list`—Lists the RDMA devices.
    ///
    /// # Errors
    /// The verb's errno if the list could not be read (e.g. `ENOSYS` when the
    /// kernel has no RDMA support), [`Error::NoDevice`] if it is empty.
    pub fn available() -> Result<Self> {
        let mut num: c_int = 0;
        // SAFETY: `num` is valid for writes.
        let arr = unsafe { sys::ibv_get_device_list(&mut num) };
        // SAFETY: a non-null array from `ibv_get_device_list` is ours to free.
        let raw = unsafe { Wrapper::from_created("ibv_get_device_list", arr) }?;
        if num <= 0 {
            return Err(Error::NoDevice);
        }
        Ok(DeviceList {
            inner: Arc::new(ListInner {
                raw,
                len: num as usize,
            }),
        })
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the list is empty (never true for a list from [`available`](Self::available)).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The device at `index`.
    pub fn get(&self, index: usize) -> Option<Device> {
        if index >= self.inner.len {
            return None;
        }
        // SAFETY: `index < len`, and the array holds `len` non-null pointers.
        let ptr = unsafe { *self.inner.raw.as_ptr().add(index) };
        NonNull::new(ptr).map(|ptr| Device {
            _list: self.inner.clone(),
            ptr,
        })
    }

    /// The devices, in the library's order.
    pub fn iter(&self) -> impl Iterator<Item = Device> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The device called `name`.
    ///
    /// # Errors
    /// [`Error::DeviceNotFound`], listing the names that do exist.
    pub fn find(&self, name: &str) -> Result<Device> {
        self.iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| Error::DeviceNotFound {
                name: name.to_owned(),
                available: self.iter().map(|d| d.name()).collect(),
            })
    }
}

impl fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Kind of node (`enum ibv_node_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeType {
    /// An InfiniBand channel adapter (also RoCE and rxe devices).
    Ca,
    /// A switch.
    Switch,
    /// A router.
    Router,
    /// An iWARP NIC.
    Rnic,
    /// A usNIC (UDP).
    Usnic,
    /// A usNIC (UDP).
    UsnicUdp,
    /// Not specified.
    Unspecified,
    /// A value these headers do not know.
    Unknown(i32),
}

/// Transport of a device (`enum ibv_transport_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportType {
    /// InfiniBand transport (also RoCE and rxe).
    Ib,
    /// iWARP.
    Iwarp,
    /// usNIC.
    Usnic,
    /// usNIC over UDP.
    UsnicUdp,
    /// Not specified.
    Unspecified,
    /// A value these headers do not know.
    Unknown(i32),
}

/// One RDMA device of a [`DeviceList`]; open it with [`Device::open`].
#[derive(Clone)]
pub struct Device {
    _list: Arc<ListInner>,
    ptr: NonNull<sys::ibv_device>,
}

// SAFETY: a device is immutable and kept alive by the list it came from
// (held in `_list`); its accessors only read it.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Device {
    /// The raw device, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_device {
        self.ptr.as_ptr()
    }

    /// `ibv_get_device_name`—The kernel name, e.g. `"rxe0"` or `"mlx5_0"`.
    pub fn name(&self) -> String {
        // SAFETY: the device is alive; the name is a NUL-terminated string
        // owned by it.
        let name = unsafe { sys::ibv_get_device_name(self.as_ptr()) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated, lives as long as the device.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// `ibv_get_device_guid`—The node GUID, in host byte order.
    pub fn guid(&self) -> u64 {
        // SAFETY: the device is alive.
        u64::from_be(unsafe { sys::ibv_get_device_guid(self.as_ptr()) })
    }

    /// The kind of node.
    pub fn node_type(&self) -> NodeType {
        // SAFETY: the device is alive; `node_type` is a plain field.
        let raw = unsafe { (*self.as_ptr()).node_type };
        use sys::ibv_node_type as N;
        match raw {
            N::IBV_NODE_CA => NodeType::Ca,
            N::IBV_NODE_SWITCH => NodeType::Switch,
            N::IBV_NODE_ROUTER => NodeType::Router,
            N::IBV_NODE_RNIC => NodeType::Rnic,
            N::IBV_NODE_USNIC => NodeType::Usnic,
            N::IBV_NODE_USNIC_UDP => NodeType::UsnicUdp,
            N::IBV_NODE_UNSPECIFIED => NodeType::Unspecified,
            other => NodeType::Unknown(other.0),
        }
    }

    /// The transport.
    pub fn transport_type(&self) -> TransportType {
        // SAFETY: the device is alive; `transport_type` is a plain field.
        let raw = unsafe { (*self.as_ptr()).transport_type };
        use sys::ibv_transport_type as T;
        match raw {
            T::IBV_TRANSPORT_IB => TransportType::Ib,
            T::IBV_TRANSPORT_IWARP => TransportType::Iwarp,
            T::IBV_TRANSPORT_USNIC => TransportType::Usnic,
            T::IBV_TRANSPORT_USNIC_UDP => TransportType::UsnicUdp,
            T::IBV_TRANSPORT_UNSPECIFIED => TransportType::Unspecified,
            other => TransportType::Unknown(other.0),
        }
    }

    /// `ibv_open_device`—Opens the device.
    pub fn open(&self) -> Result<Context> {
        Context::from_device(self)
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field(
                "guid",
                &format_args!("{}", crate::gid::format_guid(self.guid())),
            )
            .field("node_type", &self.node_type())
            .field("transport_type", &self.transport_type())
            .finish()
    }
}
