//! rcopy's messages: a 16-byte header (version, command, length, data,
//! id), an open's path after it, a write's 8-byte size after it, and the
//! header-only response to each.
//!
//! The C program sends its structures as they lie in memory, in the
//! host's byte order (it does no byte swapping), so this side uses the
//! host's order too: the two interoperate between hosts of the same
//! order, as two C programs do.
//!
//! ```text
//! header   u8 version (0) | u8 command | u16 len | u32 data | u64 id
//! open     header (data: the source's st_mode) | path, NUL, padding
//!          to the next multiple of 8 past the NUL
//! write    header (len 24) | u64 size   — then `size` bytes of the file
//! close    header
//! response header: command | 0x80, len 16, data: 0 or an errno, id echoed
//! ```

use std::io;

/// Bytes of a header.
pub(crate) const HEADER_LEN: usize = 16;
/// The length a write message says: its header and the 8-byte size.
pub(crate) const WRITE_LEN: u16 = 24;

/// Does nothing (never sent by either C side; this server answers it).
pub(crate) const CMD_NOOP: u8 = 0;
/// Creates (or truncates) the destination file.
pub(crate) const CMD_OPEN: u8 = 1;
/// Closes the destination file.
pub(crate) const CMD_CLOSE: u8 = 2;
/// Transfers the file's bytes.
pub(crate) const CMD_WRITE: u8 = 3;
/// The bit a response sets in the command it answers.
pub(crate) const CMD_RESP: u8 = 0x80;

/// `EINVAL`: a message the server cannot take.
pub(crate) const EINVAL: u32 = 22;
/// `EBUSY`: an open while a file is open.
pub(crate) const EBUSY: u32 = 16;
/// `EIO`: a file error without an errno.
pub(crate) const EIO: u32 = 5;

/// A message header (the version, always 0, is implied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) command: u8,
    /// The whole message's length, header included.
    pub(crate) len: u16,
    /// An open's file mode; a response's status.
    pub(crate) data: u32,
    /// Echoed by the response.
    pub(crate) id: u64,
}

impl Header {
    /// A request of `command`, `len` bytes long in all.
    pub(crate) fn request(command: u8, len: u16, data: u32) -> Header {
        Header {
            command,
            len,
            data,
            id: 0,
        }
    }

    /// The response to this request, with `status` (0: success).
    pub(crate) fn response(&self, status: u32) -> Header {
        Header {
            command: self.command | CMD_RESP,
            len: HEADER_LEN as u16,
            data: status,
            id: self.id,
        }
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[1] = self.command;
        b[2..4].copy_from_slice(&self.len.to_ne_bytes());
        b[4..8].copy_from_slice(&self.data.to_ne_bytes());
        b[8..].copy_from_slice(&self.id.to_ne_bytes());
        b
    }

    /// A received header, refused (as the C program refuses it) when its
    /// version is not 0 or its length is shorter than a header.
    pub(crate) fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, String> {
        let h = Header {
            command: b[1],
            len: u16::from_ne_bytes([b[2], b[3]]),
            data: u32::from_ne_bytes(b[4..8].try_into().expect("4 bytes")),
            id: u64::from_ne_bytes(b[8..].try_into().expect("8 bytes")),
        };
        if b[0] != 0 {
            return Err(format!(
                "a message header of version {} (rcopy's is 0)",
                b[0]
            ));
        }
        if usize::from(h.len) < HEADER_LEN {
            return Err(format!(
                "a message of {} bytes, shorter than its {HEADER_LEN}-byte header",
                h.len
            ));
        }
        Ok(h)
    }

    /// The status of this header as the response to `command`; an error
    /// if it is not one (another command, or a length other than a
    /// header's).
    pub(crate) fn status_for(&self, command: u8) -> Result<u32, String> {
        if self.command != command | CMD_RESP || usize::from(self.len) != HEADER_LEN {
            return Err(format!(
                "expected the response to command {command} (0x{:02x}, {HEADER_LEN} bytes), \
                 got command 0x{:02x} of {} bytes",
                command | CMD_RESP,
                self.command,
                self.len
            ));
        }
        Ok(self.data)
    }
}

