//! The VM path: a qemu guest booted with vng from a `/boot` kernel whose
//! modules include `rdma_rxe`, running `ci/vm-run.sh` inside.
//!
//! `vng -r /boot/vmlinuz-<ver> [--disable-kvm] --network user --cpus N
//! --memory 2G --cwd <root> --rwdir <out> --exec "bash <root>/ci/vm-run.sh
//! ..."`; the two hosts' guests instead get `--qemu-opts=` with their
//! link NIC (see [`super::link`]), 1 vCPU and 1 GiB each. The guest sees
//! the host's root filesystem read-only (9p), so built binaries run in
//! place; only `<out>` is writable. vng passes the
//! guest command's exit status through, and the script also writes it to
//! `<out>/status`, which is what xtask trusts.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host;
use crate::shell::{shell_join, shell_quote};
use crate::workspace::Workspace;
use crate::Result;

/// Guest memory for the VM.
const VM_MEMORY: &str = "2G";

/// A kernel image in /boot whose modules include rdma_rxe.
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    /// `6.1.0-56-amd64`.
    pub(crate) version: String,
    /// `/boot/vmlinuz-6.1.0-56-amd64`.
    pub(crate) image: PathBuf,
}

pub(super) fn check_tools() -> Result<()> {
    for (tool, pkg) in [
        ("vng", "pip package virtme-ng"),
        ("qemu-system-x86_64", "apt package qemu-system-x86"),
        ("busybox", "apt package busybox-static"),
    ] {
        let found = match tool {
            "vng" => host::vng().is_absolute(),
            "busybox" => host::which(tool).is_some() || Path::new("/bin/busybox").exists(),
            _ => host::which(tool).is_some(),
        };
        if !found {
            return Err(format!(
                "the VM path needs `{tool}` ({pkg}), which is not installed; run `cargo xtask setup`"
            )
            .into());
        }
    }
    Ok(())
}

/// Compares version strings by their numeric runs: 6.1.0-56 < 6.1.0-128.
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The newest `/boot/vmlinuz-*` whose modules include rdma_rxe (or
/// `$XTASK_VM_KERNEL`).
pub(super) fn guest_kernel() -> Result<Kernel> {
    let has_rxe = |ver: &str| {
        let dep = Path::new("/lib/modules").join(ver).join("modules.dep");
        fs::read_to_string(dep).is_ok_and(|d| d.contains("/rdma_rxe.ko"))
    };
    if let Some(image) = std::env::var_os("XTASK_VM_KERNEL").map(PathBuf::from) {
        let version = image
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .unwrap_or_default()
            .to_string();
        if !image.is_file() {
            return Err(format!("XTASK_VM_KERNEL={} does not exist", image.display()).into());
        }
        return Ok(Kernel { version, image });
    }
    let mut found: Vec<Kernel> = fs::read_dir("/boot")
        .map_err(|e| format!("cannot read /boot: {e}"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version = name.strip_prefix("vmlinuz-")?.to_string();
            has_rxe(&version).then(|| Kernel {
                version,
                image: e.path(),
            })
        })
        .collect();
    found.sort_by_key(|k| version_key(&k.version));
    let kernel = found.pop().ok_or(
        "no kernel in /boot has rdma_rxe in its modules; run `cargo xtask setup` (installs linux-image-amd64)",
    )?;
    if fs::File::open(&kernel.image).is_err() {
        return Err(format!(
            "{} is not readable by this user; run as root or `chmod a+r` it",
            kernel.image.display()
        )
        .into());
    }
    Ok(kernel)
}

/// How a guest is built: its vCPUs, memory and network.
#[derive(Debug, Clone)]
pub(super) struct Shape {
    /// vCPUs.
    pub(super) cpus: usize,
    /// Memory, as qemu's `-m` takes it (`2G`).
    pub(super) memory: &'static str,
    /// `None`: vng's user-mode network (slirp, 10.0.2.15 by DHCP);
    /// `Some(opts)`: no vng network, the NIC comes from these qemu options
    /// (the two hosts' link).
    pub(super) link_opts: Option<String>,
}

impl Shape {
    /// The one-host VM: up to 4 vCPUs, 2 GiB, user-mode network.
    pub(super) fn one_host() -> Shape {
        Shape {
            cpus: std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4)),
            memory: VM_MEMORY,
            link_opts: None,
        }
    }
}

/// The command that boots `kernel` shaped as `shape` and runs
/// `ci/vm-run.sh` (`script`) in it, with `rwdir` as the guest's only
/// writable directory.
pub(super) fn command(
    ws: &Workspace,
    kernel: &Kernel,
    kvm: bool,
    script: &Path,
    script_args: &[String],
    rwdir: &Path,
    shape: &Shape,
) -> Command {
    let mut script_args = script_args.to_vec();
    script_args.extend(["--netdev".into(), "virtio".into()]);
    let exec = format!(
        "bash {} {}",
        shell_quote(&script.to_string_lossy()),
        shell_join(&script_args)
    );
    let mut cmd = Command::new(host::vng());
    cmd.arg("-r").arg(&kernel.image);
    if !kvm {
        cmd.arg("--disable-kvm");
    }
    match &shape.link_opts {
        None => cmd.args(["--network", "user"]),
        // With the `=`: a value starting with `-` is otherwise taken for
        // an option of vng's.
        Some(opts) => cmd.arg(format!("--qemu-opts={opts}")),
    };
    cmd.args(["--cpus", &shape.cpus.to_string(), "--memory", shape.memory])
        .arg("--cwd")
        .arg(&ws.root)
        .arg("--rwdir")
        .arg(rwdir);
    if !host::is_root() {
        cmd.args(["--user", "root"]);
    }
    cmd.arg("--exec").arg(exec).current_dir(&ws.root);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_numerically() {
        let mut v = vec!["6.1.0-128-amd64", "6.1.0-56-amd64", "5.10.0-9-amd64"];
        v.sort_by_key(|s| version_key(s));
        assert_eq!(v, ["5.10.0-9-amd64", "6.1.0-56-amd64", "6.1.0-128-amd64"]);
    }
}
