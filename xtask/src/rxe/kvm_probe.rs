//! Whether qemu can use KVM on this host, probed once per boot.

use std::fs;
use std::process::Command;
use std::time::Duration;

use super::vm::Kernel;
use crate::process::capture;
use crate::process::describe;
use crate::workspace::Workspace;

/// Whether qemu can use KVM here. `/dev/kvm` may exist and still not work
/// (nested virtualisation: qemu aborts with "failed to set MSR" or hangs),
/// so a tiny boot is tried once: the kernel alone, no root filesystem, must
/// reach its "VFS: Unable to mount root fs" panic within 15 s. The answer is
/// cached in `target/xtask/kvm-ok` for the current boot of the host.
pub(crate) fn kvm_usable(ws: &Workspace, kernel: &Kernel) -> bool {
    match std::env::var("XTASK_KVM").as_deref() {
        Ok("0") => return false,
        Ok("1") => return true,
        _ => {}
    }
    if fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        println!("xtask: /dev/kvm missing or not accessible → TCG");
        return false;
    }
    let boot_id = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let key = format!("boot_id={} kernel={}", boot_id.trim(), kernel.version);
    let cache = ws.target.join("xtask").join("kvm-ok");
    if let Ok(text) = fs::read_to_string(&cache) {
        let mut lines = text.lines();
        if lines.next() == Some(key.as_str()) {
            let ok = lines.next() == Some("kvm=usable");
            println!(
                "xtask: KVM {} (cached in {})",
                if ok { "usable" } else { "unusable" },
                cache.display()
            );
            return ok;
        }
    }
    let limit = Duration::from_secs(15);
    let mut probe = Command::new("qemu-system-x86_64");
    probe
        .args(["-accel", "kvm", "-cpu", "host", "-m", "256", "-smp", "1"])
        .args([
            "-nodefaults",
            "-nographic",
            "-no-reboot",
            "-serial",
            "stdio",
            "-monitor",
            "none",
        ])
        .arg("-kernel")
        .arg(&kernel.image)
        .args(["-append", "console=ttyS0 panic=-1 quiet"]);
    println!(
        "xtask: probing KVM with a bare kernel boot ({} s limit)",
        limit.as_secs()
    );
    let ok = match capture::run_quiet(&mut probe, Some(limit)) {
        Ok(c) => {
            let ok = c.output.contains("Kernel panic");
            if !ok {
                let why = match c.status {
                    None => "qemu hung".to_string(),
                    Some(s) => {
                        let last = c
                            .output
                            .lines()
                            .rev()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("");
                        format!("qemu {}: {}", describe(s), last.trim())
                    }
                };
                println!("xtask: KVM unusable ({why}) → TCG");
            } else {
                println!(
                    "xtask: KVM usable ({:.1} s to boot the probe)",
                    c.elapsed.as_secs_f64()
                );
            }
            ok
        }
        Err(e) => {
            println!("xtask: KVM probe failed to start ({e}) → TCG");
            false
        }
    };
    let _ = fs::create_dir_all(ws.target.join("xtask"));
    let _ = fs::write(
        &cache,
        format!("{key}\nkvm={}\n", if ok { "usable" } else { "unusable" }),
    );
    ok
}
