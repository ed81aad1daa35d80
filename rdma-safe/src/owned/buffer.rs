//! [`OwnedBuffer`]: the buffers owning operations take and give back.

use crate::owned::OwnedRequest;
use crate::pool::{PoolBuf, PoolBytes};
use crate::work::Held;

/// What an owning operation can take: a [`PoolBuf`] (the NIC may write
/// it), [`PoolBytes`] (the NIC only reads it), or a batch of
/// [`OwnedRequest`]s holding either. Sealed.
pub trait OwnedBuffer: sealed::Sealed + Send + Sized + Unpin + 'static {}

impl OwnedBuffer for PoolBuf {}
impl OwnedBuffer for PoolBytes {}
impl OwnedBuffer for Vec<OwnedRequest> {}

pub(crate) mod sealed {
    use super::*;

    /// What an engine slot holds, opaque outside the crate.
    #[derive(Debug)]
    pub struct Slotted(pub(crate) Held);

    /// Moving a buffer into and out of an engine slot.
    pub trait Sealed {
        #[doc(hidden)]
        fn into_slotted(self) -> Slotted;
        #[doc(hidden)]
        fn from_slotted(held: Slotted) -> Self;
    }

    impl Sealed for PoolBuf {
        fn into_slotted(self) -> Slotted {
            Slotted(Held::Unique(self))
        }
        fn from_slotted(Slotted(held): Slotted) -> Self {
            match held {
                Held::Unique(b) => b,
                // The engine gives back what it was given.
                other => unreachable!("expected a PoolBuf back, got {other:?}"),
            }
        }
    }

    impl Sealed for PoolBytes {
        fn into_slotted(self) -> Slotted {
            Slotted(Held::Shared(self))
        }
        fn from_slotted(Slotted(held): Slotted) -> Self {
            match held {
                Held::Shared(b) => b,
                other => unreachable!("expected PoolBytes back, got {other:?}"),
            }
        }
    }

    impl Sealed for Vec<OwnedRequest> {
        fn into_slotted(self) -> Slotted {
            Slotted(Held::Batch(self))
        }
        fn from_slotted(Slotted(held): Slotted) -> Self {
            match held {
                Held::Batch(b) => b,
                other => unreachable!("expected a batch back, got {other:?}"),
            }
        }
    }
}

/// `buf` as what an engine slot holds.
pub(crate) fn into_held<B: OwnedBuffer>(buf: B) -> Held {
    buf.into_slotted().0
}

/// The buffer an engine slot gave back (the kind it was given).
pub(crate) fn from_held<B: OwnedBuffer>(held: Held) -> B {
    B::from_slotted(sealed::Slotted(held))
}
