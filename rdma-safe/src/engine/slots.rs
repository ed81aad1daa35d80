//! The table of tracked requests, indexed by work request id.
//!
//! Ids are handed out sequentially and most requests complete roughly in
//! order, so a ring whose front is the oldest tracked id replaces a hash
//! map: O(1) insert, lookup and (amortised) removal, and no hashing on the
//! data path. Entries stay where they were written: a removal reads what it
//! needs through a reference and empties the entry in place
//! ([`remove_plain_at`](SlotRing::remove_plain_at)), so the data path never copies
//! a whole record in or out of the table.

/// Entries of ids `base ..base + span`, at ring positions `head ..head + span`
/// (modulo the capacity, a power of two). Every position outside that window
/// holds `None`; inside it, `None` is a hole: an id removed out of order, or
/// one handed out but never tracked.
#[derive(Debug)]
pub(crate) struct SlotRing<T> {
    base: u64,
    head: usize,
    span: usize,
    entries: Box<[Option<T>]>,
    live: usize,
}

impl<T> Default for SlotRing<T> {
    fn default() -> Self {
        SlotRing {
            base: 0,
            head: 0,
            span: 0,
            entries: Box::new([]),
            live: 0,
        }
    }
}

/// The first capacity a ring grows to.
const FIRST_CAPACITY: usize = 16;

impl<T> SlotRing<T> {
    #[inline]
    fn mask(&self) -> usize {
        self.entries.len().wrapping_sub(1)
    }

    /// The ring position of `id`, if it lies in the window.
    #[inline]
    fn index(&self, id: u64) -> Option<usize> {
        let off = id.checked_sub(self.base)?;
        (off < self.span as u64).then(|| (self.head + off as usize) & self.mask())
    }

    /// Makes room for one more id at the end of the window.
    #[inline]
    fn reserve_one(&mut self) {
        if self.span == self.entries.len() {
            self.grow();
        }
    }

    #[cold]
    fn grow(&mut self) {
        let cap = (self.entries.len() * 2).max(FIRST_CAPACITY);
        let mut entries: Box<[Option<T>]> = (0..cap).map(|_| None).collect();
        let mask = self.mask();
        for (k, entry) in entries.iter_mut().take(self.span).enumerate() {
            *entry = self.entries[(self.head + k) & mask].take();
        }
        self.entries = entries;
        self.head = 0;
    }

    /// Tracks `slot` under `id`, the id after the last one handed out.
    pub(crate) fn insert(&mut self, id: u64, slot: T) {
        if self.span == 0 {
            self.base = id;
        }
        debug_assert_eq!(id, self.base + self.span as u64, "ids are sequential");
        self.reserve_one();
        let i = (self.head + self.span) & self.mask();
        let entry = &mut self.entries[i];
        debug_assert!(entry.is_none(), "outside the window every entry is None");
        // Unlike `Option::replace`, this neither moves the old entry out
        // nor looks at it.
        // SAFETY: `entry` is a valid, exclusive place holding `None`
        // (outside the window every entry does): no drop is lost.
        unsafe { std::ptr::write(entry, Some(slot)) };
        self.span += 1;
        self.live += 1;
    }

    /// `id` was handed out but is not tracked (its completion was seen
    /// before it was): leaves a hole, so that later ids keep their places.
    pub(crate) fn skip(&mut self, id: u64) {
        if self.span > 0 {
            debug_assert_eq!(id, self.base + self.span as u64, "ids are sequential");
            self.reserve_one();
            self.span += 1;
        }
    }

