//! [`Endpoint`]: what a peer needs to connect to a channel, its versioned
//! byte encoding, and the exchange over TCP.

use crate::exchange;
use rdma_core::{Gid, Mtu};
use std::net::TcpStream;
use std::time::Duration;

/// Why endpoint bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointDecodeError {
    /// Fewer or more bytes than the encoding has.
    #[error("endpoint encoding has {got} bytes, expected {expected}")]
    Length {
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// Not an endpoint encoding.
    #[error("not an endpoint encoding (bad magic)")]
    Magic,
    /// An encoding version this library does not speak.
    #[error("unsupported endpoint encoding version {0} (this library speaks 1)")]
    Version(u8),
    /// A field holds an impossible value.
    #[error("invalid endpoint field: {0}")]
    Field(&'static str),
}

/// The connection parameters of one side of a reliable connection: QP number,
/// initial packet sequence number, port, LID (InfiniBand only), GID and its
/// index (RoCE), and path MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// QP number (24 bits).
    pub qp_num: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// Port number on the device.
    pub port: u8,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// GID the peer must address (RoCE).
    pub gid: Gid,
    /// Index of that GID in the sender's table.
    pub gid_index: u8,
    /// Active MTU of the port.
    pub mtu: Mtu,
}

const MAGIC: [u8; 4] = *b"RDEP";
const VERSION: u8 = 1;
/// Length of [`Endpoint::to_bytes`]' output.
pub const ENDPOINT_ENCODED_LEN: usize = 36;

impl Endpoint {
    /// Version-1 encoding: `b"RDEP"`, version, port, gid_index, MTU bytes/256
    /// (u8), qp_num (u32), psn (u32), lid (u16), 2 reserved bytes, GID (16),
    /// all integers little endian.
    pub fn to_bytes(&self) -> [u8; ENDPOINT_ENCODED_LEN] {
        let mut b = [0u8; ENDPOINT_ENCODED_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.port;
        b[6] = self.gid_index;
        b[7] = (self.mtu.bytes() / 256) as u8;
        b[8..12].copy_from_slice(&self.qp_num.to_le_bytes());
        b[12..16].copy_from_slice(&self.psn.to_le_bytes());
        b[16..18].copy_from_slice(&self.lid.to_le_bytes());
        b[20..36].copy_from_slice(self.gid.as_bytes());
        b
    }

    /// Decodes and validates [`to_bytes`](Self::to_bytes)' output. Truncated,
    /// oversized or garbage input is an error, never a panic.
    pub fn from_bytes(b: &[u8]) -> crate::Result<Self> {
        if b.len() != ENDPOINT_ENCODED_LEN {
            return Err(crate::Error::from(EndpointDecodeError::Length {
                got: b.len(),
                expected: ENDPOINT_ENCODED_LEN,
            }));
        }
        if b[0..4] != MAGIC {
            return Err(crate::Error::from(EndpointDecodeError::Magic));
        }
        if b[4] != VERSION {
            return Err(crate::Error::from(EndpointDecodeError::Version(b[4])));
        }
        let mtu =
            Mtu::from_bytes(u32::from(b[7]) * 256).ok_or(EndpointDecodeError::Field("mtu"))?;
        let qp_num = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let psn = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        if qp_num > 0x00ff_ffff || qp_num == 0 {
            return Err(crate::Error::from(EndpointDecodeError::Field("qp_num")));
        }
        if psn > 0x00ff_ffff {
            return Err(crate::Error::from(EndpointDecodeError::Field("psn")));
        }
        if b[5] == 0 {
            return Err(crate::Error::from(EndpointDecodeError::Field("port")));
        }
        if b[18..20] != [0, 0] {
            return Err(crate::Error::from(EndpointDecodeError::Field(
                "reserved bytes",
            )));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[20..36]);
        Ok(Endpoint {
            qp_num,
            psn,
            port: b[5],
            lid: u16::from_le_bytes([b[16], b[17]]),
            gid: Gid(gid),
            gid_index: b[6],
            mtu,
        })
    }

    /// Sends `local` over `stream` and receives the peer's endpoint (both
    /// sides call this; each writes before reading), within `timeout`. The
    /// stream's own timeouts are restored afterwards.
    ///
    /// # Errors
    /// `Handshake(Timeout)` when the peer does not answer in time,
    /// `Handshake(Io)` for I/O errors, a peer that closes early
    /// (`UnexpectedEof`) or bytes that do not decode (`InvalidData`).
    pub fn exchange(
        stream: &mut TcpStream,
        local: &Endpoint,
        timeout: Duration,
    ) -> crate::Result<Endpoint> {
        let theirs = exchange::swap(stream, &local.to_bytes(), timeout)?;
        Ok(Endpoint::from_bytes(&theirs).map_err(exchange::invalid_data)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Endpoint {
        Endpoint {
            qp_num: 0x11,
            psn: 0xabcdef,
            port: 1,
            lid: 0,
            gid: "::ffff:10.0.2.15".parse().unwrap(),
            gid_index: 1,
            mtu: Mtu::Mtu1024,
        }
    }

    #[test]
    fn round_trip() {
        let e = sample();
        assert_eq!(Endpoint::from_bytes(&e.to_bytes()).unwrap(), e);
    }

    #[test]
    fn rejects_truncated_garbage_and_bad_fields() {
        let good = sample().to_bytes();
        for n in 0..good.len() {
            assert!(
                Endpoint::from_bytes(&good[..n]).is_err(),
                "truncated to {n}"
            );
        }
        assert_eq!(
            Endpoint::from_bytes(&[0u8; ENDPOINT_ENCODED_LEN]).unwrap_err(),
            EndpointDecodeError::Magic
        );
        let mut v = good;
        v[4] = 9;
        assert_eq!(
            Endpoint::from_bytes(&v).unwrap_err(),
            EndpointDecodeError::Version(9)
        );
        let mut m = good;
        m[7] = 3;
        assert_eq!(
            Endpoint::from_bytes(&m).unwrap_err(),
            EndpointDecodeError::Field("mtu")
        );
        let mut q = good;
        q[11] = 1;
        assert_eq!(
            Endpoint::from_bytes(&q).unwrap_err(),
            EndpointDecodeError::Field("qp_num")
        );
        // Pseudo-random garbage never panics.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let mut buf = good;
            for byte in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 5 == 0 {
                    *byte = x as u8;
                }
            }
            let _ = Endpoint::from_bytes(&buf);
        }
    }
}
