//! The address message of rdma-core's `ibv_rc_pingpong` (and its
//! siblings): `"LLLL:QQQQQQ:PPPPPP:GGGG...G"` — LID (4 hex digits), QP
//! number (6), PSN (6), GID (32 hex digits, bytes in network order) —
//! NUL-terminated in a fixed 52-byte buffer.

use rdma_safe::channel::Gid;
use std::fmt::Write as _;

/// Bytes of one address message on the wire (the size of the C
/// program's buffer, `sizeof "0000:000000:000000:" + 32 hex digits`).
pub const MSG_LEN: usize = 52;

/// The word the client sends once it has the server's address (with its
/// NUL: 5 bytes).
pub const DONE: &[u8; 5] = b"done\0";

/// One side's address (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// GID; all zero when the sender uses no GRH.
    pub gid: Gid,
}

impl Dest {
    /// The wire form: `%04x:%06x:%06x:` then the GID as 32 hex digits,
    /// NUL-padded to [`MSG_LEN`].
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let mut text = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn);
        for b in self.gid.as_bytes() {
            let _ = write!(text, "{b:02x}");
        }
        let mut out = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        out[..n].copy_from_slice(&text.as_bytes()[..n]);
        out
    }

    /// Parses the wire form (up to the first NUL).
    ///
    /// # Errors
    /// A description of what is malformed.
    pub fn from_wire(msg: &[u8]) -> Result<Dest, String> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| "address message is not text".to_owned())?;
        let mut fields = text.splitn(4, ':');
        let mut hex = |what: &str, max: u32| -> Result<u32, String> {
            let f = fields
                .next()
                .ok_or_else(|| format!("address message `{text}` lacks the {what}"))?;
            let v = u32::from_str_radix(f, 16)
                .map_err(|_| format!("bad {what} `{f}` in address message `{text}`"))?;
            if v > max {
                return Err(format!("{what} {v:#x} out of range in `{text}`"));
            }
            Ok(v)
        };
        let lid = hex("LID", 0xffff)? as u16;
        let qpn = hex("QPN", 0xff_ffff)?;
        let psn = hex("PSN", 0xff_ffff)?;
        let g = fields
            .next()
            .ok_or_else(|| format!("address message `{text}` lacks the GID"))?;
        let bad_gid = || format!("bad GID `{g}` in address message `{text}`");
        if g.len() != 32 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad_gid());
        }
        let mut gid = [0u8; 16];
        for (b, pair) in gid.iter_mut().zip(g.as_bytes().chunks(2)) {
            let pair = std::str::from_utf8(pair).map_err(|_| bad_gid())?;
            *b = u8::from_str_radix(pair, 16).map_err(|_| bad_gid())?;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Gid(gid),
        })
    }

    /// The line the C program prints, e.g.
    /// `LID 0x0000, QPN 0x000011, PSN 0x2a5b3c, GID ::ffff:10.0.2.15`
    /// (GID in `inet_ntop` form).
    pub fn describe(&self) -> String {
        format!(
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            std::net::Ipv6Addr::from(self.gid.0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_message_round_trips_in_the_c_format() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: "::ffff:10.0.2.15".parse().unwrap(),
        };
        let wire = d.to_wire();
        assert_eq!(wire.len(), 52);
        assert_eq!(
            &wire[..51],
            b"0000:000011:abcdef:00000000000000000000ffff0a00020f".as_slice()
        );
        assert_eq!(wire[51], 0);
        assert_eq!(Dest::from_wire(&wire).unwrap(), d);
        assert_eq!(
            d.describe(),
            "LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:10.0.2.15"
        );
        assert!(Dest::from_wire(b"0000:000011:abcdef:00ff\0").is_err());
        assert!(Dest::from_wire(b"zz").is_err());
        assert!(Dest::from_wire(b"0000:1000000:000000:00000000000000000000000000000000").is_err());
    }

    #[test]
    fn the_decoder_survives_fuzzing() {
        use crate::fuzz::{check, inputs, peak_bytes};
        use proptest::prelude::*;
        let d = Dest {
            lid: 0xffff,
            qpn: 0xff_ffff,
            psn: 0,
            gid: "::ffff:10.0.2.15".parse().unwrap(),
        };
        let valid = d.to_wire();
        assert!(Dest::from_wire(&valid).is_ok());
        check(20_000, inputs(&[&valid, &valid[..51]]), |input| {
            let (r, peak) = peak_bytes(|| Dest::from_wire(&input));
            prop_assert!(
                peak <= 4 * MSG_LEN.max(input.len()) + 256,
                "{peak} bytes for {input:?}"
            );
            if let Ok(d) = r {
                prop_assert!(d.qpn <= 0xff_ffff && d.psn <= 0xff_ffff, "{d:?}");
            }
            Ok(())
        });
    }
}
