//! `cargo xtask demo` — shows a newcomer a working RDMA stack: the soft-RoCE
//! device, its port and GIDs, our `rc_pingpong` against itself and against
//! rdma-core's `ibv_rc_pingpong` (both directions), a short RDMA-write
//! bandwidth and latency measurement with our `perf`, and a connection made
//! by the RDMA connection manager (our `rping` against rdma-core's).
//!
//! The example programs are built in release mode on the host first; the
//! steps then run through [`crate::rxe`] (natively or in the VM, in one
//! boot). To show another program, add a step to [`plan`]: `step` for one
//! command, `server_client` for a server/client pair, each preceded by a
//! `say` telling the reader what to look at.

use std::path::Path;
use std::process::ExitCode;

use crate::process;
use crate::rxe::{self, Plan, RunArgs, Want};
use crate::setup;
use crate::shell::shell_quote;
use crate::workspace::{self, Workspace};
use crate::{heading, Result};

/// What the task does, printed by `--help` above the options.
pub(crate) const ABOUT: &str = "\
Builds the example programs (cargo build --release -p rdma-examples), brings
up a soft-RoCE device (rxe0) - natively or in a qemu VM - and walks through
it, explaining each step:
  1. the device: our `devices` and rdma-core's `ibv_devinfo`
  2. our rc_pingpong server + client
  3. our rc_pingpong server + rdma-core's ibv_rc_pingpong client, and the
     other way round (the two are wire-compatible)
  4. RDMA-write bandwidth (perf write_bw, 4 KiB / 64 KiB / 1 MiB) and
     latency (perf write_lat, 64 B)
  5. connecting by IP address with the RDMA connection manager: our rping
     server + rdma-core's rping client, and the other way round
  6. an async service: async_echo --cm serving 64 clients connected through
     the RDMA CM from one protection domain and one buffer pool
Exits non-zero if any step fails. Takes a few minutes under CPU emulation.";

/// The options of `cargo xtask demo`.
#[derive(Debug, clap::Args)]
#[command(after_help = rxe::ENV_HELP)]
pub(crate) struct Args {
    /// do not check/install prerequisites first
    #[arg(long)]
    no_setup: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// Ping-pong round trips per rc_pingpong run (small: TCG is slow).
const PINGPONG_ITERS: u32 = 200;
/// RDMA writes per bandwidth size.
const BW_ITERS: u32 = 300;
/// Bandwidth message sizes.
const BW_SIZES: [u32; 3] = [4096, 65536, 1 << 20];
/// Round trips of the latency test.
const LAT_ITERS: u32 = 300;
/// Pings of the rping steps.
const RPING_COUNT: u32 = 5;
/// async_echo --cm: connections from one client process, messages each.
const ECHO_CLIENTS: u32 = 64;
const ECHO_MESSAGES: u32 = 20;

/// The demo's steps; `bin` is the directory holding the release binaries.
fn plan(bin: &Path) -> Plan {
    let exe = |name: &str| shell_quote(&bin.join(name).to_string_lossy());
    let (pingpong, perf, rping) = (exe("rc_pingpong"), exe("perf"), exe("rping"));
    let echo = exe("async_echo");
    let dev = "-d \"$RXE_DEVICE\"";
    let gid = "-g \"$RXE_GID_INDEX\"";
    let n = PINGPONG_ITERS;

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
        "1a. Our `devices` program (rdma-examples, on the rdma-core crate): the device,\n\
         its port and its GID table. Look for `state: ACTIVE` (link up), `link_layer:\n\
         Ethernet` (RoCE), and the GID rows: each IP address of the netdev is a GID;\n\
         the RoCE v2 row with ::ffff:a.b.c.d is the index passed as -g/-x below.",
    );
    let devices_raw = bin.join("devices");
    p.step(
        "devices (ours)",
        &[&devices_raw.to_string_lossy(), "-d", rxe::DEVICE],
    );
    p.say(
        "1b. The same device through rdma-core's ibv_devinfo, for comparison: the\n\
         port fields should match ours. port_lid is 0 - Ethernet has no InfiniBand\n\
         LIDs, so peers are addressed by GID. vm-run.sh exported RXE_GID_INDEX.",
    );
    p.sh_step(
        "ibv_devinfo (rdma-core)",
        "ibv_devinfo -d \"$RXE_DEVICE\"; echo \"RXE_GID_INDEX=$RXE_GID_INDEX\"",
    );

