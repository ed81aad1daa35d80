//! librdmacm's device contexts (`rdma_get_devices`): the contexts every
//! connection-manager identifier on a device uses. Objects made on one of
//! them (a protection domain, its memory regions, queue pairs) serve CM
//! connections on that device too; objects made on a context opened with
//! `ibv_open_device` do not (`rdma_create_qp` and friends need the
//! identifier's own context).

use crate::error::{Error, Result};
use crate::Context;
use ibverbs_sys as sys;
use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

/// The array `rdma_get_devices` returned, freed with `rdma_free_devices`.
struct CmDeviceList(NonNull<*mut sys::ibv_context>);

// SAFETY: the array is only read; librdmacm's contexts may be used from any
// thread.
unsafe impl Send for CmDeviceList {}
// SAFETY: as above.
unsafe impl Sync for CmDeviceList {}

impl Drop for CmDeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from `rdma_get_devices` and is freed once.
        unsafe { sys::rdma_free_devices(self.0.as_ptr()) };
    }
}

impl Context {
    /// `rdma_get_devices`—The context librdmacm opened for the device called
    /// `name`: the one its connection-manager identifiers on that device
    /// use, so that a protection domain allocated on it serves connections
    /// made through the CM (a [`CmId`](crate::CmId)'s
    /// [`context`](crate::CmId::context) is the same pointer). librdmacm
    /// keeps the contexts of present devices open for the life of the
    /// process; this handle also keeps its device list.
    ///
    /// # Errors
    /// [`Error::Verb`] when librdmacm cannot start (no `rdma_cm` kernel
    /// module), [`Error::DeviceNotFound`] when it has no device called
    /// `name`, or the error of making the async event descriptor
    /// non-blocking.
    pub fn open_for_cm(name: &str) -> Result<Self> {
        let mut n: i32 = 0;
        // SAFETY: `n` is valid for writes; the result is checked for null.
        let list = unsafe { sys::rdma_get_devices(&mut n) };
        let Some(list) = NonNull::new(list) else {
            return Err(Error::Verb {
                verb: "rdma_get_devices",
                source: std::io::Error::last_os_error(),
            });
        };
        let list = Arc::new(CmDeviceList(list));
        let mut names = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the array holds `n` context pointers.
            let ctx = unsafe { *list.0.as_ptr().add(i) };
            let Some(ctx) = NonNull::new(ctx) else {
                continue;
            };
            // SAFETY: librdmacm's contexts are open; `device` and its name
            // are fixed for the life of the context.
            let dev_name = unsafe {
                let p = sys::ibv_get_device_name((*ctx.as_ptr()).device);
                if p.is_null() {
                    continue;
                }
                CStr::from_ptr(p).to_string_lossy().into_owned()
            };
            if dev_name == name {
                let owner: Arc<dyn std::any::Any + Send + Sync> = list.clone();
                // SAFETY: librdmacm keeps the context of a present device
                // open for the process's life; `owner` keeps the list.
                return unsafe { Context::lent(ctx, owner) };
            }
            names.push(dev_name);
        }
        Err(Error::DeviceNotFound {
            name: name.to_owned(),
            available: names,
        })
    }
}
