//! `ibv_open_device`: a device context, and the queries made through it.

use crate::async_event::{self, AsyncEvent};
use crate::device::{Device, DeviceList};
use crate::error::{check_rc, Error, Result};
use crate::fd;
use crate::gid::{Gid, GidEntry, GidType};
use crate::port::PortAttr;
use crate::wrapper::{deleter, Wrapper};
use crate::{CompChannel, CompQueue, ProtectionDomain};
use ibverbs_sys as sys;
use std::ffi::CStr;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

deleter!(sys::ibv_context, ibv_close_device);

/// The context pointer: opened (and closed) by us, or lent by another owner
/// (librdmacm opens every device once and shares the context among its
/// identifiers), kept alive by a reference to that owner.
enum Raw {
    Owned(Wrapper<sys::ibv_context>),
    Lent {
        ptr: std::ptr::NonNull<sys::ibv_context>,
        _owner: Arc<dyn std::any::Any + Send + Sync>,
    },
}

struct Inner {
    raw: Raw,
    name: String,
}

/// An open RDMA device (`struct ibv_context`). Cheap to clone; the device is
/// closed when the last clone and the last object created from it are gone.
///
/// The context's file descriptor ([`AsFd`]) is its asynchronous event
/// descriptor, set non-blocking: it becomes readable when the device reports
/// an [`AsyncEvent`], taken with [`try_get_async_event`](Self::try_get_async_event),
/// [`wait_async_event`](Self::wait_async_event) or
/// [`get_async_event`](Self::get_async_event).
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