    p.say(&format!(
        "2. Our rc_pingpong, server and client on this machine (127.0.0.1). They swap\n\
         LID:QPN:PSN:GID over TCP port 18515, connect their RC queue pairs and bounce\n\
         {n} messages of 4096 B with SEND/RECV. Each side prints its own two summary\n\
         lines; they nearly agree because the exchange is lock-step: both clocks time\n\
         the same {n} round trips (bytes count both directions)."
    ));
    p.server_client(
        "rc_pingpong: ours <-> ours",
        18515,
        &format!("{pingpong} {dev} {gid} -n {n} -p 18515"),
        &format!("{pingpong} {dev} {gid} -n {n} -p 18515 127.0.0.1"),
    );

    p.say(
        "3a. Interoperability: our rc_pingpong as the server, rdma-core's C\n\
         ibv_rc_pingpong as the client. Same wire format (the 52-byte address\n\
         message, then plain SENDs), so the C client cannot tell the difference.",
    );
    p.server_client(
        "rc_pingpong: ours (server) <-> ibv_rc_pingpong (client)",
        18516,
        &format!("{pingpong} {dev} {gid} -n {n} -p 18516"),
        &format!("ibv_rc_pingpong {dev} {gid} -n {n} -p 18516 127.0.0.1"),
    );
    p.say(
        "3b. And the other way round: ibv_rc_pingpong serves, ours connects.\n\
         Both directions passing means the handshake and the data path match the C\n\
         reference implementation byte for byte.",
    );
    p.server_client(
        "rc_pingpong: ibv_rc_pingpong (server) <-> ours (client)",
        18517,
        &format!("ibv_rc_pingpong {dev} {gid} -n {n} -p 18517"),
        &format!("{pingpong} {dev} {gid} -n {n} -p 18517 127.0.0.1"),
    );

    let xgid = "-x \"$RXE_GID_INDEX\"";
    p.say(&format!(
        "4a. RDMA-write bandwidth with our `perf write_bw` ({BW_ITERS} writes per size, 128\n\
         in flight). One-sided: the client writes straight into the server's\n\
         registered memory; the server's CPU is idle until it checks the data at the\n\
         end. Read `BW average[MB/sec]` in the client's table; bigger messages amortise\n\
         per-operation cost. Under CPU emulation the absolute numbers are small."
    ));
    for (k, size) in BW_SIZES.iter().enumerate() {
        let port = 18520 + k as u32;
        p.server_client(
            &format!("perf write_bw {size} B"),
            port as u16,
            &format!("{perf} write_bw {dev} {xgid} -p {port}"),
            &format!(
                "{perf} write_bw {dev} {xgid} -s {size} -n {BW_ITERS} -t 128 -p {port} 127.0.0.1"
            ),
        );
    }
    p.say(&format!(
        "4b. RDMA-write latency with `perf write_lat` (64 B, {LAT_ITERS} ping-pongs, one write in\n\
         flight): each side polls its memory for the other's write. Times are half a\n\
         round trip; t_typical is the median, the tail (t_max, 99.9%) shows scheduling\n\
         hiccups. Under emulation expect tens of usec and a long tail; hardware: ~1-3."
    ));
    p.server_client(
        "perf write_lat 64 B",
        18530,
        &format!("{perf} write_lat {dev} {xgid} -p 18530"),
        &format!("{perf} write_lat {dev} {xgid} -s 64 -n {LAT_ITERS} -p 18530 127.0.0.1"),
    );
    p.say(
        "That was a real RDMA data path: the NIC (here: the rxe driver) moved the\n\
         bytes between registered memory regions; the programs only posted work\n\
         requests and polled completions. Both perf sides end with `data verified`.",
    );

    let c = RPING_COUNT;
    let addr = "-a \"$RXE_IPV4\"";
    p.say(&format!(
        "5a. Connecting by address: the RDMA connection manager (librdmacm) resolves\n\
         $RXE_IPV4 to the rxe0 device, picks the GID and path, and carries the connect\n\
         and accept - no TCP side channel, no -d/-g. Our rping serves, rdma-core's rping\n\
         connects: {c} pings in which the client advertises its buffers, the server\n\
         RDMA-reads the ping data and RDMA-writes it back. Both print each ping\n\
         (`ping data: rdma-ping-N: ...` / `server ping data: ...`); -V makes the client\n\
         compare what came back with what it sent."
    ));
    p.server_client(
        "rping: ours (server) <-> rping (client), RDMA CM",
        0,
        &format!("{rping} -s {addr} -p 7174 -v -C {c}"),
        &format!("rping -c {addr} -p 7174 -v -V -C {c}"),
    );
    p.say(
        "5b. And the other way round: rdma-core's rping serves, ours connects. The C\n\
         server prints `server DISCONNECT EVENT...` when the client leaves.",
    );
    p.server_client(
        "rping: rping (server) <-> ours (client), RDMA CM",
        0,
        &format!("rping -s {addr} -p 7175 -v -C {c}"),
        &format!("{rping} -c {addr} -p 7175 -v -V -C {c}"),
    );

