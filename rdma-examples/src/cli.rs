//! Command-line glue for the programs' `clap` parsers: perftest-style
//! numbers (`64K`, `0x10`) checked against a [`Limit`], the channel
//! timeout option, and the exit status convention.

use crate::limit::Limit;
use std::process::ExitCode;
use std::time::Duration;

/// Parses an unsigned number: decimal, `0x` hexadecimal, or decimal with
/// a binary suffix `K`, `M` or `G` (`64K` = 65536).
pub fn parse_uint(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// A `clap` value parser for a number within `limit`, converted to `T`
/// (every limit used with it fits `T`).
pub fn number<T>(limit: Limit) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64>,
{
    move |text| {
        let v = limit.parse(text)?;
        T::try_from(v).map_err(|_| format!("{}: {v} does not fit", limit.name))
    }
}

/// Seconds of the `--timeout` option.
pub const TIMEOUT_SECS: Limit = Limit::new("--timeout", 1, 3600);

/// A `clap` value parser for `--timeout <seconds>`.
pub fn timeout(text: &str) -> Result<Duration, String> {
    TIMEOUT_SECS.parse(text).map(Duration::from_secs)
}

/// The help line of `--timeout`.
pub const TIMEOUT_HELP: &str = "bound on every wait, for a completion or for the peer's next \
     message over TCP, in seconds (default 30)";

/// Ends `program`: success, or its error on stderr and exit status 1.
pub fn finish(program: &str, result: crate::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_with_suffixes() {
        assert_eq!(parse_uint("8M"), Some(8 << 20));
        assert_eq!(parse_uint("64k"), Some(65536));
        assert_eq!(parse_uint("0x10"), Some(16));
        assert_eq!(parse_uint(""), None);
        assert_eq!(parse_uint("K"), None);
        assert_eq!(parse_uint("-1"), None);
        assert_eq!(parse_uint("99999999999G"), None, "overflow");
        let port = number::<u8>(Limit::new("-i/--ib-port", 1, 255));
        assert_eq!(port("255"), Ok(255));
        assert_eq!(
            port("256").unwrap_err(),
            "-i/--ib-port: 256 is out of range (1..=255)"
        );
        assert_eq!(timeout("2"), Ok(Duration::from_secs(2)));
        assert!(timeout("0").is_err());
    }
}
