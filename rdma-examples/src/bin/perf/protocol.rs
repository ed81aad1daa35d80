//! The TCP protocol between a `perf` client and server, both sides of it,
//! and the limits its numbers share with the command line.
//!
//! 1. client → server: the test parameters, one line
//!    (`PERF1 test=write_bw iters=5000 tx_depth=128 rx_depth=512 inline=auto
//!    events=0 atomic=FETCH_AND_ADD qps=1 bidi=0 sizes=65536`); the server
//!    answers `OK` or `ERR <why>`. With `qps` above 1 or `bidi=1` the
//!    exchanges below change as [`crate::own_multi`] describes.
//! 2. Both exchange queue pair addresses (`Channel::handshake`); the side
//!    that exposes a buffer sends its region (`RemoteMemoryRegion::to_bytes`:
//!    the server for write, read and atomic tests, the client too for
//!    write_lat).
//! 3. Per size: server `GO <size>`, client `DONE <size>` after its last
//!    operation (and `ALIVE` every 250 ms until then), server `OK <size>`
//!    or `BAD <size> <why>`.
//! 4. client `BYE`.
//!
//! Every number the peer sends is checked against the same [`Limit`]s as
//! the command line before it sizes anything.

use rdma_examples::fail;
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Link, MAX_LINE};
use rdma_examples::Result;
use rdma_safe::RemoteMemoryRegion;

/// Largest size of `-a`.
pub(crate) const MAX_ALL: usize = 8 << 20;
/// Message size (`-s`).
pub(crate) const SIZE: Limit = Limit::new("-s/--size", 1, MAX_ALL as u64 * 64);
/// Sizes one run may have: those of `-a`, 2 B to 8 MiB.
pub(crate) const MAX_SIZES: usize = 23;
/// Operations per size (`-n`).
pub(crate) const ITERS: Limit = Limit::new("-n/--iters", 1, 100_000_000);
/// Operations in flight (`-t`).
pub(crate) const TX_DEPTH: Limit = Limit::new("-t/--tx-depth", 1, 16384);
/// Receives posted at a time (`-r`).
pub(crate) const RX_DEPTH: Limit = Limit::new("-r/--rx-depth", 1, 16384);
/// Inline size (`-I`).
pub(crate) const INLINE: Limit = Limit::new("-I/--inline-size", 0, 4096);
/// Queue pairs (`-q`): one connection each.
pub(crate) const QPS: Limit = Limit::new("-q/--qp", 1, 64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Test {
    WriteBw,
    ReadBw,
    SendBw,
    WriteLat,
    ReadLat,
    SendLat,
    AtomicBw,
    AtomicLat,
}

impl Test {
    pub(crate) const ALL: [Test; 8] = [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
        Test::AtomicBw,
        Test::AtomicLat,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
            Test::SendBw => "send_bw",
            Test::WriteLat => "write_lat",
            Test::ReadLat => "read_lat",
            Test::SendLat => "send_lat",
            Test::AtomicBw => "atomic_bw",
            Test::AtomicLat => "atomic_lat",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == s)
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::SendBw => "Send BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendLat => "Send Latency Test",
            Test::AtomicBw => "Atomic BW Test",
            Test::AtomicLat => "Atomic Latency Test",
        }
    }

    pub(crate) fn is_bw(self) -> bool {
        matches!(
            self,
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw
        )
    }

    /// Whether the test runs 64-bit atomics on a word the server exposes
    /// (its own data path, in the `atomic` module; 8-byte operations only).
    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, Test::AtomicBw | Test::AtomicLat)
    }

    /// Whether the server exposes a byte buffer to the client (the atomic
    /// tests expose a word of their own instead).
    pub(crate) fn server_exposes(self) -> bool {
        !matches!(
            self,
            Test::SendBw | Test::SendLat | Test::AtomicBw | Test::AtomicLat
        )
    }

    /// Whether `-q` above 1 applies (the bandwidth tests).
    pub(crate) fn takes_many_qps(self) -> bool {
        self.is_bw()
    }

    /// Whether `-b` applies (the bandwidth tests on bytes).
    pub(crate) fn takes_both_directions(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }

    pub(crate) fn uses_receives(self) -> bool {
        matches!(self, Test::SendBw | Test::SendLat)
    }

    /// Inline size when none is asked for: perftest's values for latency
    /// tests (which it uses on the devices it knows), none for bandwidth.
    pub(crate) fn default_inline(self) -> u32 {
        match self {
            Test::WriteLat => 220,
            Test::SendLat => 236,
            _ => 0,
        }
    }
}

