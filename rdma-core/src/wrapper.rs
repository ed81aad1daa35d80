//! The ownership model: [`Wrapper<T: Deleter>`] owns one verbs object.

use crate::error::{Error, Result};
use std::ffi::c_int;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

/// A verbs object type that knows its destroy verb.
pub trait Deleter {
    /// Name of the destroy verb, for error messages and logs.
    const DESTROY_VERB: &'static str;

    /// Destroys the object, returning 0 or an errno value (or -1 with errno
    /// set, as some verbs do).
    ///
    /// # Safety
    /// `ptr` must be a live object returned by the matching create verb that
    /// nothing uses afterwards.
    unsafe fn delete(ptr: *mut Self) -> c_int;
}

/// Owner of one verbs object: a non-null pointer released by
/// [`Deleter::delete`] on `Drop`.
///
/// `Drop` never panics: a failed destroy is logged (`log::error!`). Use
/// [`Wrapper::close`] (offered as `close` by the handles whose destroy a
/// caller may act on: [`MemoryRegion`](crate::MemoryRegion),
/// [`QueuePair`](crate::QueuePair), [`AddressHandle`](crate::AddressHandle))
/// to observe the error instead.
pub struct Wrapper<T: Deleter> {
    ptr: NonNull<T>,
}

impl<T: Deleter> Wrapper<T> {
    /// Takes ownership of `ptr`.
    ///
    /// # Safety
    /// `ptr` must be a live object returned by its create verb, owned by no one
    /// else: the wrapper destroys it when dropped.
    pub unsafe fn from_ptr(ptr: NonNull<T>) -> Self {
        Self { ptr }
    }

    /// Takes ownership of the result of a create verb named `verb`: a null
    /// pointer becomes the error of that verb with the current errno.
    ///
    /// # Safety
    /// As [`Wrapper::from_ptr`] when `ptr` is not null.
    pub unsafe fn from_created(verb: &'static str, ptr: *mut T) -> Result<Self> {
        match NonNull::new(ptr) {
            // SAFETY: forwarded to the caller.
            Some(ptr) => Ok(unsafe { Self::from_ptr(ptr) }),
            None => Err(Error::last_os_error(verb)),
        }
    }

    /// The raw pointer, still owned by the wrapper.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Destroys the object now, returning the destroy verb's error (with the
    /// still-owned wrapper) if it fails.
    ///
    /// # Errors
    /// The destroy verb's errno, with `self` back: the object still exists.
    pub fn close(self) -> std::result::Result<(), (Self, Error)> {
        let this = ManuallyDrop::new(self);
        // SAFETY: we own the object; on success it is never touched again
        // because `this` is not dropped.
        let rc = unsafe { T::delete(this.ptr.as_ptr()) };
        match crate::error::check_rc(T::DESTROY_VERB, rc) {
            Ok(()) => Ok(()),
            Err(err) => Err((ManuallyDrop::into_inner(this), err)),
        }
    }
}

impl<T: Deleter> Drop for Wrapper<T> {
    fn drop(&mut self) {
        // SAFETY: we own the object and this is the last use of the pointer.
        let rc = unsafe { T::delete(self.ptr.as_ptr()) };
        if let Err(err) = crate::error::check_rc(T::DESTROY_VERB, rc) {
            log::error!("{err} (object {:p} leaked)", self.ptr);
        }
    }
}

impl<T: Deleter> fmt::Debug for Wrapper<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Wrapper<{}>({:p})", std::any::type_name::<T>(), self.ptr)
    }
}

/// Implements [`Deleter`] for a verbs type with its destroy verb.
macro_rules! deleter {
    ($ty:ty, $verb:ident) => {
        impl $crate::wrapper::Deleter for $ty {
            const DESTROY_VERB: &'static str = stringify!($verb);
            unsafe fn delete(ptr: *mut Self) -> ::std::ffi::c_int {
                // SAFETY: forwarded from `Deleter::delete`'s contract.
                unsafe { ::ibverbs_sys::$verb(ptr) }
            }
        }
    };
}
pub(crate) use deleter;
