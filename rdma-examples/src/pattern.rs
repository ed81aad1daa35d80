//! Deterministic data patterns: byte `i` of pattern `seed` depends on
//! both, without a short period, so a shifted, truncated, stale or
//! partly written copy never passes for the real one.

/// SplitMix64: a good 64-bit mix of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn word(seed: u64, index: u64) -> [u8; 8] {
    mix(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ index).to_le_bytes()
}

/// Byte at logical position `pos` of pattern `seed`.
pub fn byte_at(seed: u64, pos: u64) -> u8 {
    word(seed, pos / 8)[(pos % 8) as usize]
}

/// Fills `buf` with pattern `seed`, as if `buf` started at logical
/// position `start`.
pub fn fill(buf: &mut [u8], seed: u64, start: u64) {
    let mut cached = (u64::MAX, [0u8; 8]);
    for (pos, b) in (start..).zip(buf.iter_mut()) {
        let w = pos / 8;
        if cached.0 != w {
            cached = (w, word(seed, w));
        }
        *b = cached.1[(pos % 8) as usize];
    }
}

/// A difference between data and its expected pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Offset in the checked buffer.
    pub offset: usize,
    /// The byte expected there.
    pub expected: u8,
    /// The byte found.
    pub found: u8,
    /// How many bytes differ in all.
    pub count: usize,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} byte(s) differ; first at offset {}: expected {:#04x}, found {:#04x}",
            self.count, self.offset, self.expected, self.found
        )
    }
}

/// Checks that `buf` holds pattern `seed` from logical position `start`.
///
/// # Errors
/// The first difference and the number of differing bytes.
pub fn check(buf: &[u8], seed: u64, start: u64) -> Result<(), Mismatch> {
    let mut first: Option<Mismatch> = None;
    let mut count = 0;
    let mut cached = (u64::MAX, [0u8; 8]);
    for (i, &b) in buf.iter().enumerate() {
        let pos = start + i as u64;
        let w = pos / 8;
        if cached.0 != w {
            cached = (w, word(seed, w));
        }
        let want = cached.1[(pos % 8) as usize];
        if b != want {
            count += 1;
            first.get_or_insert(Mismatch {
                offset: i,
                expected: want,
                found: b,
                count: 0,
            });
        }
    }
    match first {
        None => Ok(()),
        Some(m) => Err(Mismatch { count, ..m }),
    }
}

/// A pattern computed once, for checking many buffers against it at the
/// cost of a comparison: a data path that verifies every message (perf's
/// async latency loop) should not spend a pattern computation per byte on
/// each one (about 1000 instructions for 64 bytes, more than the posting).
#[derive(Debug, Clone)]
pub struct Expected {
    bytes: Vec<u8>,
    seed: u64,
    start: u64,
}

impl Expected {
    /// Pattern `seed` from logical position `start`, `len` bytes long.
    pub fn new(len: usize, seed: u64, start: u64) -> Self {
        let mut bytes = vec![0u8; len];
        fill(&mut bytes, seed, start);
        Expected { bytes, seed, start }
    }

    /// As [`check`], for `buf` as long as the pattern; a buffer of another
    /// length is checked byte by byte against the pattern.
    ///
    /// # Errors
    /// As [`check`].
    #[inline]
    pub fn check(&self, buf: &[u8]) -> Result<(), Mismatch> {
        if buf == self.bytes.as_slice() {
            return Ok(());
        }
        check(buf, self.seed, self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_depend_on_seed_and_position() {
        let mut a = vec![0u8; 100];
        fill(&mut a, 7, 3);
        assert!(check(&a, 7, 3).is_ok());
        assert_eq!(a[10], byte_at(7, 13));
        let e = check(&a, 8, 3).unwrap_err();
        assert!(e.count > 80, "{e}");
        assert!(check(&a[1..], 7, 3).is_err(), "shifted");
        a[50] ^= 1;
        let e = check(&a, 7, 3).unwrap_err();
        assert_eq!((e.offset, e.count), (50, 1));
    }

    #[test]
    fn expected_patterns_check_as_the_pattern_does() {
        let e = Expected::new(64, 9, 3);
        let mut buf = vec![0u8; 64];
        fill(&mut buf, 9, 3);
        assert_eq!(e.check(&buf), Ok(()));
        buf[17] ^= 1;
        buf[40] ^= 2;
        let m = e.check(&buf).expect_err("two bytes changed");
        assert_eq!((m.offset, m.count), (17, 2));
        assert_eq!(e.check(&buf), check(&buf, 9, 3));
        // Another length: checked against the pattern itself.
        buf[17] ^= 1;
        buf[40] ^= 2;
        assert_eq!(e.check(&buf[..10]), Ok(()));
    }
}