/// The atomic the atomic tests run (`-A`, perftest's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum AtomicKind {
    /// Fetch-and-add of 1: operation `i` returns `i`.
    #[default]
    FetchAndAdd,
    /// Compare-and-swap of `i` with `i + 1`: operation `i` succeeds (and
    /// returns `i`) because a connection executes its atomics in order.
    CmpAndSwap,
}

impl AtomicKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            AtomicKind::FetchAndAdd => "FETCH_AND_ADD",
            AtomicKind::CmpAndSwap => "CMP_AND_SWAP",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<AtomicKind> {
        [AtomicKind::FetchAndAdd, AtomicKind::CmpAndSwap]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// Test parameters, decided by the client and sent to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Params {
    pub(crate) test: Test,
    /// 1 to [`MAX_SIZES`] sizes, each within [`SIZE`].
    pub(crate) sizes: Vec<usize>,
    pub(crate) iters: usize,
    pub(crate) tx_depth: usize,
    pub(crate) rx_depth: usize,
    /// `None`: the test's default, reduced to 0 where the device refuses.
    pub(crate) inline: Option<u32>,
    pub(crate) events: bool,
    /// The atomic tests' operation (sent as `atomic=`; a client that does
    /// not send it means fetch-and-add).
    pub(crate) atomic: AtomicKind,
    /// `-q`: queue pairs, each running `iters` operations with `tx_depth`
    /// in flight (as perftest's `-q`); sent as `qps=` (absent: 1).
    pub(crate) qps: usize,
    /// `-b`: both sides post (sent as `bidi=`; absent: 0).
    pub(crate) bidirectional: bool,
}

impl Params {
    /// The client's parameter line.
    pub(crate) fn to_line(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(usize::to_string).collect();
        format!(
            "PERF1 test={} iters={} tx_depth={} rx_depth={} inline={} events={} atomic={} qps={} bidi={} sizes={}",
            self.test.name(),
            self.iters,
            self.tx_depth,
            self.rx_depth,
            self.inline.map_or("auto".to_owned(), |n| n.to_string()),
            u8::from(self.events),
            self.atomic.name(),
            self.qps,
            u8::from(self.bidirectional),
            sizes.join(",")
        )
    }

