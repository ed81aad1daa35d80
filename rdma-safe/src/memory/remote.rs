//! [`RemoteMemoryRegion`]: a peer's registered memory, as seen from here.

use crate::exchange;
use std::fmt;
use std::net::TcpStream;
use std::time::Duration;

/// Why a remote region or sub-range is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteRegionError {
    /// The sub-range does not lie within the region.
    #[error("range {offset}+{length} is outside the remote region of {region_length} bytes")]
    OutOfBounds {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        length: u64,
        /// Length of the region.
        region_length: u64,
    },
    /// The encoded bytes are not a remote region of this version.
    #[error("not an encoded remote memory region: {0}")]
    BadEncoding(&'static str),
}

/// The (address, length, rkey) triplet a peer hands out so that others can
/// RDMA-read or -write its [`MemoryRegion`](crate::MemoryRegion).
///
/// This is plain data: holding one gives no access to anything local. Whether
/// an operation on it succeeds is decided by the peer's NIC (wrong keys or
/// ranges produce a Remote Access Error completion).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteMemoryRegion {
    address: u64,
    length: u64,
    rkey: u32,
}

/// Magic bytes of the encoding.
const MAGIC: [u8; 4] = *b"RMR1";
/// Length of [`RemoteMemoryRegion::to_bytes`]'s output.
pub const REMOTE_REGION_ENCODED_LEN: usize = 24;