    let (clients, messages) = (ECHO_CLIENTS, ECHO_MESSAGES);
    p.say(&format!(
        "6. An async service: `async_echo server --cm` (tokio) accepts every client\n\
         through the RDMA CM as a future (no thread per connection attempt), puts all\n\
         of them in one protection domain and serves them from one pool of registered\n\
         buffers: each received buffer goes straight back out as the reply. One client\n\
         process opens {clients} connections and sends {messages} messages on each, checking every\n\
         echoed byte; it prints messages/s and the round trip's p50/p99."
    ));
    p.sh_step(
        "async_echo --cm: 64 clients, one domain, one pool",
        &format!(
            "log=$(mktemp); {echo} server {dev} --cm -p 18650 -s 1000 2>\"$log\" & s=$!; \
             for _ in $(seq 600); do grep -q 'serving on' \"$log\" && break; \
             kill -0 $s 2>/dev/null || break; sleep 0.1; done; \
             {echo} client {dev} --cm -p 18650 --clients {clients} --messages {messages} \
             -s 1000 \"$RXE_IPV4\"; rc=$?; kill $s; wait $s 2>/dev/null; \
             grep -c 'connection closed after {messages} messages' \"$log\" \
             | sed 's/$/ connections served in full by the server/'; exit $rc"
        ),
    );
    p
}

/// Builds the example programs in release mode (echoing the command) and
/// returns the directory holding them.
pub(crate) fn build_examples(ws: &Workspace) -> Result<std::path::PathBuf> {
    let mut cmd = workspace::cargo();
    cmd.args(["build", "--release", "-p", "rdma-examples"])
        .current_dir(&ws.root);
    process::run(&mut cmd)?;
    let bin = ws.target.join("release");
    for name in [
        "devices",
        "rc_pingpong",
        "perf",
        "rping",
        "async_echo",
        "rstream",
    ] {
        if !bin.join(name).is_file() {
            return Err(format!("{} was not built", bin.join(name).display()).into());
        }
    }
    Ok(bin)
}

/// `cargo xtask demo`.
pub(crate) fn main(args: Args) -> Result<ExitCode> {
    let opts = args.run.options(Want::Auto);
    if !args.no_setup {
        setup::ensure()?;
    }
    let ws = Workspace::locate();
    let bin = build_examples(&ws)?;
    let route = rxe::choose_route(&ws, "demo", opts.want)?;
    let outcome = rxe::run(&ws, "demo", &route, &plan(&bin), &opts)?;
    heading("demo summary");
    println!("route:   {route}");
    outcome.print_steps("         ");
    if let Some(why) = outcome.failure_reason() {
        println!("problem: {why}");
        return Ok(ExitCode::FAILURE);
    }
    println!("result:  PASS");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::{self, Task};

    fn parse(words: &[&str]) -> Result<Args, clap::Error> {
        match cli::try_parse(&[&["demo"], words].concat())? {
            Task::Demo(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options() {
        let a = parse(&[]).unwrap();
        assert!(!a.no_setup);
        let run = a.run.options(Want::Auto);
        assert_eq!(run.want, Want::Auto);
        assert_eq!(run.timeout.as_secs(), 3600);
        let a = parse(&["--no-setup", "--native", "--step-timeout", "30"]).unwrap();
        assert!(a.no_setup);
        let run = a.run.options(Want::Auto);
        assert_eq!(run.want, Want::Native);
        assert_eq!(run.step_timeout.as_secs(), 30);
    }

    #[test]
    fn help_and_mistakes() {
        let help = cli::long_help("demo");
        for option in [
            "--no-setup",
            "--vm",
            "--step-timeout <SECS>",
            "[default: 600]",
            "async_echo",
            "XTASK_VM_KERNEL",
        ] {
            assert!(help.contains(option), "{option} in {help}");
        }
        let e = parse(&["--bogus"]).unwrap_err().to_string();
        assert!(
            e.contains("cargo xtask demo") && e.contains("--bogus"),
            "{e}"
        );
        let e = parse(&["--timeout"]).unwrap_err().to_string();
        assert!(e.contains("--timeout"), "{e}");
        assert!(parse(&["extra"]).is_err());
    }
}
