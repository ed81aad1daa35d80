//! The runner shared by `test-rxe`, `demo`, `bench` and `vm`: "run these
//! steps on a soft-RoCE device", natively when the host kernel has
//! `rdma_rxe` and we are root, otherwise inside a qemu VM booted with vng.
//!
//! The steps are a [`Plan`]: a bash fragment calling the step functions of
//! `ci/vm-run.sh` (`step`, `sh_step`, `test_binary`, `server_client`, `say`).
//! xtask writes it to `target/xtask/<task>/<pid>/plan.sh`; `ci/vm-run.sh`
//! brings up `rxe0`, sources the plan and writes its results to
//! `target/xtask/<task>/<pid>/out/` (`steps.tsv`, `rxe.env`, `status`);
//! everything printed is also kept in `target/xtask/<task>/<pid>/output.log`,
//! and `target/xtask/<task>/last` points at the newest run.
//!
//! Adding work to a task means adding steps to its plan, e.g.
//! `plan.server_client("rc_pingpong", 18515, server_cmd, client_cmd)`; the
//! commands are bash and see `$RXE_DEVICE`, `$RXE_GID_INDEX`, `$RXE_IPV4`.
//!
//! Two hosts: [`two_hosts`] runs a plan per host in two VMs joined by a
//! [`link`]; a plan's `pair_step` runs a server on one host and its client
//! on the other (`ci/two-hosts.sh`).
//!
//! Where things are: [`plan`] builds the steps, [`options`] parses the
//! runner's command-line options, [`route`] picks the [`native`] or the
//! [`vm`] path (asking [`kvm_probe`] whether qemu may use KVM), [`run`]
//! below runs the plan, and [`outcome`] reads back what it left.

mod kvm_probe;
mod link;
mod native;
mod options;
mod outcome;
mod plan;
mod route;
mod two_hosts;
mod vm;

use std::fs;
use std::path::Path;

pub(crate) use link::{host_ipv4, host_name};
pub(crate) use options::{RunArgs, RunOptions, Want, ENV_HELP};
pub(crate) use outcome::Outcome;
pub(crate) use plan::{Plan, Side};
pub(crate) use route::{choose_route, choose_two_hosts, Route};
pub(crate) use two_hosts::{run as run_two_hosts, TwoHosts};

use crate::process::capture;
use crate::workspace::Workspace;
use crate::Result;

/// The rxe device every task uses.
pub(crate) const DEVICE: &str = "rxe0";

/// Removes `<task_dir>/<pid>` directories of processes that no longer run,
/// keeping the one `<task_dir>/last` points at.
fn prune_run_dirs(task_dir: &Path) {
    let keep = fs::read_link(task_dir.join("last")).ok();
    let Ok(entries) = fs::read_dir(task_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid).exists();
        if !alive && keep.as_deref() != Some(Path::new(pid)) {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// Creates `target/xtask/<task>/<pid>/` for this run and points
/// `target/xtask/<task>/last` at it.
fn run_dir(ws: &Workspace, task: &str) -> Result<std::path::PathBuf> {
    // One directory per run (task and process id): several runs at once, e.g.
    // from parallel terminals, must not clobber each other's plan or results.
    // `target/xtask/<task>/last` points at the newest; directories of
    // processes that are gone are removed, except the one `last` names.
    let task_dir = ws.xtask_dir(task)?;
    prune_run_dirs(&task_dir);
    let pid = std::process::id().to_string();
    let dir = ws.xtask_dir(&format!("{task}/{pid}"))?;
    let last = task_dir.join("last");
    let _ = fs::remove_file(&last);
    let _ = std::os::unix::fs::symlink(&pid, &last);
    Ok(dir)
}

/// Writes `plan` for `task`, runs it on an rxe device by `route`, reads the
/// results back. Output streams live to our stdout and is also captured.
pub(crate) fn run(
    ws: &Workspace,
    task: &str,
    route: &Route,
    plan: &Plan,
    opts: &RunOptions,
) -> Result<Outcome> {
    let dir = run_dir(ws, task)?;
    let out = dir.join("out");
    // Fresh results directory: a stale `status` must never pass for this run.
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let plan_path = dir.join("plan.sh");
    fs::write(&plan_path, plan.text())
        .map_err(|e| format!("cannot write {}: {e}", plan_path.display()))?;
    let script = ws.root.join("ci").join("vm-run.sh");
    if !script.is_file() {
        return Err(format!("{} is missing", script.display()).into());
    }

    let script_args: Vec<String> = vec![
        "--plan".into(),
        plan_path.to_string_lossy().into_owned(),
        "--out".into(),
        out.to_string_lossy().into_owned(),
        "--device".into(),
        DEVICE.into(),
        "--step-timeout".into(),
        opts.step_timeout.as_secs().to_string(),
    ];
    let mut cmd = match route {
        Route::Native => native::command(ws, &script, &script_args),
        Route::Vm { kernel, kvm, .. } => vm::command(
            ws,
            kernel,
            *kvm,
            &script,
            &script_args,
            &out,
            &vm::Shape::one_host(),
        ),
    };
    println!(
        "{task}: running {} step(s); results in {}",
        plan.step_count(),
        out.display()
    );
    let captured = capture::run(&mut cmd, Some(opts.timeout))?;
    if let (Route::Vm { .. }, Some(t)) = (route, captured.first_output) {
        println!(
            "{task}: the guest started the script {:.0} s after vng was launched",
            t.as_secs_f64()
        );
    }
    let log = dir.join("output.log");
    let _ = fs::write(&log, &captured.output);
    println!(
        "{task}: runner finished in {:.0} s (full output in {})",
        captured.elapsed.as_secs_f64(),
        log.display()
    );

    Ok(outcome::read(captured, out))
}
