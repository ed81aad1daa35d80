//! The counts of libtest's summary lines, summed over every binary and
//! doctest run of a test-rxe run.

/// Sums of the `test result: ok. 3 passed; 0 failed; 1 ignored; ...` lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) suites: u32,
    pub(super) passed: u32,
    pub(super) failed: u32,
    pub(super) ignored: u32,
}

impl Totals {
    pub(super) fn add_output(&mut self, output: &str) {
        for line in output.lines() {
            let Some(rest) = line.split("test result: ").nth(1) else {
                continue;
            };
            self.suites += 1;
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.trim_end_matches('.').parse::<u32>() else {
                    continue;
                };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_from_libtest_lines() {
        let mut t = Totals::default();
        t.add_output(
            "running 3 tests\n\
             test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
             [client] noise\n\
             test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 5 filtered out; finished in 1.00s\n",
        );
        assert_eq!(
            t,
            Totals {
                suites: 2,
                passed: 4,
                failed: 2,
                ignored: 1
            }
        );
    }
}
