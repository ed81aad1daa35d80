//! [`Limit`]: the range a number may take, shared by the command line and
//! the wire decoders, so that a peer can ask for nothing a user could not.

use std::fmt;

/// An inclusive range of accepted values, named after the option that sets
/// it (`-s/--size`), so that errors say which limit was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The option (or message field) the number belongs to.
    pub name: &'static str,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
}

/// A number outside its [`Limit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfRange {
    /// The limit.
    pub limit: Limit,
    /// The value, as given (it may not fit any integer type).
    pub value: String,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} is out of range ({}..={})",
            self.limit.name, self.value, self.limit.min, self.limit.max
        )
    }
}

impl std::error::Error for OutOfRange {}

impl Limit {
    /// The range `min..=max` for `name`.
    pub const fn new(name: &'static str, min: u64, max: u64) -> Self {
        Limit { name, min, max }
    }

    /// `v`, if it lies in the range.
    ///
    /// # Errors
    /// [`OutOfRange`] naming the limit.
    pub fn check(self, v: u64) -> Result<u64, OutOfRange> {
        if (self.min..=self.max).contains(&v) {
            Ok(v)
        } else {
            Err(self.out_of_range(v))
        }
    }

    /// Like [`check`](Self::check), for a count or size held in `usize`.
    ///
    /// # Errors
    /// [`OutOfRange`] naming the limit.
    pub fn check_usize(self, v: usize) -> Result<usize, OutOfRange> {
        match u64::try_from(v) {
            Ok(n) => self.check(n).map(|_| v),
            Err(_) => Err(self.out_of_range(v)),
        }
    }

    /// Parses `text` with [`crate::cli::parse_uint`] and checks the range.
    ///
    /// # Errors
    /// Not a number, or out of range.
    pub fn parse(self, text: &str) -> Result<u64, String> {
        let v = crate::cli::parse_uint(text)
            .ok_or_else(|| format!("{}: not a number: `{}`", self.name, text.escape_debug()))?;
        self.check(v).map_err(|e| e.to_string())
    }

    /// [`parse`](Self::parse) as a `usize` (every limit here fits one).
    ///
    /// # Errors
    /// Not a number, or out of range.
    pub fn parse_usize(self, text: &str) -> Result<usize, String> {
        let v = self.parse(text)?;
        usize::try_from(v).map_err(|_| self.out_of_range(v).to_string())
    }

    fn out_of_range(self, v: impl fmt::Display) -> OutOfRange {
        OutOfRange {
            limit: self,
            value: v.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_messages() {
        let l = Limit::new("-s/--size", 1, 8);
        assert_eq!(l.check(1), Ok(1));
        assert_eq!(l.check(8), Ok(8));
        assert_eq!(
            l.check(9).unwrap_err().to_string(),
            "-s/--size: 9 is out of range (1..=8)"
        );
        assert!(l.check(0).is_err());
        assert_eq!(l.check_usize(usize::MAX).unwrap_err().limit, l);
        assert_eq!(l.parse("0x8"), Ok(8));
        assert!(l.parse("9").unwrap_err().contains("out of range"));
        assert!(l.parse("ten").unwrap_err().contains("not a number"));
        assert!(l.parse("99999999999999999999999").is_err());
    }
}