// SAFETY: libibverbs contexts may be used from any thread, concurrently: the
// verbs are documented thread-safe and providers serialise internally.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Context {
    /// `ibv_open_device`—Opens `device`.
    pub fn from_device(device: &Device) -> Result<Self> {
        // SAFETY: the device pointer is alive (held by `device`).
        let ptr = unsafe { sys::ibv_open_device(device.as_ptr()) };
        // SAFETY: a non-null context from `ibv_open_device` is ours to close.
        let raw = unsafe { Wrapper::from_created("ibv_open_device", ptr) }?;
        let ctx = Context {
            inner: Arc::new(Inner {
                raw: Raw::Owned(raw),
                name: device.name(),
            }),
        };
        fd::set_nonblocking(ctx.as_raw_fd(), "fcntl(O_NONBLOCK) on async event fd")?;
        Ok(ctx)
    }

    /// Opens the device called `name` (e.g. `"rxe0"`).
    ///
    /// # Errors
    /// [`Error::NoDevice`] if there is no device at all,
    /// [`Error::DeviceNotFound`] (listing the existing names) if none has this
    /// name, or the error of `ibv_open_device`.
    pub fn open(name: &str) -> Result<Self> {
        DeviceList::available()
            .map_err(|e| match e {
                Error::NoDevice => Error::DeviceNotFound {
                    name: name.to_owned(),
                    available: Vec::new(),
                },
                e => e,
            })?
            .find(name)?
            .open()
    }

    /// Opens the first device.
    pub fn open_first() -> Result<Self> {
        DeviceList::available()?
            .get(0)
            .ok_or(Error::NoDevice)?
            .open()
    }

    /// A context that `owner` keeps open (librdmacm's context of a connection
    /// identifier); never closed through this handle. Its async event
    /// descriptor is made non-blocking, as [`from_device`](Self::from_device)
    /// does (librdmacm never reads it): without that,
    /// [`try_get_async_event`](Self::try_get_async_event) would block until
    /// the next event.
    ///
    /// # Safety
    /// `ptr` must be a live context that stays open while `owner` is alive.
    ///
    /// # Errors
    /// The error of `fcntl` on the async event descriptor.
    pub(crate) unsafe fn lent(
        ptr: std::ptr::NonNull<sys::ibv_context>,
        owner: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Result<Self> {
        // SAFETY: the context is alive (caller's contract); `device` and its
        // name are fixed for the life of the context.
        let name = unsafe {
            let name = sys::ibv_get_device_name((*ptr.as_ptr()).device);
            if name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            }
        };
        let ctx = Context {
            inner: Arc::new(Inner {
                raw: Raw::Lent { ptr, _owner: owner },
                name,
            }),
        };
        fd::set_nonblocking(ctx.as_raw_fd(), "fcntl(O_NONBLOCK) on async event fd")?;
        Ok(ctx)
    }

    /// The raw context, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_context {
        match &self.inner.raw {
            Raw::Owned(raw) => raw.as_ptr(),
            Raw::Lent { ptr, .. } => ptr.as_ptr(),
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// `ibv_query_device_ex`—The device's capabilities.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut attr = sys::ibv_device_attr_ex::default();
        // SAFETY: the context is alive; `attr` is valid for writes.
        check_rc("ibv_query_device_ex", unsafe {
            sys::ibv_query_device_ex(self.as_ptr(), std::ptr::null(), &mut attr)
        })?;
        Ok(DeviceAttr(attr))
    }

    /// `ibv_query_port`—The attributes of port `port` (1-based).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let mut attr = sys::ibv_port_attr::default();
        // SAFETY: the context is alive; `attr` is valid for writes.
        check_rc("ibv_query_port", unsafe {
            sys::ibv_query_port(self.as_ptr(), port, &mut attr)
        })?;
        Ok(PortAttr(attr))
    }

    /// `ibv_query_gid`—The GID at `index` of port `port`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let mut gid = sys::ibv_gid::default();
        let index = i32::try_from(index)
            .map_err(|_| Error::InvalidArgument(format!("GID index {index}")))?;
        // SAFETY: the context is alive; `gid` is valid for writes.
        check_rc("ibv_query_gid", unsafe {
            sys::ibv_query_gid(self.as_ptr(), port, index, &mut gid)
        })?;
        Ok(Gid::from(gid))
    }

    /// `ibv_query_gid_ex`—The GID entry (with type) at `index` of port `port`.
    pub fn query_gid_entry(&self, port: u8, index: u32) -> Result<GidEntry> {
        let mut entry = sys::ibv_gid_entry::default();
        // SAFETY: the context is alive; `entry` is valid for writes.
        check_rc("ibv_query_gid_ex", unsafe {
            sys::ibv_query_gid_ex(self.as_ptr(), port.into(), index, &mut entry, 0)
        })?;
        Ok(GidEntry::from(&entry))
    }

    /// `ibv_query_gid_table`—Every valid GID entry of every port.
    pub fn gid_table(&self) -> Result<Vec<GidEntry>> {
        let dev = self.query_device()?;
        let mut max = 0usize;
        for port in 1..=dev.phys_port_cnt() {
            max += usize::try_from(self.query_port(port)?.gid_tbl_len()).unwrap_or(0);
        }
        let mut raw = vec![sys::ibv_gid_entry::default(); max.max(1)];
        // SAFETY: the context is alive; `raw` holds `raw.len()` entries.
        let n = unsafe { sys::ibv_query_gid_table(self.as_ptr(), raw.as_mut_ptr(), raw.len(), 0) };
        if n < 0 {
            return Err(Error::verb("ibv_query_gid_table", (-n) as i32));
        }
        Ok(raw[..n as usize].iter().map(GidEntry::from).collect())
    }

    /// The GID entry to use on `port` for RoCE v2 over IPv4 (the usual choice
    /// on rxe), else RoCE v2 over IPv6, else the first valid entry.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the port has no valid GID (link down, or
    /// no IP address on the net device).
    pub fn preferred_gid(&self, port: u8) -> Result<GidEntry> {
        let table: Vec<GidEntry> = self
            .gid_table()?
            .into_iter()
            .filter(|e| e.port == u32::from(port))
            .collect();
        let pick = table
            .iter()
            .find(|e| e.gid_type == GidType::RoceV2 && e.gid.is_ipv4_mapped())
            .or_else(|| table.iter().find(|e| e.gid_type == GidType::RoceV2))
            .or_else(|| table.first());
        pick.copied().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "port {port} of {} has no valid GID (no IP address on its net device?)",
                self.name()
            ))
        })
    }

    /// `ibv_get_async_event`—Takes the next asynchronous event if one is
    /// pending, without waiting, and acknowledges it
    /// (`ibv_ack_async_event`).
    ///
    /// # Errors
    /// The error of `ibv_get_async_event` (other than "nothing pending").
    pub fn try_get_async_event(&self) -> Result<Option<AsyncEvent>> {
        // SAFETY: the context is alive.
        unsafe { async_event::take(self.as_ptr()) }
    }

    /// Waits up to `timeout` for the next asynchronous event, then takes and
    /// acknowledges it; `None` when none came in time. Several threads may
    /// wait at once: each event goes to one of them.
    ///
    /// # Errors
    /// The error of `poll(2)` on the descriptor or of `ibv_get_async_event`.
    pub fn wait_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(event) = self.try_get_async_event()? {
                return Ok(Some(event));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !fd::wait_readable(self.as_raw_fd(), Some(left), "poll(async event fd)")? {
                return Ok(None);
            }
        }
    }

    /// Waits as long as it takes for the next asynchronous event, then takes
    /// and acknowledges it.
    ///
    /// # Errors
    /// As [`wait_async_event`](Self::wait_async_event).
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        loop {
            if let Some(event) = self.try_get_async_event()? {
                return Ok(event);
            }
            fd::wait_readable(self.as_raw_fd(), None, "poll(async event fd)")?;
        }
    }

    /// `ibv_alloc_pd`—Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        ProtectionDomain::new(self)
    }

    /// `ibv_create_comp_channel`—Creates a completion event channel.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        CompChannel::new(self)
    }

    /// `ibv_create_cq`—Creates a completion queue of at least `cqe` entries,
    /// reporting events to `channel` if given.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<CompQueue> {
        CompQueue::new(self, cqe, channel, 0)
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.name)
            .field("ptr", &self.as_ptr())
            .finish()
    }
}

