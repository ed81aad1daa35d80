//! The TCP protocol of `one_sided`, both sides of it, and the limits its
//! numbers share with the command line.
//!
//! 1. Both sides exchange queue pair addresses (`Channel::handshake`).
//! 2. The server sends its region (`RemoteMemoryRegion::to_bytes`).
//! 3. The client sends `ALIVE` lines while it works (a heartbeat, so the
//!    server can bound its wait however long the rounds take), then
//!    `DONE <seed>` once its last operation completed.
//! 4. The server answers `OK` or `BAD <why>`.

use rdma_examples::fail;
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Link, ALIVE};
use rdma_examples::Result;
use rdma_safe::RemoteMemoryRegion;
use std::time::Duration;

/// Bytes the server exposes (`--size`), also the most a client accepts.
pub(crate) const SIZE: Limit = Limit::new("--size", 1, 1 << 30);
/// Bytes per operation (`--chunk`).
pub(crate) const CHUNK: Limit = Limit::new("--chunk", 1, 1 << 30);
/// Local iovecs per operation (`--iovs`).
pub(crate) const IOVS: Limit = Limit::new("--iovs", 1, 16);
/// Operations in flight (`--depth`).
pub(crate) const DEPTH: Limit = Limit::new("--depth", 1, 4096);
/// Write/read-back rounds (`-n/--rounds`).
pub(crate) const ROUNDS: Limit = Limit::new("-n/--rounds", 1, 1_000_000);

/// How often the client's heartbeat says `ALIVE`: well below the smallest
/// timeout a server may have.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(250);

/// Checks the server's region (decoded by rdma-safe) against what the
/// client can use: at most [`SIZE`] bytes, a whole number of `chunk`s.
/// Returns the region and its length.
///
/// # Errors
/// A length outside the limits.
pub(crate) fn check_region(
    remote: RemoteMemoryRegion,
    chunk: usize,
) -> Result<(RemoteMemoryRegion, usize)> {
    let size = usize::try_from(remote.length())
        .ok()
        .and_then(|n| SIZE.check_usize(n).ok())
        .ok_or_else(|| {
            format!(
                "the server's region is {} bytes; the limit is {} ({})",
                remote.length(),
                SIZE.max,
                SIZE.name
            )
        })
        .map_err(fail)?;
    if chunk == 0 || size % chunk != 0 {
        return Err(fail(format!(
            "the server's {size} bytes are not a multiple of --chunk {chunk}"
        )));
    }
    Ok((remote, size))
}

/// The client's last line.
pub(crate) fn done_line(seed: u64) -> String {
    format!("DONE {seed}")
}

/// One line from the client: `None` for a heartbeat, the seed for `DONE`.
///
/// # Errors
/// Any other line.
pub(crate) fn decode_client_line(line: &str) -> Result<Option<u64>> {
    if line == ALIVE {
        return Ok(None);
    }
    let seed = net::rest_after(line, "DONE")
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| {
            fail(format!(
                "bad line from the client: `{}`",
                line.escape_debug()
            ))
        })?;
    Ok(Some(seed))
}

/// Server: waits for `DONE`, each line (heartbeat or `DONE`) within the
/// link's timeout; returns the seed.
///
/// # Errors
/// Timeout, closed connection, or a bad line.
pub(crate) fn read_done(link: &mut Link) -> Result<u64> {
    loop {
        let line = link.read_line("the client's DONE (or its heartbeat)")?;
        if let Some(seed) = decode_client_line(&line)? {
            return Ok(seed);
        }
    }
}

/// Client: the server's answer to `DONE`.
///
/// # Errors
/// `BAD`, or anything else that is not `OK`.
pub(crate) fn decode_verdict(line: &str) -> Result<()> {
    if line == "OK" {
        Ok(())
    } else {
        Err(fail(format!(
            "the server's check failed: {}",
            line.escape_debug()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{check, inputs, peak_bytes};
    use proptest::prelude::*;
    use rdma_safe::memory::REMOTE_REGION_ENCODED_LEN;

    /// The region a server's bytes decode to, checked as the client does.
    fn decode_region(bytes: &[u8], chunk: usize) -> Result<(RemoteMemoryRegion, usize)> {
        check_region(RemoteMemoryRegion::from_bytes(bytes)?, chunk)
    }

    #[test]
    fn regions_within_limits_only() {
        let r = |len| RemoteMemoryRegion::new(0x1000, len, 7).to_bytes();
        assert_eq!(decode_region(&r(8192), 4096).unwrap().1, 8192);
        assert!(decode_region(&r(8192), 3000).is_err());
        let e = decode_region(&r(183 << 30), 4096).unwrap_err().to_string();
        assert!(e.contains("limit is 1073741824 (--size)"), "{e}");
        assert!(decode_region(&r(u64::MAX), 1).is_err());
        assert!(decode_region(&r(0), 1).is_err());
    }

    #[test]
    fn the_decoders_survive_fuzzing() {
        let region = RemoteMemoryRegion::new(0x7f00_0000_1000, 1 << 18, 0x1234).to_bytes();
        check(20_000, (inputs(&[&region]), 0..20u32), |(input, log2)| {
            let mut bytes = [0u8; REMOTE_REGION_ENCODED_LEN];
            let n = input.len().min(bytes.len());
            bytes[..n].copy_from_slice(&input[..n]);
            let chunk = 1 << log2;
            let (r, peak) = peak_bytes(|| decode_region(&bytes, chunk));
            prop_assert!(peak <= 1024, "{peak} bytes for {bytes:?}");
            if let Ok((_, size)) = r {
                prop_assert!(SIZE.check_usize(size).is_ok() && size % chunk == 0);
            }
            Ok(())
        });
        let lines: [&[u8]; 4] = [b"DONE 1", b"ALIVE", b"OK", b"BAD 7 x"];
        check(20_000, inputs(&lines), |input| {
            let line = String::from_utf8_lossy(&input);
            let ((), peak) = peak_bytes(|| {
                let _ = decode_client_line(&line);
                let _ = decode_verdict(&line);
            });
            prop_assert!(peak <= 1024 + 4 * line.len(), "{peak} bytes for {line:?}");
            Ok(())
        });
    }
}
