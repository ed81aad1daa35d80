//! Flow control, as rsocket does it, without verbs: what this side may
//! send (credits and the peer's published receive buffers) and what it
//! owes the peer (credits back, buffers it has read and may publish
//! again). Every input from the peer is checked against what this side
//! published or was granted: a peer that claims more is refused.
//!
//! The receive ring is cut in two halves. The first is announced in the
//! connection data; the second, and each half again once it has been
//! read, is published by writing its entry into the peer's target list.
//! The peer fills one published buffer before it starts the next, so the
//! data of consecutive messages lies back to back in the ring.

use super::wire::{Sge, MAX_MESSAGE_BYTES};
use crate::error::{Error, Result};
use std::collections::VecDeque;

/// What this side owes the peer, to be posted as one credit update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The sequence number up to which the peer may send.
    pub(crate) limit: u16,
    /// A receive buffer to publish: the entry of the peer's target list to
    /// write, and the buffer's offset and length in the ring.
    pub(crate) publish: Option<(u32, u32, u32)>,
}

/// The receiving half: the ring's bookkeeping and the data messages that
/// arrived and are not read yet.
#[derive(Debug)]
pub(crate) struct Receiver {
    ring: u32,
    half: u32,
    receives: u16,
    /// Where the next byte to read is.
    read_at: u32,
    /// Where the next buffer to publish starts.
    free_at: u32,
    /// Bytes read and not yet published again.
    free: u32,
    /// Bytes published and not yet reported written.
    unwritten: u64,
    /// Bytes left of each data message not read to its end, oldest first.
    pending: VecDeque<u32>,
    /// Data messages read to their end (rsocket's receive sequence).
    seq: u16,
    /// At this sequence number credits are due again.
    due_at: u16,
    /// The entry of the peer's target list the next publication writes.
    entry: u32,
    entries: u32,
}

impl Receiver {
    /// A ring of `ring` bytes (even) whose first half the connection data
    /// announces, with `receives` receives posted, for a peer whose target
    /// list has `entries` entries (its first holds that first half).
    pub(crate) fn new(ring: u32, receives: u16, entries: u32) -> Receiver {
        let half = ring / 2;
        Receiver {
            ring,
            half,
            receives,
            read_at: 0,
            free_at: half,
            free: half,
            unwritten: u64::from(half),
            pending: VecDeque::with_capacity(usize::from(receives) + 1),
            seq: 0,
            due_at: receives / 2,
            entry: 1 % entries.max(1),
            entries: entries.max(1),
        }
    }

    /// A data message of `len` bytes arrived.
    ///
    /// # Errors
    /// [`Error::Protocol`] when the peer reports more bytes than it had
    /// room for, or more messages than it had credits for.
    pub(crate) fn on_data(&mut self, len: u32) -> Result<()> {
        if u64::from(len) > self.unwritten {
            return Err(Error::Protocol(format!(
                "a data message of {len} bytes, with only {} bytes published to write into",
                self.unwritten
            )));
        }
        if self.pending.len() >= usize::from(self.receives) {
            return Err(Error::Protocol(format!(
                "more than the {} data messages it had credits for",
                self.receives
            )));
        }
        self.unwritten -= u64::from(len);
        if len == 0 {
            // Nothing to read: consumed at once.
            self.seq = self.seq.wrapping_add(1);
        } else {
            self.pending.push_back(len);
        }
        Ok(())
    }

    /// Bytes arrived and not read.
    pub(crate) fn readable(&self) -> u64 {
        self.pending.iter().map(|&n| u64::from(n)).sum()
    }

