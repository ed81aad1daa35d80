//! `rc_pingpong` — ping-pong over a reliable connection, wire-compatible with
//! rdma-core's `ibv_rc_pingpong`: either side may be the C program.
//!
//! ```text
//! rc_pingpong -d rxe0 -g 1                 server: wait for a client
//! rc_pingpong -d rxe0 -g 1 10.0.2.15       client: connect to the server
//! ```
//!
//! Same options as the C program (`-p -d -i -s -m -r -n -l -e -g -c`), same
//! TCP exchange and same output:
//!
//! 1. Both sides post their receives, then exchange addresses over TCP
//!    (port 18515): the client sends `"LID:QPN:PSN:GID"` (`%04x:%06x:%06x:`
//!    and 32 hex digits, in a NUL-padded 52-byte buffer); the server connects
//!    its queue pair, answers with its own address; the client replies
//!    `"done"` (5 bytes with the NUL) and connects.
//! 2. The client sends first; each side sends its next message once its
//!    previous send completed and a message arrived, `-n` times.
//! 3. Both print `N bytes in S seconds = X Mbit/sec` and
//!    `N iters in S seconds = U usec/iter`.
//!
//! Written against `rdma-safe`: one polling scope holds up to `-r` receives
//! posted into one buffer (the same `ScatterElement` reused for every post,
//! as the C program reuses its buffer) and the send, and reposts receives
//! as they complete. Differences from the C program: without `-g`, on RoCE
//! the port's RoCE v2 GID is used (the C program sends a zero GID and cannot
//! connect on RoCE then); only as many receives are posted as messages will
//! arrive (so the scope ends without leftovers); every received message must
//! be exactly `-s` bytes; the C programs send back the message they
//! received, this one sends a constant buffer (with `-c`, one whose
//! page-start bytes are zero in both roles, which is what the C programs
//! end up echoing); with `-c` an invalid page makes the server exit 1.

use clap::Parser;
use rdma_core::{LinkLayer, Mtu, WcStatus};
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Link};
use rdma_examples::pingpong::{Dest, DONE, MSG_LEN};
use rdma_examples::{cli, device, flatten_scope, BoxError, Result};
use rdma_safe::{
    ConnectOptions, Endpoint, Gid, ReceiveWorkRequest, RegisteredBuffer, SendWorkRequest,
    TransportError,
};
use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Largest `-s`: two buffers of it are allocated and registered.
const SIZE: Limit = Limit::new("-s/--size", 0, 1 << 30);

/// Ping-pong over a reliable connection, wire-compatible with rdma-core's
/// ibv_rc_pingpong; the options are the C program's.
#[derive(Debug, Parser)]
#[command(
    name = "rc_pingpong",
    override_usage = "rc_pingpong [options]          start a server and wait for connection\n       \
                      rc_pingpong [options] <host>   connect to server at <host>"
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
    /// size of message to exchange (default 4096)
    #[arg(short = 's', long = "size", value_name = "size", hide_default_value = true, default_value = "4096",
          value_parser = cli::number::<usize>(SIZE))]
    size: usize,
    /// path MTU (default 1024)
    #[arg(short = 'm', long = "mtu", value_name = "size", hide_default_value = true, default_value = "1024",
          value_parser = mtu)]
    mtu: Mtu,
    /// number of receives to post at a time (default 500)
    #[arg(short = 'r', long = "rx-depth", value_name = "dep", hide_default_value = true, default_value = "500",
          value_parser = cli::number::<usize>(Limit::new("-r/--rx-depth", 1, 1 << 20)))]
    rx_depth: usize,
    /// number of exchanges (default 1000)
    #[arg(short = 'n', long = "iters", value_name = "iters", hide_default_value = true, default_value = "1000",
          value_parser = cli::number::<usize>(Limit::new("-n/--iters", 1, u32::MAX as u64)))]
    iters: usize,
    /// service level value (default 0)
    #[arg(short = 'l', long = "sl", value_name = "sl", hide_default_value = true, default_value = "0",
          value_parser = cli::number::<u8>(Limit::new("-l/--sl", 0, 15)))]
    sl: u8,
    /// sleep on CQ events (default poll)
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// local port gid index (default: RoCE v2 GID on RoCE, none on IB)
    #[arg(short = 'g', long = "gid-idx", value_name = "gid index",
          value_parser = cli::number::<u32>(Limit::new("-g/--gid-idx", 0, 255)))]
    gid_idx: Option<u32>,
    /// validate received buffer
    #[arg(short = 'c', long = "chk")]
    chk: bool,
    #[arg(long = "timeout", value_name = "seconds", hide_default_value = true, default_value = "30",
          value_parser = cli::timeout, help = cli::TIMEOUT_HELP)]
    timeout: Duration,
    /// the server to connect to (none: be the server)
    #[arg(value_name = "host")]
    server: Option<String>,
}

