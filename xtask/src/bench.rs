//! `cargo xtask bench` — will compare the workspace's bandwidth/latency
//! tools with perftest on the same rxe device (through [`crate::rxe`], in
//! the same boot, since only ratios mean something under emulation).

use std::process::ExitCode;

use crate::util::Result;

/// `cargo xtask bench`.
pub(crate) fn main(_args: &[String]) -> Result<ExitCode> {
    eprintln!("bench: not implemented yet");
    Ok(ExitCode::FAILURE)
}