    /// Decodes and checks the client's parameter line: every number within
    /// its limit, every parameter present.
    ///
    /// # Errors
    /// What is malformed, missing or out of range (naming the limit).
    pub(crate) fn from_line(line: &str) -> Result<Params> {
        let quoted = || {
            line.chars()
                .take(200)
                .collect::<String>()
                .escape_debug()
                .to_string()
        };
        let mut words = line.split_whitespace();
        if words.next() != Some("PERF1") {
            return Err(fail(format!("not a perf client (got `{}`)", quoted())));
        }
        let (mut test, mut sizes) = (None, Vec::new());
        let (mut iters, mut tx_depth, mut rx_depth) = (None, None, None);
        let (mut inline, mut events) = (None, None);
        let mut atomic = AtomicKind::default();
        let (mut qps, mut bidirectional) = (1, false);
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| fail(format!("malformed parameter in `{}`", quoted())))?;
            let num = |limit: Limit| limit.parse_usize(v).map(Some);
            match k {
                "test" => {
                    test = Some(
                        Test::parse(v)
                            .ok_or_else(|| {
                                format!(
                                    "unknown test `{}` in the client's parameters",
                                    v.escape_debug()
                                )
                            })
                            .map_err(fail)?,
                    )
                }
                "iters" => iters = num(ITERS).map_err(fail)?,
                "tx_depth" => tx_depth = num(TX_DEPTH).map_err(fail)?,
                "rx_depth" => rx_depth = num(RX_DEPTH).map_err(fail)?,
                "inline" if v == "auto" => inline = Some(None),
                "inline" => inline = Some(Some(INLINE.parse(v).map_err(fail)? as u32)),
                "events" => events = Some(flag("events", v)?),
                "qps" => qps = QPS.parse_usize(v).map_err(fail)?,
                "bidi" => bidirectional = flag("bidi", v)?,
                "atomic" => {
                    atomic = AtomicKind::parse(v)
                        .ok_or_else(|| {
                            format!(
                                "unknown atomic `{}` in the client's parameters",
                                v.escape_debug()
                            )
                        })
                        .map_err(fail)?
                }
                "sizes" => {
                    sizes.clear();
                    for s in v.split(',') {
                        if sizes.len() == MAX_SIZES {
                            return Err(fail(format!("more than {MAX_SIZES} sizes")));
                        }
                        sizes.push(SIZE.parse_usize(s).map_err(fail)?);
                    }
                }
                _ => {} // newer clients may add parameters
            }
        }
        match (test, iters, tx_depth, rx_depth, inline, events) {
            (Some(test), ..)
                if (qps > 1 && !test.takes_many_qps())
                    || (bidirectional && !test.takes_both_directions()) =>
            {
                Err(fail(format!(
                    "{} runs on one queue pair one way (qps={qps}, bidi={})",
                    test.name(),
                    u8::from(bidirectional)
                )))
            }
            (Some(test), ..) if test.is_atomic() && sizes != [rdma_safe::work::ATOMIC_SIZE] => {
                Err(fail(format!(
                    "{} operates on {} bytes, not sizes={}",
                    test.name(),
                    rdma_safe::work::ATOMIC_SIZE,
                    sizes
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )))
            }
            (
                Some(test),
                Some(iters),
                Some(tx_depth),
                Some(rx_depth),
                Some(inline),
                Some(events),
            ) if !sizes.is_empty() => Ok(Params {
                test,
                sizes,
                iters,
                tx_depth,
                rx_depth,
                inline,
                events,
                atomic,
                qps,
                bidirectional,
            }),
            _ => Err(fail(format!("incomplete parameters `{}`", quoted()))),
        }
    }

    /// The banner of the test, e.g. `RDMA_Write BW Test` or
    /// `Atomic FETCH_AND_ADD BW Test`.
    pub(crate) fn title(&self) -> String {
        match self.test {
            Test::AtomicBw => format!("Atomic {} BW Test", self.atomic.name()),
            Test::AtomicLat => format!("Atomic {} Latency Test", self.atomic.name()),
            t => t.title().to_owned(),
        }
    }

    /// Whether the run takes the many-lane path ([`crate::multi_qp`]):
    /// more than one queue pair, or both directions.
    pub(crate) fn many_lanes(&self) -> bool {
        self.qps > 1 || self.bidirectional
    }

    /// The largest size (at least 1).
    pub(crate) fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(1).max(1)
    }
}

/// The server's wait for the client's `DONE <size>`: the client sends
/// `ALIVE` every [`crate::watch::HEARTBEAT`] from `GO` on, so each line
/// must come within the link's timeout, however long the run takes, and a
/// stopped client is given up on that long after its last heartbeat.
///
/// # Errors
/// The client is silent for the timeout, gone, or sent another line.
pub(crate) fn expect_done(link: &mut Link, size: usize) -> Result<()> {
    let line = link.read_line_after_heartbeats(link.timeout(), "the client's DONE")?;
    let done = net::rest_after(&line, "DONE").ok_or_else(|| {
        fail(format!(
            "expected `DONE {size}` from the client, got `{}`",
            line.escape_debug()
        ))
    })?;
    expect_size(done, size, "the client finished")
}

/// A `0`/`1` parameter of the client's line.
fn flag(name: &str, v: &str) -> Result<bool> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(fail(format!("bad {name}={}", v.escape_debug()))),
    }
}

/// The server's answer to the parameters.
pub(crate) fn decode_answer(line: &str) -> Result<()> {
    if line == "OK" {
        Ok(())
    } else {
        Err(fail(format!("the server refused: {}", line.escape_debug())))
    }
}

/// Checks that the peer's region (decoded by rdma-safe) holds `needed`
/// bytes.
///
/// # Errors
/// A region too small.
pub(crate) fn check_region(r: RemoteMemoryRegion, needed: usize) -> Result<RemoteMemoryRegion> {
    if r.length() < needed as u64 {
        return Err(fail(format!(
            "the peer's region is {} bytes, smaller than the {needed}-byte messages",
            r.length()
        )));
    }
    Ok(r)
}

/// Checks that `rest` (after a `GO`, `DONE` or `OK` word) is `size`.
///
/// # Errors
/// Another size, or not a number.
pub(crate) fn expect_size(rest: &str, size: usize, what: &str) -> Result<()> {
    if rest == size.to_string() {
        Ok(())
    } else {
        Err(fail(format!(
            "{what} for size `{}`, expected {size}",
            rest.chars().take(64).collect::<String>().escape_debug()
        )))
    }
}