fn mtu(text: &str) -> Result<Mtu, String> {
    let bytes = Limit::new("-m/--mtu", 256, 4096).parse(text)?;
    Mtu::from_bytes(bytes as u32).ok_or_else(|| format!("-m/--mtu: {bytes} is not an IB MTU"))
}

fn main() -> ExitCode {
    cli::finish("rc_pingpong", run(&Options::parse()))
}

fn run(o: &Options) -> Result<()> {
    let pd = device::open_checked(o.ib_dev.as_deref(), o.ib_port, o.gid_idx)?;
    let port_attr = pd.context().query_port(o.ib_port)?;
    let roce = port_attr.link_layer() == LinkLayer::Ethernet;

    // The C program's queue pair: one send, rx_depth receives, one SGE each,
    // a CQ of rx_depth + 1 entries shared by both queues.
    let mut builder = pd
        .channel_builder()
        .port(o.ib_port)
        .send_depth(1)
        .recv_depth(o.rx_depth as u32)
        .max_send_sge(1)
        .max_recv_sge(1)
        .cq_size(o.rx_depth as u32 + 1)
        .mtu(o.mtu)
        .timeout(o.timeout)
        .completion_events(o.events);
    if let Some(g) = o.gid_idx {
        builder = builder.gid_index(g);
    }
    let mut channel = builder.build()?;
    let local = channel.local_endpoint();
    if !roce && local.lid == 0 {
        return Err("Couldn't get local LID".into());
    }
    let me = Dest {
        lid: local.lid,
        qpn: local.qp_num,
        psn: local.psn,
        // Like the C program: a GID only with -g (on InfiniBand), since the
        // peer then addresses us through a GRH with its own -g index.
        gid: if o.gid_idx.is_some() || roce {
            local.gid
        } else {
            Gid::default()
        },
    };

    // One registration, two halves: receives land in `rx`, sends come from
    // `tx` (the C program uses one buffer for both; Rust's borrows want
    // the NIC's writes and reads apart).
    let slot = o.size.max(1);
    let mut buf = RegisteredBuffer::new(&pd, 2 * slot)
        .map_err(|e| format!("two message buffers of -s {} bytes: {e}", o.size))?;
    let (mr, buf) = buf.split_mut();
    let (rx, tx) = buf.split_at_mut(slot);
    let (rx, tx) = (&mut rx[..o.size], &mut tx[..o.size]);
    tx.fill(0x7b);
    let page = page_size();
    // -c: the C client zeroes the first byte of every page, and the C
    // programs send back what they received, so the zeroes travel both ways.
    // Our side sends a constant buffer: zero those bytes in either role.
    if o.chk {
        for i in (0..o.size).step_by(page) {
            tx[i] = 0;
        }
    }

    // Address exchange. The server listens before printing, so a script
    // that waits for the first line knows the port is open.
    let (mut link, remote) = match &o.server {
        Some(host) => {
            println!("  local address:  {}", me.describe());
            let s = net::connect(host, o.port, net::CONNECT_RETRY, o.timeout)?;
            let mut link = Link::new(s, o.timeout)?;
            link.write_all(&me.to_wire())?;
            let mut msg = [0u8; MSG_LEN];
            link.read_exact(&mut msg, "the server's address")
                .map_err(|e| format!("Couldn't read remote address: {e}"))?;
            link.write_all(DONE)?;
            (None, Dest::from_wire(&msg)?)
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
            (Some(link), Dest::from_wire(&msg)?)
        }
    };
    // The C program's connection attributes: SL from -l, hop limit 1, one
    // outstanding RDMA read each way, timeout 14, 7 retries, RNR timer 12.
    let attrs = ConnectOptions {
        service_level: o.sl,
        hop_limit: 1,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        path_mtu: Some(o.mtu),
        ..ConnectOptions::default()
    };
    channel
        .connect_with(
            &Endpoint {
                qp_num: remote.qpn,
                psn: remote.psn,
                port: o.ib_port,
                lid: remote.lid,
                gid: remote.gid,
                gid_index: 0, // the peer's index; not needed to reach it
                mtu: o.mtu,
            },
            &attrs,
        )
        .map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;

    let is_client = o.server.is_some();
    let (iters, size, rx_depth) = (o.iters, o.size, o.rx_depth);
    let elapsed = flatten_scope(channel.scope(|s| -> Result<_, BoxError> {
        // A failed check ends the run at once: the receives still posted are
        // flushed instead of waited for.
        s.cancel_on_error();
        let mut rx_sge = [mr.scatter_element(rx)];
        let tx_sge = [mr.gather_element(tx)];
        // Receives complete in the order they were posted.
        let mut recvs = VecDeque::with_capacity(rx_depth.min(iters));
        let mut recv_posted = 0;
        while recv_posted < rx_depth.min(iters) {
            recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut rx_sge))?);
            recv_posted += 1;
        }
        // The server answers only now that its receives are posted; the
        // client sends only after reading this answer.
        if let Some(link) = link.as_mut() {
            finish_server_exchange(link, &me)?;
        }
        println!("  remote address: {}", remote.describe());

        let mut send = if is_client {
            Some(s.post_send(SendWorkRequest::new(&tx_sge))?)
        } else {
            None
        };
        let start = Instant::now();
        let (mut scnt, mut rcnt) = (0, 0);
        loop {
            if let Some(h) = send.take() {
                h.wait().map_err(|e| size_hint(e, size))?;
                scnt += 1;
            }
            if rcnt < iters {
                let h = recvs.pop_front().ok_or("no receive posted")?;
                let got = h.wait().map_err(|e| size_hint(e, size))?;
                if got.bytes() != size {
                    return Err(format!(
                        "message {rcnt} has {} bytes, expected {size} (same -s on both sides?)",
                        got.bytes()
                    )
                    .into());
                }
                rcnt += 1;
                if recv_posted < iters {
                    recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut rx_sge))?);
                    recv_posted += 1;
                }
            }
            if scnt < iters {
                send = Some(s.post_send(SendWorkRequest::new(&tx_sge))?);
            } else if rcnt >= iters {
                break;
            }
        }
        Ok(start.elapsed())
    }))?;

    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = size as u64 * iters as u64 * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );

    if o.chk && !is_client {
        let mut bad = false;
        for i in (0..size).step_by(page) {
            if rx[i] != 0 {
                println!("invalid data in page {}", i / page);
                bad = true;
            }
        }
        if bad {
            return Err("received buffer failed validation (-c)".into());
        }
    }
    Ok(())
}

