//! `ud_pingpong` — ping-pong over unreliable datagrams, wire-compatible with
//! rdma-core's `ibv_ud_pingpong`: either side may be the C program.
//!
//! ```text
//! ud_pingpong -d rxe0 -g 1 -s 1000              server: wait for a client
//! ud_pingpong -d rxe0 -g 1 -s 1000 10.0.2.15    client: send first
//! ```
//!
//! Options `-p -d -i -s -r -n -g` as the C program (`-s` defaults to 2048 as
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
//! `-l` other than 0 and `-c`; they are refused.

use rdma_examples::args::{self, Opt};
use rdma_examples::pingpong::{Dest, DONE, MSG_LEN};
use rdma_examples::{net, open_pd, Result};
use rdma_safe::{DatagramAddress, DatagramEndpoint, Gid};
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

/// The QKey both programs use.
const QKEY: u32 = 0x1111_1111;
/// What the C program fills its buffer with.
const FILL: u8 = 0x7b;

const OPTS: &[Opt] = &[
    Opt::value(
        Some('p'),
        "port",
        "port",
        "listen on/connect to port <port> (default 18515)",
    ),
    Opt::value(
        Some('d'),
        "ib-dev",
        "dev",
        "use IB device <dev> (default first device found)",
    ),
    Opt::value(
        Some('i'),
        "ib-port",
        "port",
        "use port <port> of IB device (default 1)",
    ),
    Opt::value(
        Some('s'),
        "size",
        "size",
        "size of message to exchange (default 2048)",
    ),
    Opt::value(
        Some('r'),
        "rx-depth",
        "dep",
        "accepted for compatibility (the ring is fixed)",
    ),
    Opt::value(
        Some('n'),
        "iters",
        "iters",
        "number of exchanges (default 1000)",
    ),
    Opt::value(Some('l'), "sl", "sl", "service level value (only 0)"),
    Opt::flag(Some('e'), "events", "sleep on CQ events (not supported)"),
    Opt::value(Some('g'), "gid-idx", "gid index", "local port gid index"),
    Opt::flag(Some('c'), "chk", "validate received buffer (not supported)"),
    Opt::flag(Some('h'), "help", "show this help"),
];

const SYNOPSIS: &str = "\
Usage:
  ud_pingpong            start a server and wait for connection
  ud_pingpong <host>     connect to server at <host>";

#[derive(Debug)]
struct Options {
    port: u16,
    ib_dev: Option<String>,
    ib_port: u8,
    size: usize,
    iters: usize,
    gid_idx: Option<u32>,
    server: Option<String>,
}

fn options(m: &args::Matches) -> Result<Options, args::ArgError> {
    if m.positionals.len() > 1 {
        return Err(args::ArgError("more than one server name given".into()));
    }
    for (flag, set) in [("events", m.flag("events")), ("chk", m.flag("chk"))] {
        if set {
            return Err(args::ArgError(format!("--{flag} is not supported")));
        }
    }
    if m.uint_in("sl", 0, 0, 0).is_err() {
        return Err(args::ArgError(
            "--sl: only service level 0 is supported".into(),
        ));
    }
    m.uint_in("rx-depth", 500, 1, 1 << 20)?;
    Ok(Options {
        port: m.uint_in("port", 18515, 1, 65535)? as u16,
        ib_dev: m.value("ib-dev").map(str::to_owned),
        ib_port: m.uint_in("ib-port", 1, 1, 255)? as u8,
        size: m.uint_in("size", 2048, 1, 1 << 20)? as usize,
        iters: m.uint_in("iters", 1000, 1, u32::MAX.into())? as usize,
        gid_idx: m.uint("gid-idx")?.map(|g| g as u32),
        server: m.positionals.first().cloned(),
    })
}

fn main() -> ExitCode {
    let m = match args::parse(OPTS, std::env::args().skip(1)) {
        Ok(m) if m.flag("help") => {
            print!("{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::SUCCESS;
        }
        Ok(m) => m,
        Err(e) => {
            eprintln!("ud_pingpong: {e}\n\n{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::from(2);
        }
    };
    let opts = match options(&m) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ud_pingpong: {e}\n\n{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ud_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Options) -> Result<()> {
    let pd = open_pd(o.ib_dev.as_deref())?;
    let mut endpoint = DatagramEndpoint::on_port(&pd, QKEY, o.ib_port, o.gid_idx)?;
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
            let mut s = net::connect(host, o.port, net::CONNECT_RETRY)?;
            s.write_all(&me.to_wire())?;
            let mut msg = [0u8; MSG_LEN];
            s.read_exact(&mut msg)
                .map_err(|e| format!("Couldn't read remote address: {e}"))?;
            s.write_all(DONE)?;
            Dest::from_wire(&msg)?
        }
        None => {
            let listener = net::listen(o.port)
                .map_err(|e| format!("Couldn't listen to port {}: {e}", o.port))?;
            println!("  local address:  {}", me.describe());
            let (mut s, _) = listener.accept()?;
            drop(listener);
            let mut msg = [0u8; MSG_LEN];
            s.read_exact(&mut msg)
                .map_err(|e| format!("Couldn't read remote address: {e}"))?;
            let remote = Dest::from_wire(&msg)?;
            s.write_all(&me.to_wire())?;
            let mut done = [0u8; DONE.len()];
            s.read_exact(&mut done)
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