impl RemoteMemoryRegion {
    /// A remote region from its parts (as received from the peer).
    pub fn new(address: u64, length: u64, rkey: u32) -> Self {
        RemoteMemoryRegion {
            address,
            length,
            rkey,
        }
    }
    /// Start address in the peer's address space (or offset, for zero-based
    /// regions).
    pub fn address(&self) -> u64 {
        self.address
    }
    /// Length in bytes.
    pub fn length(&self) -> u64 {
        self.length
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The sub-range `offset..offset+length`, bounds-checked.
    pub fn slice(&self, offset: u64, length: u64) -> crate::Result<RemoteMemoryRegion> {
        match offset.checked_add(length) {
            Some(end) if end <= self.length => Ok(RemoteMemoryRegion {
                address: self.address + offset,
                length,
                rkey: self.rkey,
            }),
            _ => Err(crate::Error::from(RemoteRegionError::OutOfBounds {
                offset,
                length,
                region_length: self.length,
            })),
        }
    }

    /// The sub-range from `offset` to the end, bounds-checked.
    pub fn slice_from(&self, offset: u64) -> crate::Result<RemoteMemoryRegion> {
        self.slice(offset, self.length.checked_sub(offset).unwrap_or(u64::MAX))
    }

    /// The stable 24-byte encoding for handing the region to a peer:
    /// `b"RMR1"`, rkey (u32), address (u64), length (u64), little endian.
    pub fn to_bytes(&self) -> [u8; REMOTE_REGION_ENCODED_LEN] {
        let mut out = [0u8; REMOTE_REGION_ENCODED_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..8].copy_from_slice(&self.rkey.to_le_bytes());
        out[8..16].copy_from_slice(&self.address.to_le_bytes());
        out[16..24].copy_from_slice(&self.length.to_le_bytes());
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes)' output; garbage or truncated
    /// input is an error, never a panic.
    pub fn from_bytes(bytes: &[u8]) -> crate::Result<Self> {
        // Transports pad what they carry (the connection manager's private
        // data comes back as 56 or 196 bytes): zeros after the encoding are
        // padding, anything else is not this encoding.
        let (bytes, padding) = bytes.split_at_checked(REMOTE_REGION_ENCODED_LEN).ok_or(
            RemoteRegionError::BadEncoding("too short: a remote region is 24 bytes"),
        )?;
        if padding.iter().any(|&b| b != 0) {
            return Err(crate::Error::from(RemoteRegionError::BadEncoding(
                "24 bytes of region followed by non-zero bytes (not padding)",
            )));
        }
        if bytes[0..4] != MAGIC {
            return Err(crate::Error::from(RemoteRegionError::BadEncoding(
                "bad magic or version",
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let (rkey, address, length) = (u32_at(4), u64_at(8), u64_at(16));
        if address.checked_add(length).is_none() {
            return Err(crate::Error::from(RemoteRegionError::BadEncoding(
                "address + length overflows",
            )));
        }
        Ok(RemoteMemoryRegion {
            address,
            length,
            rkey,
        })
    }

    /// Sends this region to a peer over `stream` within `timeout` (the peer
    /// calls [`receive_from`](Self::receive_from)). The stream's own
    /// timeouts are restored afterwards.
    ///
    /// # Errors
    /// `Handshake(Timeout)` when the peer does not take the bytes in
    /// time, `Handshake(Io)` when the stream fails.
    pub fn send_to(&self, stream: &mut TcpStream, timeout: Duration) -> crate::Result<()> {
        Ok(exchange::Bounded::new(stream, timeout)?.write_all(&self.to_bytes())?)
    }

    /// Receives a region a peer sent with [`send_to`](Self::send_to), within
    /// `timeout`.
    ///
    /// # Errors
    /// `Handshake(Timeout)` for a silent peer, `Handshake(Io)`
    /// for a closed stream (`UnexpectedEof`) or bytes that are not a region
    /// (`InvalidData`).
    pub fn receive_from(stream: &mut TcpStream, timeout: Duration) -> crate::Result<Self> {
        let mut buf = [0u8; REMOTE_REGION_ENCODED_LEN];
        exchange::Bounded::new(stream, timeout)?.read_exact(&mut buf)?;
        Ok(Self::from_bytes(&buf).map_err(exchange::invalid_data)?)
    }
}

impl fmt::Debug for RemoteMemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteMemoryRegion")
            .field("address", &format_args!("{:#x}", self.address))
            .field("length", &self.length)
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let r = RemoteMemoryRegion::new(0x7f00_1234_0000, 1 << 20, 0xabcd);
        assert_eq!(RemoteMemoryRegion::from_bytes(&r.to_bytes()).unwrap(), r);
        assert!(RemoteMemoryRegion::from_bytes(&r.to_bytes()[..23]).is_err());
        assert!(RemoteMemoryRegion::from_bytes(&[0u8; 24]).is_err());
        let mut overflow = r.to_bytes();
        overflow[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(RemoteMemoryRegion::from_bytes(&overflow).is_err());
    }

    #[test]
    fn slices_are_bounds_checked() {
        let r = RemoteMemoryRegion::new(1000, 100, 7);
        assert_eq!(
            r.slice(10, 90).unwrap(),
            RemoteMemoryRegion::new(1010, 90, 7)
        );
        assert_eq!(r.slice(100, 0).unwrap().length(), 0);
        assert!(r.slice(10, 91).is_err());
        assert!(r.slice(u64::MAX, 2).is_err());
        assert_eq!(
            r.slice_from(40).unwrap(),
            RemoteMemoryRegion::new(1040, 60, 7)
        );
        assert!(r.slice_from(101).is_err());
    }
}

#[cfg(test)]
mod padding_tests {
    use super::*;

    #[test]
    fn padded_encodings_decode_and_garbage_is_named() {
        let r = RemoteMemoryRegion::new(0x1000, 4096, 0xabcd);
        let mut padded = r.to_bytes().to_vec();
        padded.resize(56, 0);
        let back = RemoteMemoryRegion::from_bytes(&padded).expect("padding is ignored");
        assert_eq!(
            (back.address(), back.length(), back.rkey()),
            (0x1000, 4096, 0xabcd)
        );
        padded[40] = 1;
        let err = RemoteMemoryRegion::from_bytes(&padded).expect_err("not padding");
        assert!(err.to_string().contains("non-zero bytes"), "{err}");
        let err = RemoteMemoryRegion::from_bytes(&padded[..10]).expect_err("short");
        assert!(err.to_string().contains("too short"), "{err}");
    }
}
