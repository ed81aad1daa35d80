//! rstream's test over any byte stream: a 16-byte exchange to start both
//! sides together, then per iteration `count` transfers of `size` bytes
//! from the client and as many back, timed from after the exchange to the
//! last byte. With `-T v` every byte sent counts up modulo 256 from the
//! previous one (one count per process for what it sends, one for what it
//! receives, the exchange included), and every byte received is checked
//! against the peer's count, as rstream's `format_buf` and `verify_buf`.

use crate::report::Shape;
use rdma_examples::{fail, Result};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// The bytes of the starting exchange.
const SYNC_BYTES: usize = 16;

/// The counts `-T v` writes and checks.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// The next byte to send.
    next_sent: u8,
    /// The next byte expected from the peer.
    next_received: u8,
    /// Bytes received and checked so far (for the failure's position).
    received: u64,
}

impl Counts {
    /// Fills `buf` with the next bytes of the sending count.
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_sent;
            self.next_sent = self.next_sent.wrapping_add(1);
        }
    }

    /// Checks `buf` against the next bytes of the peer's count.
    ///
    /// # Errors
    /// rstream's message for the first byte that differs, counted over
    /// every byte received.
    fn check(&mut self, buf: &[u8]) -> Result<()> {
        for &b in buf {
            if b != self.next_received {
                return Err(fail(format!(
                    "data verification failed byte {}",
                    self.received
                )));
            }
            self.next_received = self.next_received.wrapping_add(1);
            self.received += 1;
        }
        Ok(())
    }
}

/// One side of the test on `stream`: the client (`client`) sends first.
pub(crate) struct Side<'a, S> {
    pub(crate) stream: &'a mut S,
    pub(crate) client: bool,
    /// `-T v`: fill what is sent, check what is received.
    pub(crate) verify: bool,
    pub(crate) counts: &'a mut Counts,
    /// The transfer buffer, at least as large as the largest transfer.
    pub(crate) buf: &'a mut [u8],
}

impl<S: Read + Write> Side<'_, S> {
    /// Sends `size` bytes of the buffer.
    fn send(&mut self, size: usize) -> Result<()> {
        let buf = &mut self.buf[..size];
        if self.verify {
            self.counts.fill(buf);
        }
        self.stream
            .write_all(buf)
            .map_err(|e| fail(format!("sending {size} bytes: {e}")))
    }

    /// Receives exactly `size` bytes into the buffer.
    fn receive(&mut self, size: usize) -> Result<()> {
        let buf = &mut self.buf[..size];
        self.stream.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => fail(format!(
                "receiving {size} bytes: the peer ended the stream first"
            )),
            _ => fail(format!("receiving {size} bytes: {e}")),
        })?;
        if self.verify {
            self.counts.check(buf)?;
        }
        Ok(())
    }

    /// The starting exchange: the client sends 16 bytes and the server
    /// answers 16.
    fn sync(&mut self) -> Result<()> {
        if self.client {
            self.send(SYNC_BYTES)?;
            self.receive(SYNC_BYTES)
        } else {
            self.receive(SYNC_BYTES)?;
            self.send(SYNC_BYTES)
        }
    }

    /// Runs one test of `shape`; how long its transfers took.
    ///
    /// # Errors
    /// The stream's errors, the peer ending the stream early, and (`-T v`)
    /// a byte that is not the peer's next.
    pub(crate) fn run(&mut self, shape: &Shape) -> Result<Duration> {
        if shape.size > self.buf.len() {
            return Err(fail(format!(
                "a transfer of {} bytes does not fit the {}-byte buffer",
                shape.size,
                self.buf.len()
            )));
        }
        self.sync()?;
        let start = Instant::now();
        for _ in 0..shape.iterations {
            for _ in 0..shape.count {
                if self.client {
                    self.send(shape.size)?;
                } else {
                    self.receive(shape.size)?;
                }
            }
            for _ in 0..shape.count {
                if self.client {
                    self.receive(shape.size)?;
                } else {
                    self.send(shape.size)?;
                }
            }
        }
        Ok(start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A stream whose reads return what a script holds and whose writes
    /// are kept.
    #[derive(Default)]
    struct Script {
        incoming: VecDeque<u8>,
        written: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            // At most 7 bytes at a time: transfers arrive in pieces.
            let n = out.len().min(self.incoming.len()).min(7);
            for b in &mut out[..n] {
                *b = self.incoming.pop_front().expect("counted");
            }
            Ok(n)
        }
    }

    impl Write for Script {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn shape(size: usize, count: u64, iterations: u64) -> Shape {
        Shape {
            name: "custom".into(),
            size,
            count,
            iterations,
        }
    }

    /// The counting bytes of a whole run from one side: the exchange,
    /// then `iterations x count x size`.
    fn counting(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    #[test]
    fn a_verified_run_sends_and_checks_the_counts() {
        let s = shape(100, 3, 2);
        let each_way = SYNC_BYTES + 100 * 3 * 2;
        let mut script = Script {
            incoming: counting(each_way).into(),
            ..Script::default()
        };
        let mut counts = Counts::default();
        let mut buf = vec![0u8; 100];
        let mut side = Side {
            stream: &mut script,
            client: true,
            verify: true,
            counts: &mut counts,
            buf: &mut buf,
        };
        side.run(&s).expect("the peer's bytes are its count");
        assert_eq!(script.written, counting(each_way));
        assert!(script.incoming.is_empty());
    }

    #[test]
    fn a_wrong_byte_fails_where_it_is() {
        let mut bytes = counting(SYNC_BYTES + 64);
        bytes[SYNC_BYTES + 10] ^= 1;
        let mut script = Script {
            incoming: bytes.into(),
            ..Script::default()
        };
        let mut counts = Counts::default();
        let mut buf = vec![0u8; 64];
        let mut side = Side {
            stream: &mut script,
            client: false,
            verify: true,
            counts: &mut counts,
            buf: &mut buf,
        };
        let e = side.run(&shape(64, 1, 1)).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("verification failed byte {}", SYNC_BYTES + 10)),
            "{e}"
        );
    }

    #[test]
    fn an_early_end_and_a_large_transfer_are_errors() {
        let mut script = Script {
            incoming: counting(SYNC_BYTES + 10).into(),
            ..Script::default()
        };
        let mut counts = Counts::default();
        let mut buf = vec![0u8; 64];
        let mut side = Side {
            stream: &mut script,
            client: false,
            verify: false,
            counts: &mut counts,
            buf: &mut buf,
        };
        let e = side.run(&shape(64, 1, 1)).unwrap_err();
        assert!(e.to_string().contains("ended the stream first"), "{e}");
        let e = side.run(&shape(65, 1, 1)).unwrap_err();
        assert!(e.to_string().contains("does not fit"), "{e}");
    }
}
