//! [`RunOptions`]: the options every task that uses the runner accepts
//! (`--vm`, `--native`, `--timeout`, `--step-timeout`).

use std::time::Duration;

use crate::Result;

/// How long a whole VM or native run may take before it is killed.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// Per-step limit inside the run (enforced by `ci/vm-run.sh` with `timeout`).
const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Which route the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Native if possible, else the VM.
    Auto,
    /// Native or fail.
    Native,
    /// VM even if native would work.
    Vm,
}

/// Options common to every task that uses the runner.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    /// Requested route.
    pub(crate) want: Want,
    /// Limit for the whole run.
    pub(crate) timeout: Duration,
    /// Limit for each step.
    pub(crate) step_timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            want: Want::Auto,
            timeout: DEFAULT_TIMEOUT,
            step_timeout: DEFAULT_STEP_TIMEOUT,
        }
    }
}

impl RunOptions {
    /// Consumes a runner option at `args[*i]` (and its value); returns
    /// `Ok(false)` if `args[*i]` is not one of ours.
    pub(crate) fn parse_arg(&mut self, args: &[String], i: &mut usize) -> Result<bool> {
        let secs = |v: Option<&String>, name: &str| -> Result<Duration> {
            v.and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
                .ok_or_else(|| format!("{name} needs a number of seconds").into())
        };
        match args[*i].as_str() {
            "--vm" => self.want = Want::Vm,
            "--native" => self.want = Want::Native,
            "--timeout" => {
                self.timeout = secs(args.get(*i + 1), "--timeout")?;
                *i += 1;
            }
            "--step-timeout" => {
                self.step_timeout = secs(args.get(*i + 1), "--step-timeout")?;
                *i += 1;
            }
            _ => return Ok(false),
        }
        *i += 1;
        Ok(true)
    }

    /// Help text for the options [`RunOptions::parse_arg`] understands.
    pub(crate) const HELP: &'static str =
        "  --vm                  use the qemu VM even if the host kernel has rdma_rxe
  --native              use the host's rdma_rxe or fail (needs root)
  --timeout SECS        kill the whole run after SECS (default 1200)
  --step-timeout SECS   kill one step after SECS (default 600)
environment: XTASK_KVM=0|1 skips the KVM probe; XTASK_VM_KERNEL=/boot/vmlinuz-X
picks the guest kernel.";
}
