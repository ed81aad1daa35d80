//! `cargo xtask setup` — installs what a fresh Debian 12 machine lacks:
//! the apt packages below and `vng` (virtme-ng) from PyPI.

use std::process::{Command, ExitCode};

use crate::host;
use crate::process::{self, capture, quiet_ok, quiet_output};
use crate::Result;

/// The apt packages the workspace needs, and why.
pub(crate) const APT_PACKAGES: &[(&str, &str)] = &[
    ("libibverbs-dev", "headers + libibverbs.so for ibverbs-sys"),
    ("librdmacm-dev", "RDMA CM headers"),
    ("libclang-dev", "bindgen in ibverbs-sys/build.rs"),
    ("pkg-config", "ibverbs-sys/build.rs finds libibverbs"),
    ("rdma-core", "userspace RDMA stack"),
    ("ibverbs-providers", "the rxe provider (librxe)"),
    ("ibverbs-utils", "ibv_devices, ibv_devinfo, ibv_rc_pingpong"),
    (
        "rdmacm-utils",
        "rping, ucmatose, rstream; librspreload.so (in librdmacm1)",
    ),
    (
        "curl",
        "an unmodified TCP client reaching the stream's HTTP example over rsockets",
    ),
    ("perftest", "ib_write_bw and friends, the reference peers"),
    (
        "valgrind",
        "callgrind: bench --instructions counts instructions per operation",
    ),
    ("iproute2", "`rdma link add` creates the rxe device"),
    ("kmod", "modprobe rdma_rxe"),
    (
        "qemu-system-x86",
        "the VM when the host kernel has no rdma_rxe",
    ),
    (
        "linux-image-amd64",
        "the guest kernel (Debian's ships rdma_rxe.ko)",
    ),
    ("busybox-static", "vng builds the guest's initramfs with it"),
];

/// The apt package that provides `python3 -m pip` (only needed for vng).
const PIP_PACKAGE: &str = "python3-pip";

/// Which of `packages` dpkg does not report as installed; `None` when this
/// is not a dpkg-based system.
fn missing_packages<'a>(packages: &[&'a str]) -> Option<Vec<&'a str>> {
    host::which("dpkg-query")?;
    // Unknown packages make dpkg-query exit 1 but it still prints the rest.
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${Status}\\n"])
        .args(packages)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let installed: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with(" install ok installed"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|p| p.split(':').next().unwrap_or(p))
        .collect();
    Some(
        packages
            .iter()
            .copied()
            .filter(|p| !installed.contains(p))
            .collect(),
    )
}

/// `vng --version`, if vng runs.
fn vng_version() -> Option<String> {
    quiet_output(Command::new(host::vng()).arg("--version")).map(|s| s.trim().to_string())
}

fn pip_works() -> bool {
    quiet_ok(Command::new("python3").args(["-m", "pip", "--version"]))
}

/// A cheap check that everything `setup` installs is present; returns what
/// is missing, in words.
pub(crate) fn missing() -> Vec<String> {
    let names: Vec<&str> = APT_PACKAGES.iter().map(|(p, _)| *p).collect();
    let mut out: Vec<String> = missing_packages(&names)
        .unwrap_or_default()
        .into_iter()
        .map(|p| format!("apt package {p}"))
        .collect();
    if vng_version().is_none() {
        out.push("vng (pip package virtme-ng)".to_string());
    }
    out
}

/// Runs `setup` if the cheap check finds something missing.
pub(crate) fn ensure() -> Result<()> {
    let missing = missing();
    if missing.is_empty() {
        return Ok(());
    }
    println!(
        "xtask: prerequisites missing ({}); running `cargo xtask setup` first",
        missing.join(", ")
    );
    if setup()? {
        Ok(())
    } else {
        Err("prerequisites are missing; run the commands printed above, then retry".into())
    }
}

/// What the task does, printed by `--help`.
pub(crate) const ABOUT: &str = "\
Installs the apt packages the workspace needs (only the missing ones:
apt-get update + apt-get install --no-install-recommends) and vng from PyPI
(python3 -m pip install virtme-ng). Needs root and apt-get; otherwise prints
the commands to run and exits non-zero.";

