//! What failed, digested for the end of test-rxe's summary: a CI report
//! keeps only the last lines of a run, and a test's own panic message is
//! hundreds of lines above them (the device tier's table and the two-host
//! tier come after it).

/// At most this many characters of one failure's digest.
const DIGEST_CHARS: usize = 300;

/// Lines of a failed test's captured output kept, from its panic on.
const PANIC_LINES: usize = 3;

/// Each failed libtest test in `output`: its name and the start of its
/// panic (`NAME: thread '..' panicked at FILE:LINE: / MESSAGE`), from the
/// `---- NAME stdout ----` blocks libtest prints at the end of a binary's
/// run; a test listed `... FAILED` without such a block (its binary was
/// killed, or printed nothing) by name alone.
pub(crate) fn libtest(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output.lines().map(str::trim_end).collect();
    let mut out: Vec<String> = Vec::new();
    let mut named: Vec<&str> = Vec::new();
    let mut k = 0;
    while k < lines.len() {
        let Some(name) = block_name(lines[k]) else {
            k += 1;
            continue;
        };
        let start = k + 1;
        let mut end = start;
        while end < lines.len() && !ends_block(lines[end]) {
            end += 1;
        }
        let body: Vec<&str> = lines[start..end]
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        let from = body
            .iter()
            .position(|l| l.contains("panicked at"))
            .unwrap_or(0);
        let kept: Vec<&str> = body.iter().skip(from).take(PANIC_LINES).copied().collect();
        out.push(cut(&format!("{name}: {}", kept.join(" / "))));
        named.push(name);
        k = end;
    }
    for l in &lines {
        if let Some(name) = l
            .trim()
            .strip_prefix("test ")
            .and_then(|r| r.strip_suffix(" ... FAILED"))
        {
            if !named.contains(&name) {
                named.push(name);
                out.push(format!("{name}: FAILED (no output captured)"));
            }
        }
    }
    out
}

/// `NAME` of a `---- NAME stdout ----` line.
fn block_name(line: &str) -> Option<&str> {
    let at = line.find("---- ")?;
    line[at + 5..].strip_suffix(" stdout ----")
}

/// Whether `line` ends a failed test's block: the next block, or the list
/// of failures and the result that close libtest's report.
fn ends_block(line: &str) -> bool {
    let t = line.trim();
    block_name(line).is_some() || t == "failures:" || t.starts_with("test result: ")
}

/// `s`, at most [`DIGEST_CHARS`] characters (cut on a character boundary).
fn cut(s: &str) -> String {
    match s.char_indices().nth(DIGEST_CHARS) {
        Some((at, _)) => format!("{} ...", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
running 3 tests
test a_good_one ... ok
test sends_and_checks ... FAILED
test killed_one ... FAILED

failures:

---- sends_and_checks stdout ----
device rxe0, port 1
thread 'sends_and_checks' panicked at rdma-safe/tests/peers.rs:120:9:
assertion `left == right` failed: byte 17
  left: 3
 right: 4
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    sends_and_checks
    killed_one

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s
";

    #[test]
    fn a_failed_test_is_named_with_its_panic_and_one_without_output_by_name() {
        let got = libtest(RUN);
        assert_eq!(
            got,
            [
                "sends_and_checks: thread 'sends_and_checks' panicked at \
                 rdma-safe/tests/peers.rs:120:9: / assertion `left == right` failed: byte 17 \
                 / left: 3",
                "killed_one: FAILED (no output captured)",
            ]
        );
    }

    #[test]
    fn a_passing_run_has_no_failures_and_a_long_digest_is_cut() {
        assert!(libtest("test x ... ok\ntest result: ok. 1 passed; 0 failed\n").is_empty());
        let long = format!("---- t stdout ----\n{}\n\nfailures:\n", "x".repeat(1000));
        let got = libtest(&long);
        assert_eq!(got.len(), 1);
        assert!(got[0].ends_with(" ..."), "{}", got[0]);
        assert_eq!(got[0].chars().count(), DIGEST_CHARS + 4);
    }
}
