//! The messages of perftest's control exchange in `-R` mode, as they travel
//! over its control connection (one RDMA send each, fields big endian):
//!
//! | message | bytes |
//! | --- | --- |
//! | version | the version string, NUL-padded (`6.06`) |
//! | system data | page size, then cache-line size: two messages, `i32` each |
//! | MTU | the `ibv_mtu` value as decimal text, NUL-terminated, 2 bytes |
//! | destination (`pingpong_dest`) | LID, outstanding reads, QPN, PSN, rkey (`u32` each), 4 bytes padding, buffer address (`u64`), GID (16), SRQ number, GID index (`u32` each): 56 bytes |
//! | bandwidth report | size, iterations (`u64` each), peak, average MB/s and Mpps (`f64` bit patterns): five messages |
//!
//! Messages carry no type or length: each side knows what comes next.
//!
//! `perf` adds one thing perftest does not see: after the NUL of its
//! version it announces what it runs ([`Shape`]), so that two `perf -R`
//! sides started for different tests refuse each other at once instead of
//! running mismatched loops into a timeout or, worse, both exiting 0.
//! perftest reads the version with `atof`, which stops at the NUL, and
//! sends zeros there itself (its parameters start zeroed and the version
//! is copied with `strncpy`), so neither direction changes for it.

use crate::protocol::{Params, Test};
use rdma_examples::fail;
use rdma_examples::Result;

/// The version this side announces: perftest's from Debian 12 (perftest
/// 4.5-0.17), so that the peer takes the paths it takes with itself.
pub(crate) const VERSION: &str = "6.06";
/// The length of a version message.
pub(crate) const VERSION_LEN: usize = 16;
/// The length of a destination message (`struct pingpong_dest`).
pub(crate) const DEST_LEN: usize = 56;
/// The page size announced in the system data (perftest's `cycle_buffer`).
pub(crate) const PAGE_SIZE: i32 = 4096;
/// The cache-line size announced in the system data.
pub(crate) const CACHE_LINE: i32 = 64;

/// What a side tells the other about its queue pair and buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Dest {
    pub(crate) lid: u32,
    pub(crate) out_reads: u32,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) rkey: u32,
    pub(crate) vaddr: u64,
    pub(crate) gid: [u8; 16],
    pub(crate) srqn: u32,
    pub(crate) gid_index: u32,
}

impl Dest {
    pub(crate) fn encode(&self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        for (at, v) in [
            (0, self.lid),
            (4, self.out_reads),
            (8, self.qpn),
            (12, self.psn),
            (16, self.rkey),
            (48, self.srqn),
            (52, self.gid_index),
        ] {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b
    }

    /// # Errors
    /// A message shorter than the fields up to the GID.
    pub(crate) fn decode(b: &[u8]) -> Result<Dest> {
        if b.len() < 48 {
            return Err(fail(format!(
                "the peer's destination message has {} bytes, not {DEST_LEN}",
                b.len()
            )));
        }
        let u32_at = |at: usize| b.get(at..at + 4).map_or(0, be32);
        Ok(Dest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(b[24..32].try_into().expect("8 bytes")),
            gid: b[32..48].try_into().expect("16 bytes"),
            srqn: u32_at(48),
            gid_index: u32_at(52),
        })
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b.try_into().expect("4 bytes"))
}

/// The byte after the version's NUL that says the peer is `perf` (perftest
/// has a zero there).
const PERF_MARK: u8 = b'P';
/// Where [`PERF_MARK`] sits: right after `6.06` and its NUL.
const SHAPE_AT: usize = VERSION.len() + 1;
/// The bit of the test byte that says `-b`.
const BIDIRECTIONAL: u8 = 0x80;

/// What a `perf -R` side runs, as it announces it after its version:
///
/// | byte | field |
/// | --- | --- |
/// | 5 | `P` |
/// | 6 | the test (1 = write_bw … 8 = atomic_lat, [`Test::ALL`]'s order), `0x80` set for `-b` |
/// | 7 | `-q` |
/// | 8..12 | `-s` (`u32`, big endian) |
/// | 12..16 | `-n` (`u32`, big endian) |
///
/// Both sides of `-R` run with the same options (as perftest's do), and
/// these are the ones whose difference makes the two sides' loops disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) test: Test,
    pub(crate) size: u32,
    pub(crate) iters: u32,
    pub(crate) qps: u8,
    pub(crate) bidirectional: bool,
}

impl Shape {
    /// What `p` runs in `-R` mode (its first size: `-R` runs one).
    pub(crate) fn of(p: &Params) -> Shape {
        // The limits of -s (512 MiB), -n (10^8) and -q (64) fit the fields.
        let fit = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Shape {
            test: p.test,
            size: fit(p.sizes[0]),
            iters: fit(p.iters),
            qps: u8::try_from(p.qps).unwrap_or(u8::MAX),
            bidirectional: p.bidirectional,
        }
    }

