//! The marker around every measured loop, for `cargo xtask bench
//! --instructions`: callgrind counts instructions only inside it
//! (`--toggle-collect=*measured_loop*`), so that set-up before a loop and
//! the analysis after it (sorting latency samples, `Bandwidth::from_times`)
//! stay out of the count.
//!
//! One marker per run of a loop, never nested (a nested call would toggle
//! collection off again), and the loop itself is the caller's closure: its
//! name (`<caller>::{{closure}}`) does not match the pattern, so code the
//! closure calls is counted once, inside the marker.

/// Runs `f`, the measured loop of a test, in a frame callgrind can find by
/// name. `#[inline(never)]` keeps the frame under fat LTO; inlining `f`
/// into it changes nothing that is counted.
#[inline(never)]
pub(crate) fn measured_loop<T>(f: impl FnOnce() -> T) -> T {
    f()
}