    /// Whether any byte waits to be read.
    pub(crate) fn has_data(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The next contiguous stretch of the ring to read, at most `max`
    /// bytes: offset and length (`None` with nothing to read).
    pub(crate) fn next_read(&self, max: usize) -> Option<(usize, usize)> {
        let front = *self.pending.front()?;
        let to_end = self.ring - self.read_at;
        let n = (front.min(to_end) as usize).min(max);
        (n > 0).then_some((self.read_at as usize, n))
    }

    /// `n` bytes of [`next_read`](Self::next_read)'s stretch were copied out.
    pub(crate) fn consumed(&mut self, n: usize) {
        let n = u32::try_from(n).expect("a stretch fits the ring");
        let front = self.pending.front_mut().expect("consumed what was there");
        debug_assert!(n <= *front);
        *front -= n;
        if *front == 0 {
            self.pending.pop_front();
            self.seq = self.seq.wrapping_add(1);
        }
        self.read_at = (self.read_at + n) % self.ring;
        self.free += n;
    }

    /// The credit update owed now, if one is (rsocket's rule: a whole half
    /// read, or half the receives consumed, since the last).
    pub(crate) fn due(&self) -> Option<Grant> {
        let half_consumed = self.seq.wrapping_sub(self.due_at) as i16 >= 0;
        if self.free < self.half && !half_consumed {
            return None;
        }
        let publish = (self.free >= self.half).then_some((self.entry, self.free_at, self.half));
        Some(Grant {
            limit: self.seq.wrapping_add(self.receives),
            publish,
        })
    }

    /// `grant` (from [`due`](Self::due)) was posted.
    pub(crate) fn granted(&mut self, grant: Grant) {
        self.due_at = self.seq.wrapping_add(self.receives / 2);
        if grant.publish.is_some() {
            self.free -= self.half;
            self.free_at = (self.free_at + self.half) % self.ring;
            self.entry = (self.entry + 1) % self.entries;
            self.unwritten += u64::from(self.half);
        }
    }
}

/// The sending half: the credits the peer granted and the receive buffers
/// it published, in the order it will read them.
#[derive(Debug)]
pub(crate) struct Sender {
    seq: u16,
    limit: u16,
    credits: u16,
    targets: VecDeque<Sge>,
    /// The entry of this side's target list the peer writes next.
    entry: u32,
    entries: u32,
}

impl Sender {
    /// The peer granted `credits` and announced `first` in its connection
    /// data; this side's target list has `entries` entries.
    pub(crate) fn new(credits: u16, first: Sge, entries: u32) -> Sender {
        let mut targets = VecDeque::with_capacity(entries as usize + 1);
        targets.push_back(first);
        Sender {
            seq: 0,
            limit: credits,
            credits,
            targets,
            entry: 1 % entries.max(1),
            entries: entries.max(1),
        }
    }

    /// Whether a data message may be sent now.
    pub(crate) fn can_send(&self) -> bool {
        self.seq != self.limit && !self.targets.is_empty()
    }

    /// Where the next data message of up to `want` bytes goes: the
    /// address, key and length (clipped to the current buffer), which is
    /// then counted as sent. `None` without a credit or a buffer.
    pub(crate) fn take(&mut self, want: usize) -> Option<(u64, u32, u32)> {
        if !self.can_send() || want == 0 {
            return None;
        }
        let front = self.targets.front_mut().expect("checked above");
        let n = front.len.min(u32::try_from(want).unwrap_or(u32::MAX));
        let at = (front.addr, front.key, n);
        front.addr += u64::from(n);
        front.len -= n;
        if front.len == 0 {
            self.targets.pop_front();
        }
        self.seq = self.seq.wrapping_add(1);
        Some(at)
    }

    /// A credit update arrived, allowing data messages up to `limit`.
    ///
    /// # Errors
    /// [`Error::Protocol`] for more credits than the peer has receives.
    pub(crate) fn on_credits(&mut self, limit: u16) -> Result<()> {
        if limit.wrapping_sub(self.seq) > self.credits {
            return Err(Error::Protocol(format!(
                "a credit update up to {limit} with {} sent: more than the {} receives it \
                 announced",
                self.seq, self.credits
            )));
        }
        self.limit = limit;
        Ok(())
    }

    /// The entry of this side's target list the next publication lands in.
    pub(crate) fn next_entry(&self) -> u32 {
        self.entry
    }

