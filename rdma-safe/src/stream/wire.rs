//! What rsocket puts on the wire: the connection data carried in the CM
//! private data, the 32-bit immediates of its messages, and the target
//! entries (address, key, length) one side writes into the other's target
//! list. Pure encoding and decoding, no verbs.

use crate::error::{Error, Result};

/// The protocol version rsocket speaks (and the only one it accepts).
pub(crate) const VERSION: u8 = 1;
/// Connection-data flag: the sender's host is big-endian, so the target
/// entries it expects to find written in its list are big-endian.
pub(crate) const FLAG_BIG_ENDIAN: u8 = 1 << 0;
/// Bytes of the connection data (`struct rs_conn_data`).
pub(crate) const CONN_DATA_LEN: usize = 40;
/// Bytes of one target entry (`struct rs_sge`: address, key, length).
pub(crate) const SGE_LEN: usize = 16;
/// The most entries a peer's target list may have for this side to use it
/// (rsocket's has two).
pub(crate) const MAX_TARGET_ENTRIES: u32 = 64;
/// The largest byte count a data message's 29 bits carry.
pub(crate) const MAX_MESSAGE_BYTES: u32 = (1 << 29) - 1;

/// Whether this host is big-endian, as the connection data's flag says it.
pub(crate) const HOST_BIG_ENDIAN: bool = cfg!(target_endian = "big");

/// A region of registered memory as rsocket names it: where it is, its
/// remote key and its length in bytes (for a target list: in entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Sge {
    pub(crate) addr: u64,
    pub(crate) key: u32,
    pub(crate) len: u32,
}

impl Sge {
    /// The entry as the peer reads it from its target list: in the byte
    /// order of the peer's host (`big_endian`).
    pub(crate) fn to_bytes(self, big_endian: bool) -> [u8; SGE_LEN] {
        let mut out = [0u8; SGE_LEN];
        if big_endian {
            out[..8].copy_from_slice(&self.addr.to_be_bytes());
            out[8..12].copy_from_slice(&self.key.to_be_bytes());
            out[12..].copy_from_slice(&self.len.to_be_bytes());
        } else {
            out[..8].copy_from_slice(&self.addr.to_le_bytes());
            out[8..12].copy_from_slice(&self.key.to_le_bytes());
            out[12..].copy_from_slice(&self.len.to_le_bytes());
        }
        out
    }

    /// An entry the peer wrote into this side's target list: in this
    /// host's order (a peer of the other byte order swaps it, as its
    /// connection data's flag told it to).
    pub(crate) fn from_host_bytes(b: &[u8; SGE_LEN]) -> Sge {
        let word = |r: std::ops::Range<usize>| -> [u8; 4] { b[r].try_into().expect("4 bytes") };
        Sge {
            addr: u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            key: u32::from_ne_bytes(word(8..12)),
            len: u32::from_ne_bytes(word(12..16)),
        }
    }

    fn to_network(self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.addr.to_be_bytes());
        out[8..12].copy_from_slice(&self.key.to_be_bytes());
        out[12..16].copy_from_slice(&self.len.to_be_bytes());
    }

    fn from_network(b: &[u8]) -> Sge {
        Sge {
            addr: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            key: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            len: u32::from_be_bytes(b[12..16].try_into().expect("4 bytes")),
        }
    }
}

/// `struct rs_conn_data`, sent with the connect request and the accept:
/// every multi-byte field in network order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnData {
    pub(crate) flags: u8,
    /// Receives the sender posted: the data messages the other side may
    /// have outstanding before a credit update.
    pub(crate) credits: u16,
    /// The sender's target list: address, key, and its length in entries.
    pub(crate) target_sgl: Sge,
    /// The first receive buffer, which the other side writes into first.
    pub(crate) data_buf: Sge,
}

impl ConnData {
    /// This side's connection data: no iomap, this host's byte order.
    pub(crate) fn ours(credits: u16, target_sgl: Sge, data_buf: Sge) -> ConnData {
        ConnData {
            flags: if HOST_BIG_ENDIAN { FLAG_BIG_ENDIAN } else { 0 },
            credits,
            target_sgl,
            data_buf,
        }
    }

    /// Whether the sender's host is big-endian.
    pub(crate) fn big_endian(&self) -> bool {
        self.flags & FLAG_BIG_ENDIAN != 0
    }

