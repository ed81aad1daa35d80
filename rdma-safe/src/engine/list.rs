//! The request lists of batched verb calls, built on the stack: a batch of
//! up to [`STACK_LIST`] requests costs the allocator nothing.

use std::convert::Infallible;
use std::mem::{needs_drop, MaybeUninit};

/// Requests a batch holds on the stack; a longer batch is built on the
/// heap. 32 covers the data paths' batches (perf's are at most 8, owned
/// batches at most 32) in 4 KiB of stack for send requests.
pub(crate) const STACK_LIST: usize = 32;

/// Builds the requests `items` yields into one list and lends it to
/// `post`: on the stack when there are at most [`STACK_LIST`] of them, on
/// the heap otherwise.
///
/// For plain requests only (no drop glue, checked at compile time): the
/// stack list is never dropped item by item.
#[inline(always)]
pub(crate) fn with_list<T, R>(
    items: impl ExactSizeIterator<Item = T>,
    post: impl FnOnce(&mut [T]) -> R,
) -> R {
    let written = fill_list(
        items,
        |item, slot| {
            slot.write(item);
            Ok::<(), Infallible>(())
        },
        |list| Ok(post(list)),
    );
    match written {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// As [`with_list`], with `write` putting each of `items`' requests
/// straight into its place in the list (or failing, which stops the
/// building: `post` is not called). Writing in place spares the data path
/// a move of every (128-byte) send request through a `Result` and into
/// the list.
#[inline(always)]
pub(crate) fn fill_list<I, T, R, E>(
    items: I,
    mut write: impl FnMut(I::Item, &mut MaybeUninit<T>) -> Result<(), E>,
    post: impl FnOnce(&mut [T]) -> Result<R, E>,
) -> Result<R, E>
where
    I: ExactSizeIterator,
{
    const { assert!(!needs_drop::<T>(), "stack lists hold plain requests") };
    let n = items.len();
    if n > STACK_LIST {
        let mut list: Vec<T> = Vec::with_capacity(n);
        let mut len = 0;
        for (slot, item) in list.spare_capacity_mut().iter_mut().zip(items) {
            write(item, slot)?;
            len += 1;
        }
        // SAFETY: the first `len` slots of the spare capacity were written
        // just above, in order (`len` counts the writes, whatever the
        // iterator's stated length), and `len` is at most the capacity.
        unsafe { list.set_len(len) };
        return post(&mut list);
    }
    let mut slots = [const { MaybeUninit::<T>::uninit() }; STACK_LIST];
    let mut len = 0;
    for (slot, item) in slots.iter_mut().zip(items) {
        write(item, slot)?;
        len += 1;
    }
    // SAFETY: the first `len` slots were written just above (in order, and
    // `len` counts the writes), `MaybeUninit<T>` has `T`'s layout, and the
    // slice borrows `slots` mutably for no longer than `slots` lives.
    let list = unsafe { std::slice::from_raw_parts_mut(slots.as_mut_ptr().cast::<T>(), len) };
    post(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fill_list` over fallible items: each is written as it comes, the
    /// first error stops the building.
    fn try_list<R, E>(
        items: impl ExactSizeIterator<Item = Result<usize, E>>,
        post: impl FnOnce(&mut [usize]) -> Result<R, E>,
    ) -> Result<R, E> {
        fill_list(
            items,
            |item, slot| {
                slot.write(item?);
                Ok(())
            },
            post,
        )
    }

    #[test]
    fn short_and_long_lists_hold_every_item_in_order() {
        for n in [0, 1, STACK_LIST, STACK_LIST + 1, 3 * STACK_LIST] {
            let got = try_list((0..n).map(Ok::<_, ()>), |list| Ok(list.to_vec()));
            assert_eq!(got, Ok((0..n).collect::<Vec<_>>()), "{n} items");
            let got = with_list(0..n, |list| list.to_vec());
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "{n} items, infallible");
        }
    }

    #[test]
    fn the_first_error_stops_the_building() {
        for n in [4, STACK_LIST + 4] {
            let items = (0..n).map(|k| if k == 2 { Err(k) } else { Ok(k) });
            let got = try_list(items, |_| -> Result<(), usize> { panic!("posted") });
            assert_eq!(got, Err(2));
        }
    }
}
