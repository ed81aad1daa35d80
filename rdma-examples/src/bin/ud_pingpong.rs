//! `ud_pingpong` — ping-pong over unreliable datagrams, wire-compatible with
//! rdma-core's `ibv_ud_pingpong`: either side may be the C program.
//!
//! ```text
//! ud_pingpong -d rxe0 -g 1 -s 1000              server: wait for a client
//! ud_pingpong -d rxe0 -g 1 -s 1000 10.0.2.15    client: send first
//! ```
//!
//! Options `-p -d -i -s -r -n -g` as the C program (and `--timeout`) (`-s` defaults to 2048 as
//! there, and must fit the port's MTU: 1024 on rxe over a 1500-byte
//! Ethernet). The TCP exchange is `ibv_rc_pingpong`'s (`"LID:QPN:PSN:GID"`
//! in 52 bytes each way, then `"done"`); datagrams carry QKey `0x11111111`.
//! The client sends first; each side sends its next datagram once the
//! previous one was sent and one arrived, `-n` times; both print the same
//! summary lines as the C program.
//!
//! Written against `rdma-safe`'s [`DatagramEndpoint`]: its receive ring is
//! posted before the address exchange (as the C program posts `-r`
//! receives), the 40-byte GRH in front of every datagram is removed by the
//! endpoint, and every datagram must be exactly `-s` bytes of the C
//! program's fill byte `0x7b`. Not supported: `-e` (completion events),
//! `-l` (service level) and `-c` (validation); clap refuses them.

use clap::Parser;
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Link};
use rdma_examples::pingpong::{Dest, DONE, MSG_LEN};
use rdma_examples::{cli, device, Result};
use rdma_safe::{DatagramAddress, DatagramEndpoint, Gid};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The QKey both programs use.
const QKEY: u32 = 0x1111_1111;
/// What the C program fills its buffer with.
const FILL: u8 = 0x7b;

/// Ping-pong over unreliable datagrams, wire-compatible with rdma-core's
/// ibv_ud_pingpong; the options are the C program's.
#[derive(Debug, Parser)]
#[command(
    name = "ud_pingpong",
    override_usage = "ud_pingpong [options]          start a server and wait for connection\n       \
                      ud_pingpong [options] <host>   connect to server at <host>"
)]
struct Options {
    #[arg(help = "listen on/connect to port <port> (default 18515)", short = 'p', long = "port", value_name = "port", hide_default_value = true, default_value = "18515",
          value_parser = cli::number::<u16>(Limit::new("-p/--port", 1, 65535)))]
    port: u16,
    #[arg(
        help = "use IB device <dev> (default first device found)",
        short = 'd',
        long = "ib-dev",
        value_name = "dev"
    )]
    ib_dev: Option<String>,
    #[arg(help = "use port <port> of IB device (default 1)", short = 'i', long = "ib-port", value_name = "port", hide_default_value = true, default_value = "1",
          value_parser = cli::number::<u8>(Limit::new("-i/--ib-port", 1, 255)))]
    ib_port: u8,
    /// size of message to exchange (default 2048; at most the port's MTU)
    #[arg(short = 's', long = "size", value_name = "size", hide_default_value = true, default_value = "2048",
          value_parser = cli::number::<usize>(Limit::new("-s/--size", 1, 1 << 20)))]
    size: usize,
    /// accepted for compatibility: the endpoint keeps its own receive ring
    #[arg(short = 'r', long = "rx-depth", value_name = "dep", hide_default_value = true, default_value = "500",
          value_parser = cli::number::<usize>(Limit::new("-r/--rx-depth", 1, 1 << 20)))]
    rx_depth: usize,
    /// number of exchanges (default 1000)
    #[arg(short = 'n', long = "iters", value_name = "iters", hide_default_value = true, default_value = "1000",
          value_parser = cli::number::<usize>(Limit::new("-n/--iters", 1, u32::MAX as u64)))]
    iters: usize,
    /// local port gid index (default: the port's RoCE v2 GID)
    #[arg(short = 'g', long = "gid-idx", value_name = "gid index",
          value_parser = cli::number::<u32>(Limit::new("-g/--gid-idx", 0, 255)))]
    gid_idx: Option<u32>,
    #[arg(long = "timeout", value_name = "seconds", hide_default_value = true, default_value = "30",
          value_parser = cli::timeout, help = cli::TIMEOUT_HELP)]
    timeout: Duration,
    /// the server to connect to (none: be the server)
    #[arg(value_name = "host")]
    server: Option<String>,
}

