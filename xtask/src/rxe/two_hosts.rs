//! Two hosts: two qemu guests, each with its own kernel and rxe0, joined
//! by a [`Link`], each running `ci/vm-run.sh` on its own [`Plan`].
//!
//! Layout of a run, `target/xtask/<task>/<pid>/` (the guests' only
//! writable directory, shared by both):
//!
//! ```text
//! a/plan.sh a/out/   host A (192.168.77.1): plan and results, as one host's
//! b/plan.sh b/out/   host B (192.168.77.2)
//! sync/              the hosts' rendezvous files (see ci/two-hosts.sh);
//!                    xtask writes sync/gone.<i> when host i's VM has ended,
//!                    so its peer stops waiting for it
//! a.log b.log        everything each VM printed
//! ```
//!
//! Both VMs run at once, their output copied to ours with `[A] `/`[B] `
//! in front of each line; each is killed at the run's time limit, and a
//! guest waiting for a peer that is gone gives up at once.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::link::{self, Link, HOSTS};
use super::outcome::{self, Outcome};
use super::vm::{self, Shape};
use super::{run_dir, Plan, Route, RunOptions, DEVICE};
use crate::process::capture;
use crate::workspace::Workspace;
use crate::Result;

/// Guest memory of each host's VM.
const MEMORY: &str = "1G";

/// How long a host waits for its peer at a rendezvous that is not a step
/// (rxe up on both). Covers the other VM booting later under load.
const PEER_TIMEOUT: Duration = Duration::from_secs(300);

/// What a two-host run produced.
#[derive(Debug)]
pub(crate) struct TwoHosts {
    /// Host A's and host B's outcomes.
    pub(crate) hosts: Vec<Outcome>,
    /// Wall time from launching the VMs to both having ended.
    pub(crate) elapsed: Duration,
}

impl TwoHosts {
    /// Both hosts ran every step of their plans and passed.
    pub(crate) fn success(&self) -> bool {
        self.hosts.iter().all(Outcome::success)
    }

    /// One line saying why the run failed, if it did, naming the host.
    pub(crate) fn failure_reason(&self) -> Option<String> {
        let why: Vec<String> = self
            .hosts
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                o.failure_reason()
                    .map(|w| format!("host {}: {w}", link::host_name(i)))
            })
            .collect();
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// The `ci/vm-run.sh` arguments for host `index`.
fn script_args(dir: &Path, index: usize, opts: &RunOptions) -> Vec<String> {
    let host = dir.join(host_dir(index));
    let path = |p: PathBuf| p.to_string_lossy().into_owned();
    vec![
        "--plan".into(),
        path(host.join("plan.sh")),
        "--out".into(),
        path(host.join("out")),
        "--device".into(),
        DEVICE.into(),
        "--step-timeout".into(),
        opts.step_timeout.as_secs().to_string(),
        "--link-ipv4".into(),
        format!("{}/{}", link::host_ipv4(index), link::PREFIX_LEN),
        "--host-index".into(),
        index.to_string(),
        "--peer-ipv4".into(),
        link::host_ipv4(HOSTS - 1 - index),
        "--sync".into(),
        path(dir.join("sync")),
        "--peer-timeout".into(),
        PEER_TIMEOUT.as_secs().to_string(),
    ]
}

/// `a` or `b`: host `index`'s directory in the run directory.
fn host_dir(index: usize) -> String {
    link::host_name(index).to_ascii_lowercase().to_string()
}

