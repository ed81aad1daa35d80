//! [`RunOptions`]: the options every task that uses the runner accepts
//! (`--vm`, `--native`, `--timeout`, `--step-timeout`), parsed by
//! [`RunArgs`], which each task's clap parser flattens.

use std::time::Duration;

/// How long a whole VM or native run may take before it is killed, in
/// seconds: a guard against hangs, not a speed bound. test-rxe's one-host
/// run takes about 11 minutes on an idle 2-core machine; with another VM
/// running beside it, it went past the former 20 (killed at 1200 s with 464
/// tests passed and 5 binaries not run), and a loaded CI machine takes up
/// to 3x. A task may set its own (`mut_arg("timeout", ..)`, as bench does).
const DEFAULT_TIMEOUT: &str = "3600";

/// Per-step limit inside the run in seconds (enforced by `ci/vm-run.sh`
/// with `timeout`).
const DEFAULT_STEP_TIMEOUT: &str = "600";

/// The end of every runner task's help: the environment it reads.
pub(crate) const ENV_HELP: &str = "\
environment: XTASK_KVM=0|1 skips the KVM probe; XTASK_VM_KERNEL=/boot/vmlinuz-X
picks the guest kernel.";

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

/// The runner's options on a task's command line (`#[command(flatten)]`);
/// [`RunArgs::options`] reads them with the task's default route.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct RunArgs {
    /// use the qemu VM even if the host kernel has rdma_rxe
    #[arg(long, overrides_with = "native")]
    vm: bool,
    /// use the host's rdma_rxe or fail (needs root)
    #[arg(long, overrides_with = "vm")]
    native: bool,
    /// kill the whole run after SECS
    #[arg(long, allow_hyphen_values = true, value_name = "SECS",
          value_parser = seconds, default_value = DEFAULT_TIMEOUT)]
    timeout: Duration,
    /// kill one step after SECS
    #[arg(long, allow_hyphen_values = true, value_name = "SECS",
          value_parser = seconds, default_value = DEFAULT_STEP_TIMEOUT)]
    step_timeout: Duration,
}

impl RunArgs {
    /// The options, the route being the last of `--vm` / `--native` or
    /// else `default`.
    pub(crate) fn options(&self, default: Want) -> RunOptions {
        let want = if self.native {
            Want::Native
        } else if self.vm {
            Want::Vm
        } else {
            default
        };
        RunOptions {
            want,
            timeout: self.timeout,
            step_timeout: self.step_timeout,
        }
    }
}

/// `--timeout` / `--step-timeout`: a whole number of seconds.
fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| "needs a number of seconds".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A task with only the runner's options.
    #[derive(Debug, Parser)]
    #[command(args_override_self = true)]
    struct Task {
        #[command(flatten)]
        run: RunArgs,
    }

    fn options(args: &[&str]) -> Result<RunOptions, clap::Error> {
        let task = Task::try_parse_from(std::iter::once("task").chain(args.iter().copied()))?;
        Ok(task.run.options(Want::Auto))
    }

    #[test]
    fn defaults_and_values() {
        let o = options(&[]).unwrap();
        assert_eq!(
            (o.want, o.timeout.as_secs(), o.step_timeout.as_secs()),
            (Want::Auto, 3600, 600)
        );
        let o = options(&["--timeout", "60", "--step-timeout", "7", "--vm"]).unwrap();
        assert_eq!(o.want, Want::Vm);
        assert_eq!((o.timeout.as_secs(), o.step_timeout.as_secs()), (60, 7));
    }

    #[test]
    fn the_last_one_wins_as_before() {
        assert_eq!(options(&["--vm", "--native"]).unwrap().want, Want::Native);
        assert_eq!(options(&["--native", "--vm"]).unwrap().want, Want::Vm);
        let o = options(&["--timeout", "1", "--timeout", "2"]).unwrap();
        assert_eq!(o.timeout.as_secs(), 2);
    }

    #[test]
    fn timeouts_need_a_number_of_seconds() {
        for bad in [
            &["--timeout"][..],
            &["--timeout", "ten"],
            &["--timeout", "-1"],
            &["--step-timeout", "1.5"],
            &["--timeout", "--vm"],
        ] {
            let e = options(bad).unwrap_err().to_string();
            assert!(e.contains(bad[0]), "{e}");
        }
        let e = options(&["--timeout", "ten"]).unwrap_err().to_string();
        assert!(e.contains("needs a number of seconds"), "{e}");
    }

    #[test]
    fn the_task_keeps_its_own_route() {
        let task = Task::try_parse_from(["task", "--step-timeout", "5"]).unwrap();
        let o = task.run.options(Want::Vm);
        assert_eq!((o.want, o.step_timeout.as_secs()), (Want::Vm, 5));
        let task = Task::try_parse_from(["task", "--native"]).unwrap();
        assert_eq!(task.run.options(Want::Vm).want, Want::Native);
    }
}