fn main() -> ExitCode {
    cli::finish("ud_pingpong", run(&Options::parse()))
}

fn run(o: &Options) -> Result<()> {
    let pd = device::open_checked(o.ib_dev.as_deref(), o.ib_port, o.gid_idx)?;
    let mut endpoint = DatagramEndpoint::on_port(&pd, QKEY, o.ib_port, o.gid_idx)?;
    endpoint.set_timeout(o.timeout);
    if o.size > endpoint.max_message() {
        return Err(format!(
            "Requested size larger than port MTU ({})",
            endpoint.max_message()
        )
        .into());
    }
    let local = endpoint.address();
    let me = Dest {
        lid: local.lid,
        qpn: local.qp_num,
        psn: 0,
        gid: local.gid,
    };

    // Address exchange; the receive ring is already posted.
    let remote = match &o.server {
        Some(host) => {
            println!("  local address:  {}", me.describe());
            let s = net::connect(host, o.port, net::CONNECT_RETRY, o.timeout)?;
            let mut link = Link::new(s, o.timeout)?;
            link.write_all(&me.to_wire())?;
            let mut msg = [0u8; MSG_LEN];
            link.read_exact(&mut msg, "the server's address")
                .map_err(|e| format!("Couldn't read remote address: {e}"))?;
            link.write_all(DONE)?;
            Dest::from_wire(&msg)?
        }
        None => {
            let listener = net::listen(o.port)
                .map_err(|e| format!("Couldn't listen to port {}: {e}", o.port))?;
            println!("  local address:  {}", me.describe());
            let (s, _) = listener.accept()?;
            drop(listener);
            let mut link = Link::new(s, o.timeout)?;
            let mut msg = [0u8; MSG_LEN];
            link.read_exact(&mut msg, "the client's address")
                .map_err(|e| format!("Couldn't read remote address: {e}"))?;
            let remote = Dest::from_wire(&msg)?;
            link.write_all(&me.to_wire())?;
            let mut done = [0u8; DONE.len()];
            link.read_exact(&mut done, "\"done\"")
                .map_err(|e| format!("Couldn't send/recv local address: {e}"))?;
            remote
        }
    };
    println!("  remote address: {}", remote.describe());
    if remote.gid == Gid::default() && remote.lid == 0 {
        return Err("the peer sent neither a GID nor a LID (give it -g)".into());
    }
    let peer = endpoint.peer(&DatagramAddress {
        gid: remote.gid,
        lid: remote.lid,
        qp_num: remote.qpn,
        qkey: QKEY,
    })?;

    let payload = vec![FILL; o.size];
    let mut buf = vec![0u8; o.size];
    let start = Instant::now();
    let mut sent = 0;
    if o.server.is_some() {
        endpoint.send_to(&peer, &payload)?;
        sent += 1;
    }
    for received in 0..o.iters {
        let got = endpoint.receive(&mut buf)?;
        if got.len() != o.size {
            return Err(format!(
                "datagram {received} has {} bytes, expected {} (same -s on both sides?)",
                got.len(),
                o.size
            )
            .into());
        }
        if let Some(i) = buf.iter().position(|&b| b != FILL) {
            return Err(format!("datagram {received}: byte {i} is {:#04x}", buf[i]).into());
        }
        if sent < o.iters {
            endpoint.send_to(&peer, &payload)?;
            sent += 1;
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = o.size as u64 * o.iters as u64 * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    );
    Ok(())
}