    #[inline]
    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        self.index(id).and_then(|i| self.entries[i].as_ref())
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let i = self.index(id)?;
        self.entries[i].as_mut()
    }

    pub(crate) fn contains_key(&self, id: u64) -> bool {
        self.get(id).is_some()
    }

    /// Every id below this one is untracked (the window starts here);
    /// `u64::MAX` when nothing is tracked.
    #[inline]
    pub(crate) fn oldest(&self) -> u64 {
        if self.span == 0 {
            u64::MAX
        } else {
            self.base
        }
    }

    /// Removes `id`'s entry and returns it.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let i = self.index(id)?;
        let slot = self.entries[i].take()?;
        self.released();
        Some(slot)
    }

    /// Removes `id`'s entry, dropping it in place, and returns what `f`
    /// makes of it first (the tests' form of
    /// [`remove_plain_at`](Self::remove_plain_at)).
    #[cfg(test)]
    fn remove_with<R>(&mut self, id: u64, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let pos = self.position(id)?;
        self.remove_plain_at(pos, |v| (f(v), false))
    }

    /// The ring position of `id`'s entry, if it is tracked: for a caller
    /// that looks at the entry and then may remove it
    /// ([`remove_plain_at`](Self::remove_plain_at)) without finding it twice.
    #[inline]
    pub(crate) fn position(&self, id: u64) -> Option<usize> {
        self.index(id).filter(|&i| self.entries[i].is_some())
    }

    /// The entry at `pos`, a position [`position`](Self::position) returned
    /// with no insertion since.
    #[inline]
    pub(crate) fn at(&self, pos: usize) -> Option<&T> {
        self.entries[pos].as_ref()
    }

    /// Removes the entry at `pos` (a position [`position`](Self::position)
    /// returned with no insertion since: removals do not move entries,
    /// growing does) and returns what `f` makes of it first, `f` saying
    /// also whether the entry owns nothing that needs its destructor (no
    /// memory, no waker): such an entry is forgotten in place, not dropped.
    /// The data path's entries mostly own nothing, and their drop glue is
    /// a call per field enum.
    #[inline]
    pub(crate) fn remove_plain_at<R>(
        &mut self,
        pos: usize,
        f: impl FnOnce(&mut T) -> (R, bool),
    ) -> Option<R> {
        let (r, owns_nothing) = f(self.entries[pos].as_mut()?);
        self.clear_at(pos, owns_nothing);
        Some(r)
    }

    /// The entry at `pos`, a position [`position`](Self::position) returned
    /// with no insertion since, to update or empty
    /// ([`clear_at`](Self::clear_at)) in place.
    #[inline]
    pub(crate) fn at_mut(&mut self, pos: usize) -> Option<&mut T> {
        self.entries[pos].as_mut()
    }

    /// Empties the occupied entry at `pos` (as
    /// [`remove_plain_at`](Self::remove_plain_at)): forgotten in place if
    /// `owns_nothing` (the caller took out whatever needed a destructor),
    /// dropped otherwise.
    #[inline]
    pub(crate) fn clear_at(&mut self, pos: usize, owns_nothing: bool) {
        let entry = &mut self.entries[pos];
        debug_assert!(entry.is_some(), "clear_at on an empty entry");
        if owns_nothing {
            // SAFETY: `entry` is a valid, exclusively borrowed place; not
            // dropping what it held can only leak, and the caller said it
            // owns nothing.
            unsafe { std::ptr::write(entry, None) };
        } else {
            *entry = None;
        }
        self.released();
    }

    /// An entry was just emptied: count it and advance the window past
    /// the holes at its front (in locals, written back once: the loop
    /// steps over the holes that requests untracked at their post leave,
    /// about one per message on a latency loop).
    #[inline]
    fn released(&mut self) {
        self.live -= 1;
        let mask = self.mask();
        let (mut head, mut span) = (self.head, self.span);
        while span > 0 && self.entries[head].is_none() {
            head = (head + 1) & mask;
            span -= 1;
        }
        self.base += (self.span - span) as u64;
        self.head = head;
        self.span = span;
    }

    /// Removes from `ids` ids that are not tracked, keeping every id that
    /// is: only the run at its front below the window (nothing there is
    /// tracked) when that run is at least a quarter of the list, else each
    /// id that is not tracked. A scope's ids ascend, so that run is what is
    /// old enough; the ids inside the window are looked up only when most
    /// of the list lies there (an old request holding the window open),
    /// which keeps the list within a few times what is tracked, without
    /// looking up each of a server's many posted receives at every
    /// compaction.
    pub(crate) fn forget_untracked(&self, ids: &mut Vec<u64>) {
        let oldest = self.oldest();
        let below = ids.iter().take_while(|&&id| id < oldest).count();
        if below > 0 && below * 4 >= ids.len() {
            ids.drain(..below);
        } else {
            ids.retain(|&id| id >= oldest && self.contains_key(id));
        }
    }

    /// How many entries are tracked.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The tracked entries, oldest id first.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.ids().filter_map(move |id| self.get(id))
    }

    /// The ids of the tracked entries, oldest first.
    pub(crate) fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        let mask = self.mask();
        (0..self.span)
            .filter(move |&k| self.entries[(self.head + k) & mask].is_some())
            .map(move |k| self.base + k as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_out_of_order_removal() {
        let mut s = SlotRing::default();
        for id in 10..20 {
            s.insert(id, id * 100);
        }
        assert_eq!(s.len(), 10);
        assert_eq!(s.oldest(), 10);
        assert!(s.contains_key(10) && s.contains_key(19));
        assert!(!s.contains_key(9) && !s.contains_key(20));
        // Remove in a different order than inserted.
        for id in [15, 19, 10, 12] {
            assert_eq!(s.remove(id), Some(id * 100));
            assert!(s.remove(id).is_none(), "second removal of {id}");
        }
        assert_eq!(s.len(), 6);
        assert_eq!(s.base, 11, "front advanced past removed id 10 only");
        assert_eq!(s.oldest(), 11, "nothing below the window is tracked");
        for id in [11, 13, 14, 16, 17] {
            assert_eq!(s.remove_with(id, |v| *v + 1), Some(id * 100 + 1));
        }
        assert_eq!(s.remove_with(17, |v| *v), None, "already removed");
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![1800]);
        assert!(s.remove(18).is_some());
        assert_eq!(s.len(), 0);
        assert_eq!(s.span, 0, "window empty");
        assert_eq!(s.oldest(), u64::MAX, "nothing tracked at all");
        // An id handed out but never tracked keeps the later ones in place.
        s.insert(20, 1);
        s.skip(21);
        s.insert(22, 2);
        assert!(s.contains_key(22) && !s.contains_key(21));
        assert!(s.remove(20).is_some() && s.remove(22).is_some());
        assert_eq!(s.span, 0);
        s.skip(23);
        assert_eq!(s.span, 0, "nothing to keep in place");
        // Reusable after emptying, from a later id.
        s.insert(24, 3);
        assert!(s.contains_key(24));
        assert_eq!(s.get_mut(24).copied(), Some(3));
    }

    #[test]
    fn grows_with_a_wrapped_window() {
        let mut s = SlotRing::default();
        let mut next = 0u64;
        // Wrap the window around the ring's end, then outgrow it while an
        // old entry keeps the window open.
        for _ in 0..12 {
            s.insert(next, next);
            next += 1;
        }
        for id in 1..12 {
            assert_eq!(s.remove(id), Some(id));
        }
        assert_eq!(s.len(), 1, "id 0 keeps the window at 0..12");
        for _ in 0..100 {
            s.insert(next, next);
            next += 1;
        }
        assert_eq!(s.len(), 101);
        assert_eq!(s.get(0), Some(&0));
        for id in 12..next {
            assert_eq!(s.get(id), Some(&id), "id {id} after growing");
        }
        assert_eq!(s.remove(0), Some(0));
        assert_eq!(s.base, 12, "holes 1..12 passed over");
        let all: Vec<u64> = s.iter().copied().collect();
        assert_eq!(all, (12..next).collect::<Vec<_>>());
        // Steady state: one in, one out, never growing again.
        let cap = s.entries.len();
        for _ in 0..10_000 {
            s.insert(next, next);
            assert_eq!(s.remove(next - 100), Some(next - 100));
            next += 1;
        }
        assert_eq!(s.entries.len(), cap);
    }

    #[test]
    fn forgetting_untracked_ids_keeps_every_tracked_one() {
        let mut s = SlotRing::default();
        for id in 1..=40u64 {
            s.insert(id, id);
        }
        // Ids 1..=20 claimed in order, and 25 out of order.
        for id in (1..=20).chain([25]) {
            assert!(s.remove(id).is_some());
        }
        // Mostly below the window: only that run goes (25 stays listed
        // until the window passes it, as a claimed id a scope skips).
        let mut ids: Vec<u64> = (1..=40).collect();
        s.forget_untracked(&mut ids);
        assert_eq!(ids, (21..=40).collect::<Vec<_>>());
        // An old request holds the window open: every id is looked up.
        for id in (22..=40).filter(|&id| id != 30) {
            s.remove(id);
        }
        assert_eq!(s.oldest(), 21);
        let mut ids: Vec<u64> = (21..=40).collect();
        s.forget_untracked(&mut ids);
        assert_eq!(ids, vec![21, 30]);
        // Unordered input loses nothing tracked either.
        let mut ids = vec![30, 5, 21, 7];
        s.forget_untracked(&mut ids);
        assert_eq!(ids, vec![30, 21]);
        // Nothing tracked: everything goes.
        s.remove(21);
        s.remove(30);
        let mut ids = vec![21, 30, 41];
        s.forget_untracked(&mut ids);
        assert!(ids.is_empty());
    }

    #[test]
    fn plain_removal_forgets_only_what_owns_nothing() {
        use std::rc::Rc;
        let owner = Rc::new(());
        let mut s = SlotRing::default();
        s.insert(1, Rc::clone(&owner));
        s.insert(2, Rc::clone(&owner));
        assert_eq!(Rc::strong_count(&owner), 3);
        // Said to own something: dropped, its count given back.
        let at = |s: &SlotRing<_>, id| s.position(id).expect("tracked");
        let pos = at(&s, 1);
        assert_eq!(s.remove_plain_at(pos, |_| ((), false)), Some(()));
        assert_eq!(Rc::strong_count(&owner), 2);
        // Said to own nothing: forgotten in place (here a deliberate leak,
        // which is how the test sees that no destructor ran).
        let pos = at(&s, 2);
        assert!(s.at(pos).is_some());
        assert_eq!(s.remove_plain_at(pos, |_| ((), true)), Some(()));
        assert_eq!(Rc::strong_count(&owner), 2);
        assert_eq!((s.len(), s.span), (0, 0));
        assert_eq!(s.position(2), None);
    }
}