/// The server's half after connecting: send our address, read "done".
fn finish_server_exchange(link: &mut Link, me: &Dest) -> Result<()> {
    link.write_all(&me.to_wire())?;
    let mut done = [0u8; DONE.len()];
    link.read_exact(&mut done, "the client's \"done\"")
        .map_err(|e| format!("Couldn't send/recv local address: {e}"))?;
    if &done != DONE {
        return Err(format!("expected \"done\" from the client, got {done:?}").into());
    }
    Ok(())
}

/// A failed send or receive, with the likely cause when the statuses say
/// the two sides' message sizes differ. A message longer than the receive
/// buffer is a local length error by the verbs specification and a local
/// QP operation error on rxe; the sender sees a remote invalid request or
/// remote operation error.
fn size_hint(e: TransportError, size: usize) -> BoxError {
    let hint = match e.status() {
        Some(WcStatus::LocalLengthError | WcStatus::LocalQpOperationError) => {
            format!("a message longer than -s {size} bytes arrived")
        }
        Some(WcStatus::RemoteInvalidRequestError | WcStatus::RemoteOperationError) => {
            format!("the peer's receive buffer is smaller than -s {size} bytes")
        }
        _ => return e.into(),
    };
    format!("{e} ({hint}: same -s on both sides?)").into()
}

/// The page size `-c` validates by (as the C program: the first byte of
/// every page).
fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions; it only reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}
