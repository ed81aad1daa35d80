//! [`Outcome`]: what a run left in its results directory (`status`,
//! `steps.tsv`, `rxe.env`) and what the runner process did.

use std::fs;
use std::path::PathBuf;

use crate::process::capture::Captured;
use crate::process::describe;

/// One line of `steps.tsv`.
#[derive(Debug, Clone)]
pub(crate) struct StepResult {
    /// PASS or FAIL.
    pub(crate) passed: bool,
    /// The step's exit code (124: timed out).
    pub(crate) code: String,
    /// Seconds it took.
    pub(crate) seconds: String,
    /// The label given in the plan.
    pub(crate) label: String,
}

/// What a run produced.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The runner process (vng or bash) as seen from the host.
    pub(crate) captured: Captured,
    /// Overall status written by `ci/vm-run.sh` (0 ok, 1 a step failed,
    /// 2 bring-up failed); `None` if it never wrote one.
    pub(crate) status: Option<i32>,
    /// Per-step results.
    pub(crate) steps: Vec<StepResult>,
    /// `KEY=value` lines of `rxe.env` (device, netdev, GID index, kernel).
    pub(crate) rxe_env: Vec<(String, String)>,
    /// The run's results directory (`$XTASK_OUT` for the steps).
    pub(crate) out: PathBuf,
}

impl Outcome {
    /// Prints one line per step (PASS/FAIL, seconds, label), each after
    /// `indent`.
    pub(crate) fn print_steps(&self, indent: &str) {
        for s in &self.steps {
            let verdict = if s.passed { "PASS" } else { "FAIL" };
            println!("{indent}{verdict} {:>4} s  {}", s.seconds, s.label);
        }
    }

    /// Every step passed and the script reported success.
    pub(crate) fn success(&self) -> bool {
        self.status == Some(0) && self.captured.success()
    }

    /// A value from `rxe.env`.
    pub(crate) fn env(&self, key: &str) -> Option<&str> {
        self.rxe_env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// One line saying why the run failed, if it did.
    pub(crate) fn failure_reason(&self) -> Option<String> {
        if self.success() {
            return None;
        }
        Some(match (self.status, self.captured.status) {
            (_, None) => "the run was killed by the time limit".to_string(),
            (None, Some(s)) => format!(
                "ci/vm-run.sh never reported a status (runner {}): the guest did not boot, panicked, or the script was killed",
                describe(s)
            ),
            (Some(2), _) => "rxe bring-up failed (see the vm-run messages above)".to_string(),
            (Some(0), Some(s)) => format!("the steps passed but the runner failed ({})", describe(s)),
            (Some(_), _) => {
                let failed: Vec<&str> =
                    self.steps.iter().filter(|s| !s.passed).map(|s| s.label.as_str()).collect();
                format!("{} step(s) failed: {}", failed.len(), failed.join(", "))
            }
        })
    }
}

/// Reads the results `ci/vm-run.sh` wrote to `out`, beside what the runner
/// process did.
pub(super) fn read(captured: Captured, out: PathBuf) -> Outcome {
    let status = fs::read_to_string(out.join("status"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let steps = fs::read_to_string(out.join("steps.tsv"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            Some(StepResult {
                passed: f.next()? == "PASS",
                code: f.next()?.to_string(),
                seconds: f.next()?.to_string(),
                label: f.next()?.to_string(),
            })
        })
        .collect();
    let rxe_env = fs::read_to_string(out.join("rxe.env"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    Outcome {
        captured,
        status,
        steps,
        rxe_env,
        out,
    }
}
