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

/// This side's version message.
pub(crate) fn version() -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    b[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    b
}

/// The peer's version, as a number (perftest compares versions so).
///
/// # Errors
/// Text that is not a version number, or one older than perftest 5.70
/// (whose exchange differs).
pub(crate) fn decode_version(b: &[u8]) -> Result<f64> {
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
    Ok(v)
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

    #[test]
    fn small_messages() {
        assert_eq!(decode_version(&version()).unwrap(), 6.06);
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
