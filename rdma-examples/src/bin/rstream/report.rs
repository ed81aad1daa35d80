//! What rstream prints, in its layout: the header line, one result line
//! per test (name, transfer size, transfers, iterations, total bytes,
//! seconds, Gb/sec, usec per transfer), and its size and count
//! abbreviations (`4k`, `1.5m`; `10k`, `2m`), so that a reader of
//! rstream's output (the bench) reads ours alike.

use std::time::Duration;

/// rstream's header line.
pub(crate) fn header() -> String {
    format!(
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:>8} {:>10}{:>13}",
        "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer"
    )
}

/// A size as rstream abbreviates it: the largest of g/m/k (binary) it
/// reaches, with one decimal below 10 units when it is not whole (`64`,
/// `1.5k`, `64k`, `1m`).
pub(crate) fn size_text(size: u64) -> String {
    let (base, mag) = if size >= 1 << 30 {
        (1 << 30, "g")
    } else if size >= 1 << 20 {
        (1 << 20, "m")
    } else if size >= 1 << 10 {
        (1 << 10, "k")
    } else {
        (1, "")
    };
    let fraction = if size / base < 10 {
        (size % base) * 10 / base
    } else {
        0
    };
    if fraction > 0 {
        format!("{}.{fraction}{mag}", size / base)
    } else {
        format!("{}{mag}", size / base)
    }
}

/// A count as rstream abbreviates it: decimal thousands, millions,
/// billions, truncated (`1000` is `1k`, `1500` too).
pub(crate) fn count_text(count: u64) -> String {
    match count {
        c if c >= 1_000_000_000 => format!("{}b", c / 1_000_000_000),
        c if c >= 1_000_000 => format!("{}m", c / 1_000_000),
        c if c >= 1000 => format!("{}k", c / 1000),
        c => c.to_string(),
    }
}

/// One test's shape: `iterations` times, `count` transfers of `size`
/// bytes from the client, then as many back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    /// rstream's test name: `custom`, or `64_lat`, `4k_bw`, ...
    pub(crate) name: String,
    pub(crate) size: usize,
    pub(crate) count: u64,
    pub(crate) iterations: u64,
}

impl Shape {
    /// The bytes a run moves, both directions together.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.iterations * self.count * self.size as u64 * 2
    }

    /// The result line of a run of this shape that took `took`: the
    /// throughput counts both directions, and the time per transfer is
    /// the run's time over every transfer either way (for a ping-pong of
    /// one transfer, half a round trip).
    pub(crate) fn result_line(&self, took: Duration) -> String {
        let usec = took.as_secs_f64() * 1e6;
        let bytes = self.total_bytes();
        // A run that took no time divides by zero: the result is `inf`,
        // as rstream prints it.
        let gbps = (bytes as f64 * 8.0) / (1000.0 * usec);
        let per_xfer = usec / self.iterations as f64 / (self.count * 2) as f64;
        format!(
            "{:<10}{:<8}{:<8}{:<8}{:<8}{:>8.2}s{:>10.2}{:>11.2}",
            self.name,
            size_text(self.size as u64),
            count_text(self.count),
            count_text(self.iterations),
            size_text(bytes),
            usec / 1e6,
            gbps,
            per_xfer
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_as_rstream_writes_them() {
        assert_eq!(size_text(64), "64");
        assert_eq!(size_text(1536), "1.5k");
        assert_eq!(size_text(4096), "4k");
        assert_eq!(size_text(12 << 10), "12k");
        assert_eq!(size_text(1 << 20), "1m");
        assert_eq!(size_text(3 << 19), "1.5m");
        assert_eq!(size_text(5 << 30), "5g");
        assert_eq!(size_text(1000), "1000");
        assert_eq!(count_text(999), "999");
        assert_eq!(count_text(1500), "1k");
        assert_eq!(count_text(20000), "20k");
        assert_eq!(count_text(3_000_000), "3m");
        assert_eq!(count_text(2_000_000_000), "2b");
    }

    #[test]
    fn lines_in_rstream_columns() {
        // rstream 44's header, byte for byte.
        assert_eq!(
            header(),
            "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer"
        );
        let shape = Shape {
            name: "custom".into(),
            size: 64,
            count: 1,
            iterations: 5000,
        };
        // The expected line: 5000 iterations of one 64-byte transfer each
        // way is 640000 bytes, over 10000 transfers.
        let line = shape.result_line(Duration::from_millis(250));
        assert_eq!(
            line,
            "custom    64      1       5k      625k        0.25s      0.02      25.00"
        );
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 8);
    }
}
