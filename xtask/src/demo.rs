//! `cargo xtask demo` — shows a newcomer a working RDMA stack: the soft-RoCE
//! device, its port and GIDs, and two programs talking over it.
//!
//! Everything runs through [`crate::rxe`] (natively or in the VM). To show
//! another program, add a step to [`plan`]: `step` for one command,
//! `server_client` for a server/client pair.

use std::process::ExitCode;

use crate::rxe::{self, Plan, RunOptions};
use crate::setup;
use crate::util::{heading, Result, Workspace};

const HELP: &str = "\
usage: cargo xtask demo [OPTIONS]

Brings up a soft-RoCE device (rxe0) - natively or in a qemu VM - and walks
through it: ibv_devices, ibv_devinfo, the GID table, and rdma-core's
ibv_rc_pingpong server + client exchanging messages over RC queue pairs.

options:
";

/// The demo's steps.
fn plan() -> Plan {
    let mut p = Plan::new();
    p.say(
        "== cargo xtask demo ==\n\
         rxe (soft-RoCE) is the Linux kernel's software RDMA device: it implements\n\
         RoCE v2 - InfiniBand transport over UDP/IP (port 4791) - on top of an\n\
         ordinary network interface. Programs use it through libibverbs exactly\n\
         like a hardware RDMA NIC. Above, vm-run.sh loaded the rdma_rxe module and\n\
         ran `rdma link add rxe0 type rxe netdev $RXE_NETDEV`.",
    );
    p.say(
        "1. ibv_devices: the RDMA devices libibverbs can open. On a machine with a\n\
         Mellanox card you would see mlx5_0; here it is the software device rxe0.",
    );
    p.step("ibv_devices", &["ibv_devices"]);
    p.say(
        "2. ibv_devinfo: the device's port. Look for `state: PORT_ACTIVE` (the link\n\
         is up) and `link_layer: Ethernet` (RoCE). port_lid is 0: Ethernet has no\n\
         InfiniBand LIDs, so peers are addressed by GID (an IPv6-format address).",
    );
    p.step("ibv_devinfo -d rxe0", &["ibv_devinfo", "-d", rxe::DEVICE]);
    p.say(
        "3. The GID table. Each IP address of the network interface becomes a GID;\n\
         ::ffff:a.b.c.d is the IPv4 one. Connecting a queue pair on RoCE needs the\n\
         *index* of a RoCE v2 GID: vm-run.sh found it and exported RXE_GID_INDEX.",
    );
    p.sh_step(
        "GID table of rxe0",
        "ibv_devinfo -v -d \"$RXE_DEVICE\" | grep -E 'GID\\['; echo \"RXE_GID_INDEX=$RXE_GID_INDEX\"",
    );
    p.say(
        "4. ibv_rc_pingpong (rdma-core's example program). The server waits on TCP\n\
         port 18515; the client connects, both swap LID:QPN:PSN:GID over that TCP\n\
         connection, move their RC (reliable connected) queue pairs to RTR/RTS, and\n\
         bounce 1000 messages of 4096 bytes back and forth with SEND/RECV verbs.\n\
         Both sides print what they moved and how fast. Under CPU emulation the\n\
         numbers are small; on a real kernel they are much larger.",
    );
    p.server_client(
        "ibv_rc_pingpong server + client over rxe0",
        18515,
        "ibv_rc_pingpong -d \"$RXE_DEVICE\" -g \"$RXE_GID_INDEX\"",
        "ibv_rc_pingpong -d \"$RXE_DEVICE\" -g \"$RXE_GID_INDEX\" 127.0.0.1",
    );
    p.say(
        "That was a real RDMA data path: the NIC (here: the rxe driver) moved the\n\
         bytes between registered memory regions; the programs only posted work\n\
         requests and polled completions.",
    );
    p
}

/// `cargo xtask demo`.
pub(crate) fn main(args: &[String]) -> Result<ExitCode> {
    let mut opts = RunOptions::default();
    let mut i = 0;
    while i < args.len() {
        if opts.parse_arg(args, &mut i)? {
            continue;
        }
        match args[i].as_str() {
            "-h" | "--help" => {
                println!("{HELP}{}", RunOptions::HELP);
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(format!("demo: unknown argument `{other}` (see --help)").into()),
        }
    }
    setup::ensure()?;
    let ws = Workspace::locate();
    let route = rxe::choose_route(&ws, "demo", opts.want)?;
    let outcome = rxe::run(&ws, "demo", &route, &plan(), &opts)?;
    heading("demo summary");
    println!("route:   {route}");
    for s in &outcome.steps {
        println!(
            "         {} {:>4} s  {}",
            if s.passed { "PASS" } else { "FAIL" },
            s.seconds,
            s.label
        );
    }
    if let Some(why) = outcome.failure_reason() {
        println!("problem: {why}");
        return Ok(ExitCode::FAILURE);
    }
    println!("result:  PASS");
    Ok(ExitCode::SUCCESS)
}