    /// The peer published `sge` in [`next_entry`](Self::next_entry).
    ///
    /// # Errors
    /// [`Error::Protocol`] for an empty or oversized buffer, or more
    /// buffers than the target list holds.
    pub(crate) fn on_published(&mut self, sge: Sge) -> Result<()> {
        if sge.len == 0 || sge.len > MAX_MESSAGE_BYTES {
            return Err(Error::Protocol(format!(
                "a published receive buffer of {} bytes",
                sge.len
            )));
        }
        if self.targets.len() >= self.entries as usize {
            return Err(Error::Protocol(format!(
                "a buffer published over one not filled yet (the target list has {} entries)",
                self.entries
            )));
        }
        self.targets.push_back(sge);
        self.entry = (self.entry + 1) % self.entries;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u32 = 1024;

    fn buffer(addr: u64, len: u32) -> Sge {
        Sge { addr, key: 7, len }
    }

    #[test]
    fn the_second_half_is_published_at_once_then_each_half_once_read() {
        let mut rx = Receiver::new(RING, 8, 2);
        let g = rx.due().expect("the second half is owed at once");
        assert_eq!(g.publish, Some((1, 512, 512)));
        assert_eq!(g.limit, 8);
        rx.granted(g);
        assert_eq!(rx.due(), None, "nothing read, nothing owed");
        rx.on_data(300).unwrap();
        rx.on_data(212).unwrap();
        assert_eq!(rx.readable(), 512);
        assert_eq!(rx.next_read(1000), Some((0, 300)));
        rx.consumed(300);
        assert_eq!(rx.due(), None);
        assert_eq!(
            rx.next_read(100),
            Some((300, 100)),
            "clipped to the caller's room"
        );
        rx.consumed(100);
        rx.consumed(112);
        let g = rx.due().expect("a half was read");
        assert_eq!(
            g.publish,
            Some((0, 0, 512)),
            "entries cycle, the ring wraps"
        );
        assert_eq!(g.limit, 2 + 8);
        rx.granted(g);
    }

    #[test]
    fn credits_alone_once_half_the_receives_are_consumed() {
        let mut rx = Receiver::new(RING, 8, 2);
        rx.granted(rx.due().unwrap());
        for _ in 0..4 {
            rx.on_data(1).unwrap();
            rx.consumed(1);
        }
        let g = rx.due().expect("four of eight consumed");
        assert_eq!(g.publish, None, "only four bytes are free");
        assert_eq!(g.limit, 12);
        rx.granted(g);
        assert_eq!(rx.due(), None);
    }

    #[test]
    fn a_peer_claiming_more_than_it_was_given_is_refused() {
        let mut rx = Receiver::new(RING, 4, 2);
        let e = rx.on_data(513).expect_err("only 512 published");
        assert!(e.to_string().contains("513 bytes"), "{e}");
        let mut rx = Receiver::new(RING, 2, 2);
        rx.on_data(1).unwrap();
        rx.on_data(1).unwrap();
        assert!(rx.on_data(1).is_err(), "a third message on two credits");
    }

    #[test]
    fn writes_split_across_buffers_and_stop_without_credits() {
        let mut tx = Sender::new(3, buffer(0x1000, 100), 2);
        assert_eq!(tx.take(60), Some((0x1000, 7, 60)));
        assert_eq!(
            tx.take(60),
            Some((0x1000 + 60, 7, 40)),
            "clipped to the buffer"
        );
        assert!(!tx.can_send(), "no buffer left");
        assert_eq!(tx.next_entry(), 1);
        tx.on_published(buffer(0x9000, 100)).unwrap();
        assert_eq!(tx.next_entry(), 0);
        assert_eq!(tx.take(10), Some((0x9000, 7, 10)));
        assert!(!tx.can_send(), "three messages on three credits");
        assert_eq!(tx.take(10), None);
        tx.on_credits(3 + 3).unwrap();
        assert!(tx.can_send());
    }

    #[test]
    fn forged_credits_and_buffers_are_refused() {
        let mut tx = Sender::new(4, buffer(0x1000, 100), 2);
        assert!(tx.on_credits(5).is_err(), "five credits from four receives");
        assert!(
            tx.on_published(buffer(0x2000, 0)).is_err(),
            "an empty buffer"
        );
        tx.on_published(buffer(0x2000, 10)).unwrap();
        let e = tx.on_published(buffer(0x3000, 10)).expect_err("list full");
        assert!(e.to_string().contains("2 entries"), "{e}");
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut tx = Sender::new(2, buffer(0, u32::MAX / 8), 2);
        for i in 0..70_000u32 {
            assert!(tx.take(1).is_some(), "message {i}");
            let seq = tx.seq;
            tx.on_credits(seq.wrapping_add(2)).unwrap();
        }
        let mut rx = Receiver::new(RING, 4, 2);
        rx.granted(rx.due().unwrap());
        for _ in 0..70_000u32 {
            rx.on_data(1).unwrap();
            rx.consumed(1);
            if let Some(g) = rx.due() {
                rx.granted(g);
            }
        }
        assert!(
            rx.unwritten <= u64::from(RING),
            "never more than the ring published"
        );
    }
}