    /// The 40 bytes of the private data.
    pub(crate) fn encode(&self) -> [u8; CONN_DATA_LEN] {
        let mut out = [0u8; CONN_DATA_LEN];
        out[0] = VERSION;
        out[1] = self.flags;
        out[2..4].copy_from_slice(&self.credits.to_be_bytes());
        // Bytes 4..7 are reserved and 7 is the iomap size: zero, none.
        self.target_sgl.to_network(&mut out[8..24]);
        self.data_buf.to_network(&mut out[24..40]);
        out
    }

    /// The connection data at the start of a peer's private data (the
    /// transport pads it).
    ///
    /// # Errors
    /// [`Error::Protocol`] when the private data is too short, of another
    /// version than 1, or names no usable target list, receive buffer or
    /// credits — what a peer that does not speak rsocket sends.
    pub(crate) fn decode(data: &[u8]) -> Result<ConnData> {
        let refuse = |why: String| Error::Protocol(format!("connection data: {why}"));
        if data.len() < CONN_DATA_LEN {
            return Err(refuse(format!(
                "{} bytes of private data, rsocket's take {CONN_DATA_LEN}",
                data.len()
            )));
        }
        if data[0] != VERSION {
            return Err(refuse(format!(
                "version {}, only rsocket version {VERSION} is spoken (is the peer an rsocket?)",
                data[0]
            )));
        }
        let conn = ConnData {
            flags: data[1],
            credits: u16::from_be_bytes([data[2], data[3]]),
            target_sgl: Sge::from_network(&data[8..24]),
            data_buf: Sge::from_network(&data[24..40]),
        };
        if conn.credits == 0 {
            return Err(refuse("no receive credits".into()));
        }
        if conn.target_sgl.len == 0 || conn.target_sgl.len > MAX_TARGET_ENTRIES {
            return Err(refuse(format!(
                "a target list of {} entries (1 to {MAX_TARGET_ENTRIES} are taken)",
                conn.target_sgl.len
            )));
        }
        if conn.data_buf.len == 0 {
            return Err(refuse("an empty first receive buffer".into()));
        }
        Ok(conn)
    }
}

/// Control messages (the low bits of a control immediate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    /// The sender will neither send nor receive any more.
    Disconnect,
    /// A liveness probe (rsocket's keepalive); nothing to do.
    Keepalive,
    /// The sender will send no more; it still receives.
    Shutdown,
    /// A control message this side does not know.
    Other(u32),
}

/// One rsocket message: the 32-bit immediate of an RDMA write (top 3 bits
/// the type, low 29 its argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    /// Bytes written into the next published receive buffer.
    Data(u32),
    /// A credit update: the sequence number (low 16 bits) up to which the
    /// receiver of this message may send data messages; with a 16-byte
    /// write, a target entry was updated too.
    Credits(u16),
    /// An iomap entry was updated (ignored: no iomap here).
    Iomap(u32),
    /// A control message.
    Control(Control),
    /// A type rsocket reserves.
    Reserved(u32),
}

const OP_DATA: u32 = 0;
const OP_CREDITS: u32 = 4;
const OP_IOMAP: u32 = 6;
const OP_CONTROL: u32 = 7;
const LOW: u32 = (1 << 29) - 1;

impl Message {
    /// The immediate (host order; the verbs layer sends it in network
    /// order, as rsocket does).
    pub(crate) fn encode(self) -> u32 {
        let (op, arg) = match self {
            Message::Data(n) => (OP_DATA, n),
            Message::Credits(seq) => (OP_CREDITS, u32::from(seq)),
            Message::Iomap(i) => (OP_IOMAP, i),
            Message::Control(c) => (
                OP_CONTROL,
                match c {
                    Control::Disconnect => 0,
                    Control::Keepalive => 1,
                    Control::Shutdown => 2,
                    Control::Other(n) => n,
                },
            ),
            Message::Reserved(op) => (op, 0),
        };
        (op << 29) | (arg & LOW)
    }