    fn encode(&self, b: &mut [u8; VERSION_LEN]) {
        let code = Test::ALL.iter().position(|&t| t == self.test).unwrap_or(0) as u8 + 1;
        b[SHAPE_AT] = PERF_MARK;
        b[SHAPE_AT + 1] = code | if self.bidirectional { BIDIRECTIONAL } else { 0 };
        b[SHAPE_AT + 2] = self.qps;
        b[SHAPE_AT + 3..SHAPE_AT + 7].copy_from_slice(&self.size.to_be_bytes());
        b[SHAPE_AT + 7..SHAPE_AT + 11].copy_from_slice(&self.iters.to_be_bytes());
    }

    /// The shape a `perf` peer announced in its version message; `None` for
    /// perftest (or anything else without the mark).
    fn decode(b: &[u8]) -> Option<Shape> {
        let f = b.get(SHAPE_AT..SHAPE_AT + 11)?;
        if f[0] != PERF_MARK {
            return None;
        }
        let code = usize::from(f[1] & !BIDIRECTIONAL);
        let test = *Test::ALL.get(code.checked_sub(1)?)?;
        Some(Shape {
            test,
            size: be32(&f[3..7]),
            iters: be32(&f[7..11]),
            qps: f[2],
            bidirectional: f[1] & BIDIRECTIONAL != 0,
        })
    }

    /// Whether both sides run `-n` operations: the receiving server of the
    /// send tests, write_lat's ping-pong, and every test with `-b`.
    fn both_count(&self) -> bool {
        self.bidirectional || matches!(self.test, Test::SendBw | Test::SendLat | Test::WriteLat)
    }

    /// The options as a command line would give them.
    fn describe(&self) -> String {
        let mut s = format!("{} -s {} -n {}", self.test.name(), self.size, self.iters);
        if self.qps != 1 {
            s += &format!(" -q {}", self.qps);
        }
        if self.bidirectional {
            s += " -b";
        }
        s
    }

    /// Accepts a `perf` peer that runs what this side runs.
    ///
    /// # Errors
    /// Another test, or the same with another `-s`, `-q`, `-b`, or `-n`
    /// where both sides count operations; the message names both
    /// (`client`: whether this side is the client).
    pub(crate) fn accept_peer(&self, peer: &Shape, client: bool) -> Result<()> {
        // -n matters only where both sides count operations; a passive
        // server (one-sided tests, one direction) may be given another.
        let peer_n = if self.both_count() {
            peer.iters
        } else {
            self.iters
        };
        if *self
            == (Shape {
                iters: peer_n,
                ..*peer
            })
        {
            return Ok(());
        }
        let (them, us) = if client {
            ("server", "client")
        } else {
            ("client", "server")
        };
        let what = if self.test == peer.test {
            format!(
                "the {them} runs `{}` but this {us} `{}`",
                peer.describe(),
                self.describe()
            )
        } else {
            format!(
                "the {them} runs {} but this {us} runs {}",
                peer.test.name(),
                self.test.name()
            )
        };
        Err(fail(format!(
            "{what}: both sides of perf -R need the same test, -s, -n, -q and -b"
        )))
    }
}

/// This side's version message, with what it runs after the NUL.
pub(crate) fn version(shape: &Shape) -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    b[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    shape.encode(&mut b);
    b
}

/// The peer's version, as a number (perftest compares versions so), and
/// what it runs when it is `perf`.
///
/// # Errors
/// Text that is not a version number, or one older than perftest 5.70
/// (whose exchange differs).
pub(crate) fn decode_version(b: &[u8]) -> Result<(f64, Option<Shape>)> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let text = String::from_utf8_lossy(&b[..end]);
    let v: f64 = text.trim().parse().map_err(|_| {
        fail(format!(
            "the peer's version `{}` is not a number",
            text.escape_debug()
        ))
    })?;
    if v < 5.70 {
        return Err(fail(format!(
            "the peer runs perftest {v}, older than the 5.70 this side speaks"
        )));
    }
    Ok((v, Shape::decode(b)))
}

/// An `i32` system-data message.
pub(crate) fn int(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

/// # Errors
/// Fewer than 4 bytes.
pub(crate) fn decode_int(b: &[u8]) -> Result<i32> {
    b.get(..4)
        .map(|x| i32::from_be_bytes(x.try_into().expect("4 bytes")))
        .ok_or_else(|| fail(format!("expected a 4-byte number, got {} bytes", b.len())))
}

/// The MTU message: `ibv_mtu` (1 = 256 … 5 = 4096) as one digit and a NUL.
pub(crate) fn mtu(enum_value: u8) -> [u8; 2] {
    [b'0' + enum_value.min(9), 0]
}

/// The peer's MTU as an `ibv_mtu` value; `None` when it is not a valid one
/// (perftest then keeps its own).
pub(crate) fn decode_mtu(b: &[u8]) -> Option<u8> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    std::str::from_utf8(&b[..end])
        .ok()?
        .parse::<u8>()
        .ok()
        .filter(|m| (1..=5).contains(m))
}

/// A bandwidth report as perftest exchanges it, one field per message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BwReport {
    pub(crate) size: u64,
    pub(crate) iters: u64,
    pub(crate) peak_mb: f64,
    pub(crate) avg_mb: f64,
    pub(crate) mpps: f64,
}

