//! Fuzzing the wire decoders in unit tests, with proptest: inputs derived
//! from valid messages (truncations, every number replaced by an extreme
//! value, a few bytes changed, inserted or removed) and plain garbage, and
//! the bytes a decoder holds at its peak (allocation-counter, which counts
//! the calling thread's allocations only), to show that no input makes a
//! decoder panic or allocate beyond its limit.
//!
//! Test code only: the library's unit tests declare it as a module, and so
//! do the programs' (`#[path]`), since proptest and allocation-counter are
//! dev-dependencies (allocation-counter replaces the global allocator of
//! whatever links it, so no program may).

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::fmt::Debug;

/// Numbers (as text) at and beyond the edges of every integer type, and
/// things that look almost like numbers.
const EXTREMES: &[&str] = &[
    "0",
    "1",
    "-1",
    "255",
    "256",
    "65535",
    "65536",
    "16777215",
    "16777216",
    "2147483647",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "0x0",
    "0xffffffffffffffff",
    "ffffffff",
    "1K",
    "1G",
    "1024G",
    "+1",
    " 1",
    "",
    "1.5",
    "1e9",
    "NaN",
];

/// Bytes an edit inserts half of the time: those the text protocols are
/// made of.
const PROTOCOL_BYTES: &[u8] = b"0123456789abcdef:,= \n\0";

/// One change to a message: replace, remove or insert a byte.
#[derive(Debug, Clone)]
enum Edit {
    Replace(Index, u8),
    Remove(Index),
    Insert(Index, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop_oneof![any::<u8>(), select(PROTOCOL_BYTES)];
    prop_oneof![
        (any::<Index>(), byte.clone()).prop_map(|(at, b)| Edit::Replace(at, b)),
        any::<Index>().prop_map(Edit::Remove),
        (any::<Index>(), byte).prop_map(|(at, b)| Edit::Insert(at, b)),
    ]
}

fn apply(mut m: Vec<u8>, edits: Vec<Edit>) -> Vec<u8> {
    for e in edits {
        match e {
            Edit::Replace(at, b) if !m.is_empty() => {
                let i = at.index(m.len());
                m[i] = b;
            }
            Edit::Remove(at) if !m.is_empty() => {
                m.remove(at.index(m.len()));
            }
            Edit::Replace(at, b) | Edit::Insert(at, b) => m.insert(at.index(m.len() + 1), b),
            Edit::Remove(_) => {}
        }
    }
    m
}

/// Inputs derived from the `valid` messages (at least one): each as is or
/// truncated; one run of ASCII alphanumerics replaced by one of
/// [`EXTREMES`]; up to four edits; or up to 200 random bytes.
pub(crate) fn inputs(valid: &[&[u8]]) -> impl Strategy<Value = Vec<u8>> {
    assert!(
        !valid.is_empty(),
        "fuzzing needs a valid message to start from"
    );
    let valid: Vec<Vec<u8>> = valid.iter().map(|v| v.to_vec()).collect();
    let truncated = select(valid.clone())
        .prop_flat_map(|v| {
            let n = v.len();
            (Just(v), 0..=n)
        })
        .prop_map(|(v, n)| v[..n].to_vec());
    let extreme =
        (select(valid.clone()), any::<Index>(), select(EXTREMES)).prop_map(|(v, run, x)| {
            let runs = runs(&v);
            if runs.is_empty() {
                return v;
            }
            let (start, end) = runs[run.index(runs.len())];
            let mut m = v[..start].to_vec();
            m.extend_from_slice(x.as_bytes());
            m.extend_from_slice(&v[end..]);
            m
        });
    let edited = (select(valid), prop::collection::vec(edit(), 1..=4))
        .prop_map(|(v, edits)| apply(v, edits));
    prop_oneof![
        1 => truncated,
        2 => extreme,
        4 => edited,
        1 => prop::collection::vec(any::<u8>(), 0..200),
    ]
}

/// The ranges of ASCII alphanumeric runs in `v`.
fn runs(v: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, b) in v.iter().chain(std::iter::once(&b' ')).enumerate() {
        match (b.is_ascii_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Runs `property` on `cases` inputs from `strategy`; a panic inside it, or
/// an error it returns, fails the test with the (shrunk) input.
pub(crate) fn check<S>(
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let mut runner = TestRunner::new(Config {
        cases,
        // Failures are reported with their input; no file is written
        // beside the sources.
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(e) = runner.run(&strategy, property) {
        panic!("{e}");
    }
}

/// Runs `f` and returns its result with the most bytes this thread held
/// allocated at once meanwhile (what `f` allocated and had not freed yet).
pub(crate) fn peak_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let mut out = None;
    let info = allocation_counter::measure(|| out = Some(f()));
    let out = out.expect("measure runs the closure");
    (out, usize::try_from(info.bytes_max).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn inputs_vary_around_the_valid_message() {
        let (long, short, other) = (Cell::new(false), Cell::new(false), Cell::new(false));
        check(2000, inputs(&[b"GO 64"]), |m| {
            long.set(long.get() || m == b"GO 18446744073709551616");
            short.set(short.get() || m == b"G");
            other.set(other.get() || !m.starts_with(b"G"));
            Ok(())
        });
        assert!(long.get() && short.get() && other.get());
        assert_eq!(runs(b"GO 64"), [(0, 2), (3, 5)]);
    }

    #[test]
    fn the_peak_is_measured() {
        let (v, peak) = peak_bytes(|| vec![0u8; 12345]);
        assert!(peak >= 12345, "{peak}");
        drop(v);
        let ((), peak) = peak_bytes(|| ());
        assert_eq!(peak, 0);
    }
}