    /// The message an immediate carries.
    pub(crate) fn decode(imm: u32) -> Message {
        let arg = imm & LOW;
        match imm >> 29 {
            OP_DATA => Message::Data(arg),
            // The receiver keeps the low 16 bits, as rsocket does.
            OP_CREDITS => Message::Credits(arg as u16),
            OP_IOMAP => Message::Iomap(arg),
            OP_CONTROL => Message::Control(match arg {
                0 => Control::Disconnect,
                1 => Control::Keepalive,
                2 => Control::Shutdown,
                n => Control::Other(n),
            }),
            op => Message::Reserved(op),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ConnData {
        ConnData::ours(
            384,
            Sge {
                addr: 0x0000_7f12_3456_7000,
                key: 0x1234,
                len: 2,
            },
            Sge {
                addr: 0x0000_7f00_0000_1000,
                key: 0xabcd_ef01,
                len: 65536,
            },
        )
    }

    #[test]
    fn connection_data_is_rsockets_layout_in_network_order() {
        let bytes = sample().encode();
        assert_eq!(bytes[0], 1, "version");
        assert_eq!(bytes[1], if HOST_BIG_ENDIAN { 1 } else { 0 }, "flags");
        assert_eq!(&bytes[2..4], &[0x01, 0x80], "credits 384, big-endian");
        assert_eq!(&bytes[4..8], &[0; 4], "reserved and iomap size");
        assert_eq!(&bytes[8..16], &0x0000_7f12_3456_7000u64.to_be_bytes());
        assert_eq!(&bytes[16..20], &[0, 0, 0x12, 0x34], "key before length");
        assert_eq!(&bytes[20..24], &[0, 0, 0, 2]);
        assert_eq!(&bytes[36..40], &65536u32.to_be_bytes());
        assert_eq!(ConnData::decode(&bytes).expect("decodes"), sample());
    }

    #[test]
    fn an_rsocket_peers_iomap_flag_is_taken_and_ignored() {
        // rsocket sets bit 1 (an iomap after its target list, of the size
        // in byte 7); this side uses neither.
        let mut theirs = sample().encode();
        theirs[1] |= 1 << 1;
        theirs[7] = 4;
        let conn = ConnData::decode(&theirs).expect("decodes");
        assert_eq!(conn.target_sgl, sample().target_sgl);
        assert_eq!(conn.big_endian(), HOST_BIG_ENDIAN);
    }

    #[test]
    fn padded_private_data_decodes() {
        let mut padded = [0u8; 56];
        padded[..CONN_DATA_LEN].copy_from_slice(&sample().encode());
        assert_eq!(ConnData::decode(&padded).expect("decodes"), sample());
    }

    #[test]
    fn garbage_is_refused_with_the_reason() {
        let short = ConnData::decode(&[1; 12]).expect_err("too short");
        assert!(short.to_string().contains("12 bytes"), "{short}");
        let mut wrong = sample().encode();
        wrong[0] = 0xEE;
        let version = ConnData::decode(&wrong).expect_err("version");
        assert!(version.to_string().contains("version 238"), "{version}");
        assert_eq!(version.kind(), crate::error::ErrorKind::InvalidData);
        let mut none = sample().encode();
        none[2..4].fill(0);
        assert!(ConnData::decode(&none).is_err(), "no credits");
        let mut huge = sample().encode();
        huge[20..24].copy_from_slice(&1000u32.to_be_bytes());
        assert!(ConnData::decode(&huge).is_err(), "a target list too long");
        let mut empty = sample().encode();
        empty[36..40].fill(0);
        assert!(ConnData::decode(&empty).is_err(), "an empty buffer");
    }

    #[test]
    fn immediates_match_rsockets_values() {
        assert_eq!(Message::Data(4096).encode(), 4096);
        assert_eq!(Message::Credits(0x1234).encode(), 0x8000_1234);
        assert_eq!(Message::Control(Control::Disconnect).encode(), 0xE000_0000);
        assert_eq!(Message::Control(Control::Shutdown).encode(), 0xE000_0002);
        assert_eq!(
            Message::decode(0x8001_0005),
            Message::Credits(5),
            "low 16 bits"
        );
        assert_eq!(Message::decode(0xC000_0003), Message::Iomap(3));
        assert_eq!(Message::decode(0x2000_0000), Message::Reserved(1));
        assert_eq!(
            Message::decode(0xE000_0001),
            Message::Control(Control::Keepalive)
        );
        for m in [
            Message::Data(MAX_MESSAGE_BYTES),
            Message::Credits(u16::MAX),
            Message::Control(Control::Shutdown),
            Message::Control(Control::Other(9)),
        ] {
            assert_eq!(Message::decode(m.encode()), m);
        }
    }

    #[test]
    fn target_entries_follow_the_readers_byte_order() {
        let sge = Sge {
            addr: 0x0102_0304_0506_0708,
            key: 0x0a0b_0c0d,
            len: 0x1000,
        };
        let be = sge.to_bytes(true);
        assert_eq!(&be[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let le = sge.to_bytes(false);
        assert_eq!(&le[12..], &[0, 0x10, 0, 0]);
        let native = sge.to_bytes(HOST_BIG_ENDIAN);
        assert_eq!(Sge::from_host_bytes(&native), sge);
    }
}