impl BwReport {
    pub(crate) fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.peak_mb.to_bits().to_be_bytes(),
            self.avg_mb.to_bits().to_be_bytes(),
            self.mpps.to_bits().to_be_bytes(),
        ]
    }

    /// # Errors
    /// A message shorter than 8 bytes.
    pub(crate) fn decode(msgs: &[Vec<u8>; 5]) -> Result<BwReport> {
        let mut v = [0u64; 5];
        for (x, m) in v.iter_mut().zip(msgs) {
            *x = u64::from_be_bytes(
                m.get(..8)
                    .ok_or_else(|| fail("a bandwidth report field shorter than 8 bytes"))?
                    .try_into()
                    .expect("8 bytes"),
            );
        }
        Ok(BwReport {
            size: v[0],
            iters: v[1],
            peak_mb: f64::from_bits(v[2]),
            avg_mb: f64::from_bits(v[3]),
            mpps: f64::from_bits(v[4]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_layout_is_perftests() {
        let d = Dest {
            lid: 1,
            out_reads: 16,
            qpn: 0x11,
            psn: 0x123456,
            rkey: 0xaabbccdd,
            vaddr: 0x0102_0304_0506_0708,
            gid: [9; 16],
            srqn: 0,
            gid_index: 1,
        };
        let b = d.encode();
        assert_eq!(b[16..20], [0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(b[24..32], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[52..56], [0, 0, 0, 1]);
        assert_eq!(Dest::decode(&b).unwrap(), d);
        assert!(Dest::decode(&b[..40]).is_err());
    }

    fn shape(test: Test) -> Shape {
        Shape {
            test,
            size: 4096,
            iters: 200,
            qps: 1,
            bidirectional: false,
        }
    }

    #[test]
    fn the_shape_rides_after_the_version() {
        let mine = Shape {
            qps: 4,
            bidirectional: true,
            iters: 100_000_000,
            size: 512 << 20,
            ..shape(Test::SendBw)
        };
        let b = version(&mine);
        assert_eq!(&b[..5], b"6.06\0", "perftest reads up to the NUL");
        assert_eq!(decode_version(&b).unwrap(), (6.06, Some(mine)));
        for t in Test::ALL {
            let b = version(&shape(t));
            assert_eq!(decode_version(&b).unwrap().1, Some(shape(t)));
        }
        // perftest's version: zeros after the NUL, so no shape.
        let mut theirs = [0u8; VERSION_LEN];
        theirs[..4].copy_from_slice(b"6.06");
        assert_eq!(decode_version(&theirs).unwrap(), (6.06, None));
        // A mark with a test code that does not exist is not a shape.
        let mut odd = version(&shape(Test::WriteBw));
        odd[SHAPE_AT + 1] = 9;
        assert_eq!(decode_version(&odd).unwrap().1, None);
        assert_eq!(decode_version(&odd[..8]).unwrap().1, None);
    }

    #[test]
    fn a_peer_running_something_else_is_refused_by_name() {
        let w = shape(Test::WriteBw);
        w.accept_peer(&w, true).unwrap();
        let e = w
            .accept_peer(&shape(Test::ReadBw), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the client runs read_bw but this server runs write_bw"),
            "{e}"
        );
        let big = Shape { size: 65536, ..w };
        let e = w.accept_peer(&big, true).unwrap_err().to_string();
        assert!(
            e.contains("the server runs `write_bw -s 65536 -n 200` but this client `write_bw -s 4096 -n 200`"),
            "{e}"
        );
        let many = Shape {
            qps: 4,
            bidirectional: true,
            ..w
        };
        let e = many.accept_peer(&w, false).unwrap_err().to_string();
        assert!(
            e.contains("this server `write_bw -s 4096 -n 200 -q 4 -b`"),
            "{e}"
        );
        // A passive server may be given another -n; a counting one may not.
        w.accept_peer(&Shape { iters: 7, ..w }, false).unwrap();
        let s = shape(Test::SendBw);
        let e = s
            .accept_peer(&Shape { iters: 7, ..s }, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the client runs `send_bw -s 4096 -n 7`"), "{e}");
        let b = Shape {
            bidirectional: true,
            ..w
        };
        assert!(b.accept_peer(&Shape { iters: 7, ..b }, true).is_err());
    }

    #[test]
    fn small_messages() {
        assert_eq!(
            decode_version(&version(&shape(Test::WriteBw))).unwrap().0,
            6.06
        );
        assert!(decode_version(b"5.5\0").is_err());
        assert!(decode_version(b"x\0").is_err());
        assert_eq!(decode_mtu(&mtu(3)), Some(3));
        assert_eq!(decode_mtu(b"9\0"), None);
        assert_eq!(decode_int(&int(4096)).unwrap(), 4096);
        let r = BwReport {
            size: 65536,
            iters: 5000,
            peak_mb: 37.5,
            avg_mb: 36.25,
            mpps: 0.00058,
        };
        let m = r.encode().map(|x| x.to_vec());
        assert_eq!(BwReport::decode(&m).unwrap(), r);
    }
}
