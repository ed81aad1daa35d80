//! Choosing how a run reaches an rxe device: natively when the host kernel
//! has `rdma_rxe` and we are root, otherwise in a qemu VM.

use std::fmt;

use super::options::Want;
use super::vm::Kernel;
use super::{kvm_probe, native, vm};
use crate::host;
use crate::workspace::Workspace;
use crate::Result;

/// Which way a run reaches an rxe device.
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// The host kernel has rdma_rxe and we are root.
    Native,
    /// A qemu guest running `kernel`.
    Vm {
        /// The guest kernel.
        kernel: Kernel,
        /// Whether qemu may use KVM (else TCG emulation).
        kvm: bool,
        /// Why not native, in words.
        why: String,
    },
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Native => write!(f, "native path (host kernel has rdma_rxe)"),
            Route::Vm { kernel, kvm, why } => write!(
                f,
                "VM path ({why}; booting kernel {} from /boot under qemu, KVM: {})",
                kernel.version,
                if *kvm { "usable" } else { "unusable → TCG" }
            ),
        }
    }
}

/// Decides the route for `task` and prints it as `<task>: <route>`.
pub(crate) fn choose_route(ws: &Workspace, task: &str, want: Want) -> Result<Route> {
    let root = host::is_root();
    let route = match want {
        Want::Native => {
            if !root {
                return Err("--native needs root (to load rdma_rxe and create rxe0)".into());
            }
            if !native::host_has_rxe(true) {
                return Err("--native: the host kernel has no rdma_rxe module".into());
            }
            Route::Native
        }
        Want::Auto if root && native::host_has_rxe(true) => Route::Native,
        Want::Auto | Want::Vm => {
            let why = if want == Want::Vm {
                "--vm given".to_string()
            } else if native::host_has_rxe(false) {
                "host kernel has rdma_rxe but xtask is not root".to_string()
            } else {
                "host kernel lacks rdma_rxe".to_string()
            };
            vm::check_tools()?;
            let kernel = vm::guest_kernel()?;
            let kvm = kvm_probe::kvm_usable(ws, &kernel);
            Route::Vm { kernel, kvm, why }
        }
    };
    println!("{task}: {route}");
    Ok(route)
}

/// The route of a two-host run, printed as `<task>: two hosts: <route>`:
/// always two VMs, natively too — two hosts need two kernels (two network
/// namespaces with an rxe each come up, but an RC connection across them
/// fails: rxe sends through one UDP socket for all namespaces).
pub(crate) fn choose_two_hosts(ws: &Workspace, task: &str) -> Result<Route> {
    vm::check_tools()?;
    let kernel = vm::guest_kernel()?;
    let kvm = kvm_probe::kvm_usable(ws, &kernel);
    let route = Route::Vm {
        kernel,
        kvm,
        why: "two hosts need two kernels: two qemu guests joined by a UDP socket link".into(),
    };
    println!("{task}: two hosts: {route}");
    Ok(route)
}