/// The server's verdict on one size, told to the client either way
/// (`OK <size>`, or `BAD <size> <why>` on one line; the client reads it
/// with [`decode_verdict`]); then `outcome`, its error naming the size.
///
/// # Errors
/// `outcome`'s error. A verdict that cannot be written is not one: the
/// client then fails on its own read.
pub(crate) fn send_verdict<T>(link: &mut Link, size: usize, outcome: Result<T>) -> Result<T> {
    let reply = match &outcome {
        Ok(_) => format!("OK {size}"),
        Err(e) => format!("BAD {size} {e}").replace('\n', " "),
    };
    let _ = link.write_line(&reply);
    outcome.map_err(|e| fail(format!("{size} bytes: {e}")))
}

/// The server's verdict on a size: `OK <size>`, or the reason of `BAD`.
///
/// # Errors
/// `BAD`, or anything else.
pub(crate) fn decode_verdict(line: &str, size: usize) -> Result<()> {
    match net::rest_after(line, "OK") {
        Some(rest) => expect_size(rest, size, "the server's check passed"),
        None => Err(fail(format!(
            "the server's data check failed: {}",
            line.chars()
                .take(MAX_LINE)
                .collect::<String>()
                .escape_debug()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{check, inputs, peak_bytes};
    use proptest::prelude::*;
    use rdma_safe::memory::REMOTE_REGION_ENCODED_LEN;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The region a peer's bytes decode to, checked as `recv_region` does.
    fn decode_region(bytes: &[u8], needed: usize) -> Result<RemoteMemoryRegion> {
        check_region(RemoteMemoryRegion::from_bytes(bytes)?, needed)
    }

    fn sample() -> Params {
        Params {
            test: Test::WriteLat,
            sizes: vec![2, 4096],
            iters: 1000,
            tx_depth: 1,
            rx_depth: 512,
            inline: Some(220),
            events: true,
            atomic: AtomicKind::FetchAndAdd,
            qps: 1,
            bidirectional: false,
        }
    }

    #[test]
    fn parameters_round_trip_and_limits_hold() {
        let p = sample();
        assert_eq!(Params::from_line(&p.to_line()).unwrap(), p);
        let all = Params {
            sizes: (1..=23).map(|k| 1usize << k).collect(),
            inline: None,
            ..sample()
        };
        assert_eq!(Params::from_line(&all.to_line()).unwrap(), all);
        let cas = Params {
            test: Test::AtomicBw,
            sizes: vec![8],
            atomic: AtomicKind::CmpAndSwap,
            ..sample()
        };
        assert_eq!(Params::from_line(&cas.to_line()).unwrap(), cas);
        // A client without `atomic=` means fetch-and-add; without `qps=`
        // and `bidi=`, one queue pair one way.
        let old = sample()
            .to_line()
            .replace(" atomic=FETCH_AND_ADD", "")
            .replace(" qps=1 bidi=0", "");
        assert_eq!(Params::from_line(&old).unwrap(), sample());
        let many = Params {
            test: Test::SendBw,
            qps: 4,
            bidirectional: true,
            ..sample()
        };
        assert_eq!(Params::from_line(&many.to_line()).unwrap(), many);
        let bad = |from: &str, to: &str| {
            let line = sample().to_line().replace(from, to);
            Params::from_line(&line).unwrap_err().to_string()
        };
        // The cases a hostile client tried: each names the limit.
        assert!(bad("sizes=2,4096", "sizes=1099511627776").contains("-s/--size"));
        assert!(bad("sizes=2,4096", "sizes=18446744073709551615").contains("-s/--size"));
        assert!(bad("sizes=2,4096", "sizes=0").contains("-s/--size"));
        assert!(bad("rx_depth=512", "rx_depth=4294967297").contains("-r/--rx-depth"));
        assert!(bad("iters=1000", "iters=0").contains("-n/--iters"));
        assert!(bad("tx_depth=1", "tx_depth=16385").contains("-t/--tx-depth"));
        assert!(bad("inline=220", "inline=4097").contains("-I/--inline-size"));
        assert!(bad("qps=1", "qps=65").contains("-q/--qp"));
        assert!(bad("qps=1", "qps=0").contains("-q/--qp"));
        assert!(bad("bidi=0", "bidi=2").contains("bad bidi"));
        assert!(bad("qps=1", "qps=2").contains("write_lat runs on one queue pair"));
        let many = vec!["1"; MAX_SIZES + 1].join(",");
        assert!(bad("sizes=2,4096", &format!("sizes={many}")).contains("more than 23"));
        assert!(bad("iters=1000 ", "").contains("incomplete"));
        assert!(bad("test=write_lat", "test=nope").contains("unknown test"));
        assert!(bad("atomic=FETCH_AND_ADD", "atomic=XOR").contains("unknown atomic"));
        let line = cas.to_line().replace("sizes=8", "sizes=8,16");
        let e = Params::from_line(&line).unwrap_err().to_string();
        assert!(
            e.contains("atomic_bw operates on 8 bytes, not sizes=8,16"),
            "{e}"
        );
        assert!(bad("PERF1", "GET /").contains("not a perf client"));
    }

    #[test]
    fn replies_are_checked() {
        assert!(decode_answer("OK").is_ok());
        assert!(decode_answer("ERR no")
            .unwrap_err()
            .to_string()
            .contains("refused"));
        assert!(decode_verdict("OK 64", 64).is_ok());
        assert!(decode_verdict("OK 65", 64).is_err());
        assert!(decode_verdict("BAD 64 wrong", 64).is_err());
        let r = |len| RemoteMemoryRegion::new(0x1000, len, 7).to_bytes();
        assert!(decode_region(&r(4096), 4096).is_ok());
        assert!(decode_region(&r(4095), 4096).is_err());
    }

    #[test]
    fn the_decoders_survive_fuzzing() {
        let lines = [
            sample().to_line(),
            Params {
                inline: None,
                test: Test::SendBw,
                ..sample()
            }
            .to_line(),
        ];
        let valid: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        let accepted = AtomicUsize::new(0);
        check(30_000, inputs(&valid), |input| {
            let line = String::from_utf8_lossy(&input);
            let (r, peak) = peak_bytes(|| Params::from_line(&line));
            prop_assert!(peak <= 2048 + 4 * line.len(), "{peak} bytes for {line:?}");
            if let Ok(p) = r {
                accepted.fetch_add(1, Ordering::Relaxed);
                prop_assert!((1..=MAX_SIZES).contains(&p.sizes.len()), "{p:?}");
                for &s in &p.sizes {
                    prop_assert!(SIZE.check_usize(s).is_ok(), "{p:?}");
                }
                prop_assert!(ITERS.check_usize(p.iters).is_ok(), "{p:?}");
                prop_assert!(TX_DEPTH.check_usize(p.tx_depth).is_ok(), "{p:?}");
                prop_assert!(RX_DEPTH.check_usize(p.rx_depth).is_ok(), "{p:?}");
                if let Some(n) = p.inline {
                    prop_assert!(INLINE.check(n.into()).is_ok(), "{p:?}");
                }
                prop_assert!(QPS.check_usize(p.qps).is_ok(), "{p:?}");
            }
            Ok(())
        });
        // The inputs reach past the first field: many still decode.
        let accepted = accepted.into_inner();
        assert!(accepted > 100, "{accepted}");
        let replies: [&[u8]; 4] = [b"OK", b"OK 4096", b"BAD 4096 x", b"GO 4096"];
        check(20_000, inputs(&replies), |input| {
            let line = String::from_utf8_lossy(&input);
            let ((), peak) = peak_bytes(|| {
                let _ = decode_answer(&line);
                let _ = decode_verdict(&line, 4096);
                let _ = expect_size(&line, 4096, "x");
            });
            prop_assert!(peak <= 1024 + 8 * line.len(), "{peak} bytes for {line:?}");
            Ok(())
        });
        let region = RemoteMemoryRegion::new(0x7f00_0000_1000, 1 << 20, 0x1234).to_bytes();
        check(20_000, inputs(&[&region]), |input| {
            let mut bytes = [0u8; REMOTE_REGION_ENCODED_LEN];
            let n = input.len().min(bytes.len());
            bytes[..n].copy_from_slice(&input[..n]);
            let (r, peak) = peak_bytes(|| decode_region(&bytes, 4096));
            prop_assert!(peak <= 1024, "{peak} bytes for {bytes:?}");
            if let Ok(r) = r {
                prop_assert!(r.length() >= 4096, "{r:?}");
            }
            Ok(())
        });
    }
}