impl AsFd for Context {
    /// The asynchronous event descriptor (non-blocking).
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by the context and stays open while
        // `self` (and so the borrow) is alive.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl AsRawFd for Context {
    /// The asynchronous event descriptor (non-blocking).
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the context is alive; `async_fd` is a plain field.
        unsafe { (*self.as_ptr()).async_fd }
    }
}

/// Device capabilities (`struct ibv_device_attr_ex`).
#[derive(Clone, Copy)]
pub struct DeviceAttr(pub sys::ibv_device_attr_ex);

impl DeviceAttr {
    fn orig(&self) -> &sys::ibv_device_attr {
        &self.0.orig_attr
    }
    /// Firmware version text.
    pub fn fw_ver(&self) -> String {
        let raw = &self.orig().fw_ver;
        // SAFETY: reinterpreting `[c_char; 64]` as bytes of the same length.
        let bytes: &[u8; 64] = unsafe { &*(raw as *const _ as *const [u8; 64]) };
        CStr::from_bytes_until_nul(bytes)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
    /// Node GUID (host order).
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.orig().node_guid)
    }
    /// Largest registrable region.
    pub fn max_mr_size(&self) -> u64 {
        self.orig().max_mr_size
    }
    /// Maximum number of QPs.
    pub fn max_qp(&self) -> i32 {
        self.orig().max_qp
    }
    /// Maximum outstanding work requests per queue.
    pub fn max_qp_wr(&self) -> i32 {
        self.orig().max_qp_wr
    }
    /// Maximum SGEs per work request.
    pub fn max_sge(&self) -> i32 {
        self.orig().max_sge
    }
    /// Maximum number of CQs.
    pub fn max_cq(&self) -> i32 {
        self.orig().max_cq
    }
    /// Maximum entries per CQ.
    pub fn max_cqe(&self) -> i32 {
        self.orig().max_cqe
    }
    /// Maximum number of MRs.
    pub fn max_mr(&self) -> i32 {
        self.orig().max_mr
    }
    /// Maximum outstanding RDMA reads/atomics a QP can initiate.
    pub fn max_qp_init_rd_atom(&self) -> i32 {
        self.orig().max_qp_init_rd_atom
    }
    /// Maximum outstanding RDMA reads/atomics a QP can serve.
    pub fn max_qp_rd_atom(&self) -> i32 {
        self.orig().max_qp_rd_atom
    }
    /// Maximum number of SRQs.
    pub fn max_srq(&self) -> i32 {
        self.orig().max_srq
    }
    /// Maximum work requests per SRQ.
    pub fn max_srq_wr(&self) -> i32 {
        self.orig().max_srq_wr
    }
    /// Number of physical ports.
    pub fn phys_port_cnt(&self) -> u8 {
        self.orig().phys_port_cnt
    }
    /// Vendor id.
    pub fn vendor_id(&self) -> u32 {
        self.orig().vendor_id
    }
    /// Vendor part id.
    pub fn vendor_part_id(&self) -> u32 {
        self.orig().vendor_part_id
    }
    /// Hardware version.
    pub fn hw_ver(&self) -> u32 {
        self.orig().hw_ver
    }
}

impl fmt::Debug for DeviceAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("fw_ver", &self.fw_ver())
            .field("phys_port_cnt", &self.phys_port_cnt())
            .field("max_qp", &self.max_qp())
            .field("max_qp_wr", &self.max_qp_wr())
            .field("max_sge", &self.max_sge())
            .field("max_cqe", &self.max_cqe())
            .field("max_mr_size", &self.max_mr_size())
            .finish_non_exhaustive()
    }
}
