//! Fuzzing the wire decoders in unit tests, without a fuzzing engine: a
//! deterministic pseudo-random generator, inputs derived from valid
//! messages (garbage, truncations, flipped bytes, every number replaced by
//! extreme values), and an allocator that records the largest allocation a
//! thread made, to show that no input makes a decoder allocate beyond its
//! limit.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// SplitMix64: small, fast, and the same sequence on every run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// Numbers (as text) at and beyond the edges of every integer type, and
/// things that look almost like numbers.
pub const EXTREMES: &[&str] = &[
    "0",
    "1",
    "-1",
    "255",
    "256",
    "65535",
    "65536",
    "16777215",
    "16777216",
    "2147483647",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "0x0",
    "0xffffffffffffffff",
    "ffffffff",
    "1K",
    "1G",
    "1024G",
    "+1",
    " 1",
    "",
    "1.5",
    "1e9",
    "NaN",
];

/// Inputs derived from the `valid` messages: each as is; every prefix
/// (truncation); each run of ASCII alphanumerics replaced by every value
/// of [`EXTREMES`]; then `random` more, each either a valid message with a
/// few random bytes changed, inserted or removed, or plain random bytes.
pub fn inputs(valid: &[&[u8]], random: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for &v in valid {
        out.push(v.to_vec());
        out.extend((0..v.len()).map(|n| v[..n].to_vec()));
        for (start, end) in runs(v) {
            for x in EXTREMES {
                let mut m = v[..start].to_vec();
                m.extend_from_slice(x.as_bytes());
                m.extend_from_slice(&v[end..]);
                out.push(m);
            }
        }
    }
    for _ in 0..random {
        let input = if valid.is_empty() || rng.below(4) == 0 {
            let len = rng.below(200);
            rng.bytes(len)
        } else {
            let mut m = valid[rng.below(valid.len())].to_vec();
            for _ in 0..=rng.below(4) {
                let at = rng.below(m.len() + 1);
                match rng.below(3) {
                    0 if at < m.len() => m[at] = rng.next_u64() as u8,
                    1 if at < m.len() => {
                        m.remove(at);
                    }
                    _ => m.insert(at, b"0123456789abcdef:,= \n\0"[rng.below(22)]),
                }
            }
            m
        };
        out.push(input);
    }
    out
}

/// The ranges of ASCII alphanumeric runs in `v`.
fn runs(v: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, b) in v.iter().chain(std::iter::once(&b' ')).enumerate() {
        match (b.is_ascii_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = PEAK.try_with(|p| p.set(p.get().max(size)));
}

/// A global allocator (the system's) that records the largest single
/// allocation of each thread; see [`largest_allocation`]. Install it in a
/// test binary with `#[global_allocator]`.
#[derive(Debug)]
pub struct PeakAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments,
// unchanged; the bookkeeping only touches a thread-local counter and never
// allocates.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded: `ptr` came from `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its result with the largest single allocation (in
/// bytes) this thread made meanwhile; meaningful where [`PeakAlloc`] is the
/// global allocator (0 otherwise).
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = PEAK.with(|p| p.replace(0));
    let out = f();
    let peak = PEAK.with(|p| p.replace(before.max(p.get())));
    (out, peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_varied() {
        let (a, b) = (
            inputs(&[b"GO 64"], 50, &mut Rng::new(1)),
            inputs(&[b"GO 64"], 50, &mut Rng::new(1)),
        );
        assert_eq!(a, b);
        assert!(a.contains(&b"GO 18446744073709551616".to_vec()));
        assert!(a.contains(&b"G".to_vec()));
        assert_eq!(runs(b"GO 64"), [(0, 2), (3, 5)]);
    }

    #[test]
    fn the_allocator_sees_allocations() {
        let (v, peak) = largest_allocation(|| vec![0u8; 12345]);
        assert!(peak >= 12345, "{peak}");
        drop(v);
        let ((), peak) = largest_allocation(|| ());
        assert_eq!(peak, 0);
    }
}