/// Runs `plans[i]` on host `i`, both at once, by `route` (which must be the
/// VM path: see [`super::choose_two_hosts`]).
pub(crate) fn run(
    ws: &Workspace,
    task: &str,
    route: &Route,
    plans: [&Plan; HOSTS],
    opts: &RunOptions,
) -> Result<TwoHosts> {
    let Route::Vm { kernel, kvm, .. } = route else {
        return Err("two hosts run on the VM path only".into());
    };
    let script = ws.root.join("ci").join("vm-run.sh");
    if !script.is_file() {
        return Err(format!("{} is missing", script.display()).into());
    }
    let dir = run_dir(ws, task)?;
    let sync = dir.join("sync");
    // Fresh results and rendezvous: nothing stale may pass for this run.
    let _ = fs::remove_dir_all(&sync);
    fs::create_dir_all(&sync).map_err(|e| format!("cannot create {}: {e}", sync.display()))?;
    for (i, plan) in plans.iter().enumerate() {
        let host = dir.join(host_dir(i));
        let _ = fs::remove_dir_all(&host);
        fs::create_dir_all(host.join("out"))
            .map_err(|e| format!("cannot create {}: {e}", host.display()))?;
        fs::write(host.join("plan.sh"), plan.text())
            .map_err(|e| format!("cannot write {}/plan.sh: {e}", host.display()))?;
    }
    let link = Link::choose_free().ok_or("no two free UDP ports on 127.0.0.1 for the link")?;
    println!(
        "{task}: host A {} and host B {} on a UDP socket link (127.0.0.1 ports {} and {}); \
         results in {}",
        link::host_ipv4(0),
        link::host_ipv4(1),
        link.ports[0],
        link.ports[1],
        dir.display()
    );

    let started = Instant::now();
    let captured = thread::scope(|s| {
        let handles: Vec<_> = (0..HOSTS)
            .map(|i| {
                let shape = Shape {
                    cpus: 1,
                    memory: MEMORY,
                    link_opts: Some(link.qemu_opts(i)),
                };
                let args = script_args(&dir, i, opts);
                let mut cmd = vm::command(ws, kernel, *kvm, &script, &args, &dir, &shape);
                let label = format!("[{}] ", link::host_name(i));
                let sync = &sync;
                s.spawn(move || {
                    // Errors as text: a boxed error is not `Send`.
                    let c = capture::run_labelled(&mut cmd, Some(opts.timeout), &label)
                        .map_err(|e| e.to_string());
                    // The peer must not wait for a host that is gone.
                    let _ = fs::write(sync.join(format!("gone.{i}")), "");
                    c
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a VM thread panicked".to_string()))
            })
            .collect::<Vec<_>>()
    });
    let elapsed = started.elapsed();
    let mut hosts = Vec::new();
    for (i, c) in captured.into_iter().enumerate() {
        let c = c?;
        let name = link::host_name(i);
        let _ = fs::write(dir.join(format!("{}.log", host_dir(i))), &c.output);
        if let Some(t) = c.first_output {
            println!(
                "{task}: host {name}'s guest started the script {:.0} s after vng was launched",
                t.as_secs_f64()
            );
        }
        hosts.push(outcome::read(c, dir.join(host_dir(i)).join("out")));
    }
    println!(
        "{task}: both hosts finished in {:.0} s (full output in {}/{{a,b}}.log)",
        elapsed.as_secs_f64(),
        dir.display()
    );
    Ok(TwoHosts { hosts, elapsed })
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Runs `pairs` (lines of a plan) as host `index` with ci/two-hosts.sh
    /// on this machine (no VM, no rxe: the protocol only), `record` as
    /// ci/vm-run.sh's; returns the host's bash process.
    fn host(dir: &Path, index: usize, pairs: &str) -> std::process::Child {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/two-hosts.sh");
        let out = dir.join(host_dir(index));
        fs::create_dir_all(&out).unwrap();
        let harness = format!(
            "OUT={out} SYNC={sync} HOST_INDEX={index} PEER_IPV4=peer STEP_TIMEOUT=20 PAIR_START_DELAY=0.2\n\
             record() {{ printf '%s\\t%s\\n' \"$2\" \"$1\" >>\"$OUT/steps.tsv\"; }}\n\
             source {script}\n{pairs}",
            out = out.display(),
            sync = dir.join("sync").display(),
            script = script.display(),
        );
        Command::new("bash")
            .args(["-c", &harness])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    fn steps(dir: &Path, index: usize) -> String {
        fs::read_to_string(dir.join(host_dir(index)).join("steps.tsv")).unwrap_or_default()
    }

    #[test]
    fn pair_steps_meet_and_judge_each_side() {
        let dir = std::env::temp_dir().join(format!("xtask-pairs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("sync")).unwrap();
        let plan = "pair_step ok 0 0 'echo served' 'echo got it' served 'got it'\n\
                    pair_step expect-missing 0 1 'echo served' 'echo nothing' '' 'got'\n\
                    pair_step server-fails 0 0 'exit 4' 'echo fine'\n";
        let hosts = [host(&dir, 0, plan), host(&dir, 1, plan)];
        for mut h in hosts {
            assert!(h.wait().unwrap().success());
        }
        // Each host records its own side: exit code, then label.
        assert_eq!(
            steps(&dir, 0),
            "0\tok\n1\texpect-missing\n4\tserver-fails\n"
        );
        assert_eq!(
            steps(&dir, 1),
            "0\tok\n0\texpect-missing\n0\tserver-fails\n"
        );

        // A peer that is gone is not waited for: the client's step fails
        // at once (125: not run) instead of after the step's time limit.
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("sync")).unwrap();
        fs::write(dir.join("sync").join("gone.1"), "").unwrap();
        let started = Instant::now();
        assert!(host(&dir, 0, "pair_step lonely 0 1 'true' 'true'\n")
            .wait()
            .unwrap()
            .success());
        assert_eq!(steps(&dir, 0), "125\tlonely\n");
        assert!(started.elapsed() < Duration::from_secs(10));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn each_host_gets_its_address_and_its_peers() {
        let opts = RunOptions {
            want: super::super::Want::Vm,
            timeout: Duration::from_secs(3600),
            step_timeout: Duration::from_secs(600),
        };
        let a = script_args(Path::new("/r"), 0, &opts).join(" ");
        let b = script_args(Path::new("/r"), 1, &opts).join(" ");
        assert!(a.contains("--plan /r/a/plan.sh --out /r/a/out"), "{a}");
        assert!(a.contains("--link-ipv4 192.168.77.1/24 --host-index 0 --peer-ipv4 192.168.77.2 --sync /r/sync"), "{a}");
        assert!(b.contains("--plan /r/b/plan.sh --out /r/b/out"), "{b}");
        assert!(
            b.contains("--link-ipv4 192.168.77.2/24 --host-index 1 --peer-ipv4 192.168.77.1"),
            "{b}"
        );
    }
}