/// The open message for `path` (bytes, no NUL inside), with `mode`.
pub(crate) fn open_message(path: &[u8], mode: u32) -> Result<Vec<u8>, String> {
    if path.is_empty() {
        return Err("the destination path is empty".into());
    }
    if path.contains(&0) {
        return Err("the destination path contains a NUL byte".into());
    }
    // The NUL and padding to a multiple of 8, as the C client pads.
    let padded = (path.len() + 8) & !7;
    let len = u16::try_from(HEADER_LEN + padded).map_err(|_| {
        format!(
            "the destination path is {} bytes, more than an open message holds",
            path.len()
        )
    })?;
    let mut m = Header::request(CMD_OPEN, len, mode).encode().to_vec();
    m.extend_from_slice(path);
    m.resize(usize::from(len), 0);
    Ok(m)
}

/// The path an open message carries after its header: the bytes before
/// the first NUL, which must be there and must not be first.
pub(crate) fn open_path(body: &[u8]) -> Result<&[u8], String> {
    match body.iter().position(|&b| b == 0) {
        Some(0) => Err("an open message with an empty path".into()),
        Some(end) => Ok(&body[..end]),
        None => Err("an open message whose path is not NUL-terminated".into()),
    }
}

/// A status as a person reads it: the errno's text.
pub(crate) fn describe(status: u32) -> String {
    match i32::try_from(status) {
        Ok(errno) if errno > 0 && errno < 4096 => io::Error::from_raw_os_error(errno).to_string(),
        _ => format!("status {status} (0x{status:08x})"),
    }
}

/// A file error as the status a response carries.
pub(crate) fn status_of(e: &io::Error) -> u32 {
    e.raw_os_error()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n != 0)
        .unwrap_or(EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_in_the_c_layout() {
        let h = Header {
            command: CMD_WRITE,
            len: 24,
            data: 0x0102_0304,
            id: 9,
        };
        let b = h.encode();
        assert_eq!(b[0], 0, "version");
        assert_eq!(b[1], 3);
        assert_eq!(&b[2..4], &24u16.to_ne_bytes());
        assert_eq!(&b[8..], &9u64.to_ne_bytes());
        assert_eq!(Header::decode(&b), Ok(h));
        let r = h.response(2);
        assert_eq!((r.command, r.len, r.data, r.id), (0x83, 16, 2, 9));
        assert_eq!(r.status_for(CMD_WRITE), Ok(2));
        assert!(r.status_for(CMD_OPEN).is_err());
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut b = Header::request(CMD_OPEN, 16, 0).encode();
        b[0] = 1;
        assert!(Header::decode(&b).unwrap_err().contains("version 1"));
        let b = Header::request(CMD_OPEN, 15, 0).encode();
        assert!(Header::decode(&b).unwrap_err().contains("15 bytes"));
        let long = Header::request(CMD_CLOSE | CMD_RESP, 24, 0);
        assert!(long.status_for(CMD_CLOSE).is_err());
    }

    #[test]
    fn open_messages_pad_past_the_nul_to_eight() {
        for (path, len) in [("a", 24), ("1234567", 24), ("12345678", 32), ("/tmp/x", 24)] {
            let m = open_message(path.as_bytes(), 0o100644).unwrap();
            assert_eq!(m.len(), len, "{path}");
            let h = Header::decode(m[..16].try_into().unwrap()).unwrap();
            assert_eq!((h.command, usize::from(h.len), h.data), (1, len, 0o100644));
            assert_eq!(open_path(&m[16..]), Ok(path.as_bytes()));
        }
        assert!(open_message(b"", 0).is_err());
        assert!(open_message(b"a\0b", 0).is_err());
        assert!(open_message(&[b'a'; 65520], 0).is_err());
        assert!(open_message(&[b'a'; 65500], 0).is_ok());
        assert!(open_path(b"abc").is_err());
        assert!(open_path(b"\0abc").is_err());
    }

    #[test]
    fn statuses_read_as_errno_texts() {
        assert!(describe(2).contains("No such file"), "{}", describe(2));
        assert!(describe(u32::MAX).contains("0xffffffff"));
        assert_eq!(status_of(&io::Error::from_raw_os_error(13)), 13);
        assert_eq!(status_of(&io::Error::other("x")), EIO);
    }
}