/// `cargo xtask setup` takes no options.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// `cargo xtask setup`.
pub(crate) fn main(Args {}: Args) -> Result<ExitCode> {
    Ok(if setup()? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Does the work; `Ok(false)` when the user has to run commands themselves.
fn setup() -> Result<bool> {
    let root = host::is_root();
    let have_apt = host::which("apt-get").is_some();
    let mut todo_by_hand: Vec<String> = Vec::new();
    let sudo = if root { "" } else { "sudo " };

    // 1. apt packages.
    println!("setup: checking apt packages");
    let mut wanted: Vec<&str> = APT_PACKAGES.iter().map(|(p, _)| *p).collect();
    let need_vng = vng_version().is_none();
    if need_vng && !pip_works() {
        wanted.push(PIP_PACKAGE);
    }
    match missing_packages(&wanted) {
        None => {
            println!("setup: dpkg-query not found: not a Debian-based system; install the equivalents of:");
            for (p, why) in APT_PACKAGES {
                println!("    {p:20} {why}");
            }
            todo_by_hand.push(format!(
                "(install the equivalents of: {})",
                wanted.join(" ")
            ));
        }
        Some(missing) => {
            for p in wanted.iter().filter(|p| !missing.contains(p)) {
                println!("ok: {p} already installed");
            }
            if !missing.is_empty() {
                let why = |p: &str| {
                    APT_PACKAGES
                        .iter()
                        .find(|(n, _)| *n == p)
                        .map_or("python3 -m pip, to install vng", |(_, w)| w)
                };
                for p in &missing {
                    println!("missing: {p} ({})", why(p));
                }
                let install = format!(
                    "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}",
                    missing.join(" ")
                );
                if root && have_apt {
                    process::run(
                        Command::new("apt-get")
                            .arg("update")
                            .env("DEBIAN_FRONTEND", "noninteractive"),
                    )?;
                    process::run(
                        Command::new("apt-get")
                            .args(["install", "-y", "--no-install-recommends"])
                            .args(&missing)
                            .env("DEBIAN_FRONTEND", "noninteractive"),
                    )?;
                    if let Some(still) = missing_packages(&missing).filter(|s| !s.is_empty()) {
                        return Err(format!(
                            "apt-get finished but these are still not installed: {}",
                            still.join(" ")
                        )
                        .into());
                    }
                } else {
                    let reason = if !have_apt {
                        "apt-get not found"
                    } else {
                        "not root"
                    };
                    println!("setup: cannot install apt packages ({reason})");
                    todo_by_hand.push(format!("{sudo}apt-get update"));
                    todo_by_hand.push(format!("{sudo}{install}"));
                }
            }
        }
    }

    // 2. vng from PyPI.
    println!("setup: checking vng (virtme-ng)");
    if let Some(v) = vng_version() {
        println!("ok: vng already installed ({v})");
    } else if !pip_works() {
        todo_by_hand.push("python3 -m pip install virtme-ng".to_string());
        println!("setup: python3 -m pip is not available yet (apt package {PIP_PACKAGE})");
    } else {
        install_vng()?;
        match vng_version() {
            Some(v) => println!("ok: vng installed ({v})"),
            None => {
                let hint = ["/usr/local/bin/vng", "~/.local/bin/vng"].join(" or ");
                return Err(format!(
                    "pip installed virtme-ng but `vng` is not on PATH; look for {hint} and add its directory to PATH"
                )
                .into());
            }
        }
    }

    if todo_by_hand.is_empty() {
        println!("setup: all prerequisites present");
        Ok(true)
    } else {
        println!("\nsetup: run these commands, then `cargo xtask setup` again:");
        for c in &todo_by_hand {
            println!("    {c}");
        }
        Ok(false)
    }
}

fn install_vng() -> Result<()> {
    let base = ["-m", "pip", "install", "virtme-ng"];
    let first = capture::run(Command::new("python3").args(base), None)?;
    if first.success() {
        return Ok(());
    }
    if first.output.contains("externally-managed-environment") {
        println!("setup: this Python is externally managed (PEP 668); retrying with --break-system-packages");
        let second = capture::run(
            Command::new("python3")
                .args(base)
                .arg("--break-system-packages"),
            None,
        )?;
        if second.success() {
            return Ok(());
        }
    }
    Err("`python3 -m pip install virtme-ng` failed (see its output above)".into())
}
