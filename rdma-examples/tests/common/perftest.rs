//! What the tests against perftest share: the device's IPv4 address for
//! rdma_cm, and reading a bandwidth or latency result row.

use super::Finished;

/// The rxe device's IPv4 address (`RXE_IPV4`; default 10.0.2.15, the VM's:
/// rdma_cm needs the device's address, not 127.0.0.1).
pub(crate) fn ip() -> String {
    std::env::var("RXE_IPV4")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "10.0.2.15".into())
}

/// The numbers of the result row for `size`: the line starting with it.
pub(crate) fn row(output: &str, size: usize) -> Vec<f64> {
    output
        .lines()
        .map(str::split_whitespace)
        .find_map(|mut w| {
            (w.next() == Some(&size.to_string()))
                .then(|| w.filter_map(|x| x.parse().ok()).collect())
        })
        .unwrap_or_default()
}

/// Asserts that `side` printed a result row for `size` with sane numbers
/// (finite, not negative, a positive bandwidth or latency).
#[track_caller]
pub(crate) fn assert_sane_row(side: &Finished, size: usize) {
    let numbers = row(&side.output, size);
    if side.label.contains("(`ib_")
        && numbers.len() >= 3
        && numbers[1..].iter().any(|x| x.is_infinite())
    {
        // perftest's own clock calibration fails under load (a busy 2-core
        // machine running TCG guests) and it prints `inf` (REFERENCE.md
        // §4): the C program is judged by its exit status, ours by data.
        eprintln!(
            "{}: perftest printed inf (its clock calibration failed); judged by exit status",
            side.label
        );
        return;
    }
    assert!(
        numbers.len() >= 3
            && numbers[1..].iter().all(|x| x.is_finite() && *x >= 0.0)
            && numbers[1..3].iter().any(|x| *x > 0.0),
        "{} printed no sane result row for {size} bytes:\n{}",
        side.label,
        side.output
    );
}

/// Whether perftest gave up on its clock calibration in this run ("Can't
/// produce a report"): the run says nothing about either program.
pub(crate) fn calibration_failed(runs: &[&Finished]) -> bool {
    runs.iter()
        .any(|f| f.label.contains("(`ib_") && f.output.contains("Can't produce a report"))
}
