//! `rc_pingpong` — ping-pong over a reliable connection, wire-compatible with
//! rdma-core's `ibv_rc_pingpong`: either side may be the C program.
//!
//! ```text
//! rc_pingpong -d rxe0 -g 1                 server: wait for a client
//! rc_pingpong -d rxe0 -g 1 10.0.2.15       client: connect to the server
//! ```
//!
//! Same options as the C program (`-p -d -i -s -m -r -n -l -e -g -o -O -P
//! -t -c -j -N`), same TCP exchange and same output. `-N` posts the sends
//! through the extended QP API (`ibv_wr_*`) of rdma-core directly
//! ([`new_send`]: rdma-safe's engine has no extended QP). `-o -O -P -t -j`
//! (on-demand paging, completion timestamps, device memory) are checked
//! against the device's extended attributes and end the run with
//! "`<flag>`: not supported by this device (…)" where it lacks them (rxe
//! lacks all three), or with an error saying this program does not
//! implement them where it has them. Two flags of our own set the RC
//! retry budget: `--retry-count N` (transport retries, default 7 as in the
//! C program, which rxe takes as "forever") and `--ack-timeout N` (4.096 µs
//! · 2^N, default 14); with `--retry-count 6` a dead path fails the send
//! with "transport retry counter exceeded" in about half a second. The
//! exchange:
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
//! end up echoing); with `-c` an invalid page makes the server exit 1;
//! the queue pair lingers a second after the last exchange, so that the
//! peer's retransmission of a message whose acknowledgement was lost is
//! still acknowledged (the C program's peer can wait out its timeout).

use clap::Parser;
use rdma_core::{LinkLayer, Mtu, WcStatus};
use rdma_examples::fail;
use rdma_examples::flags::PingpongFlags;
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Link};
use rdma_examples::pingpong::{Dest, DONE, MSG_LEN};
use rdma_examples::support::{self, Feature};
use rdma_examples::{cli, device, page_size, Result};
use rdma_safe::{
    channel::ConnectOptions, channel::Endpoint, channel::Gid, Error, ReceiveWorkRequest,
    RegisteredBuffer, SendWorkRequest,
};
use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::Instant;

mod new_send;

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
    #[command(flatten)]
    common: PingpongFlags,
    /// size of message to exchange (default 4096)
    #[arg(short = 's', long = "size", value_name = "size", hide_default_value = true, default_value = "4096",
          value_parser = cli::number::<usize>(SIZE))]
    size: usize,
    /// path MTU (default 1024)
    #[arg(short = 'm', long = "mtu", value_name = "size", hide_default_value = true, default_value = "1024",
          value_parser = mtu)]
    mtu: Mtu,
    /// use on demand paging (refused where the device lacks it)
    #[arg(short = 'o', long = "odp")]
    odp: bool,
    /// use implicit on demand paging (refused where the device lacks it)
    #[arg(short = 'O', long = "iodp")]
    iodp: bool,
    /// prefetch an ODP MR (with -o or -O)
    #[arg(short = 'P', long = "prefetch")]
    prefetch: bool,
    /// get CQE with timestamp (refused where the device lacks it)
    #[arg(short = 't', long = "ts")]
    ts: bool,
    /// use device memory (refused where the device lacks it)
    #[arg(short = 'j', long = "dm")]
    dm: bool,
    /// use new post send WR API (ibv_wr_*, through rdma-core's extended QP)
    #[arg(short = 'N', long = "new_send", alias = "new-send")]
    new_send: bool,
    /// transport retries before a send fails with "retry counter exceeded"
    /// (not a C flag; default 7, the C program's: rxe retries forever then)
    #[arg(long = "retry-count", value_name = "n", hide_default_value = true, default_value = "7",
          value_parser = cli::number::<u8>(Limit::new("--retry-count", 0, 7)))]
    retry_count: u8,
    /// local ACK timeout exponent, 4.096 us * 2^n (not a C flag; default 14)
    #[arg(long = "ack-timeout", value_name = "n", hide_default_value = true, default_value = "14",
          value_parser = cli::number::<u8>(Limit::new("--ack-timeout", 1, 31)))]
    ack_timeout: u8,
}

fn mtu(text: &str) -> Result<Mtu, String> {
    let bytes = Limit::new("-m/--mtu", 256, 4096).parse(text)?;
    Mtu::from_bytes(bytes as u32).ok_or_else(|| format!("-m/--mtu: {bytes} is not an IB MTU"))
}

fn main() -> ExitCode {
    cli::finish("rc_pingpong", run(&Options::parse()))
}

/// The optional features `-o -O -P -t -j` ask for, checked against the
/// device before anything else is set up.
fn check_features(o: &Options, ctx: &rdma_core::Context) -> Result<()> {
    if o.prefetch && !(o.odp || o.iodp) {
        return Err(fail(
            "-P/--prefetch: valid only with on-demand paging (-o or -O)",
        ));
    }
    if o.iodp {
        support::require(ctx, "-O/--iodp", Feature::ImplicitOdp).map_err(fail)?;
    } else if o.odp {
        support::require(ctx, "-o/--odp", Feature::Odp).map_err(fail)?;
    }
    if o.ts {
        support::require(ctx, "-t/--ts", Feature::CompletionTimestamps).map_err(fail)?;
    }
    if o.dm {
        let bytes = o.size as u64;
        support::require(ctx, "-j/--dm", Feature::DeviceMemory { bytes }).map_err(fail)?;
    }
    Ok(())
}

fn run(o: &Options) -> Result<()> {
    let c = &o.common;
    let pd = device::open_checked(c.ib_dev(), c.ib_port(), c.gid_idx())?;
    check_features(o, pd.context())?;
    if o.new_send {
        return new_send::run(o, &pd);
    }
    let port_attr = pd.context().query_port(c.ib_port())?;
    let roce = port_attr.link_layer() == LinkLayer::Ethernet;
    let rx_depth = c.rx_depth as usize;

    // The C program's queue pair: one send, rx_depth receives, one SGE each,
    // a CQ of rx_depth + 1 entries shared by both queues.
    let mut builder = pd
        .channel_builder()
        .port(c.ib_port())
        .send_depth(1)
        .recv_depth(c.rx_depth)
        .max_send_sge(1)
        .max_recv_sge(1)
        .cq_size(c.rx_depth + 1)
        .mtu(o.mtu)
        .timeout(c.timeout())
        .completion_events(c.events);
    if let Some(g) = c.gid_idx() {
        builder = builder.gid_index(g);
    }
    let mut channel = builder.build()?;
    let local = channel.local_endpoint();
    if !roce && local.lid == 0 {
        return Err(fail("Couldn't get local LID"));
    }
    let me = Dest {
        lid: local.lid,
        qpn: local.qp_num,
        psn: local.psn,
        // Like the C program: a GID only with -g (on InfiniBand), since the
        // peer then addresses us through a GRH with its own -g index.
        gid: if c.gid_idx().is_some() || roce {
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
        .map_err(|e| fail(format!("two message buffers of -s {} bytes: {e}", o.size)))?;
    let (mr, buf) = buf.split_mut();
    let (rx, tx) = buf.split_at_mut(slot);
    let (rx, tx) = (&mut rx[..o.size], &mut tx[..o.size]);
    fill_payload(tx, c.chk);

    // Address exchange. The server answers once its receives are posted.
    let (mut link, remote) = exchange(c, &me)?;
    // The C program's connection attributes: SL from -l, hop limit 1, one
    // outstanding RDMA read each way, timeout 14, 7 retries (both changed
    // by our --ack-timeout and --retry-count), RNR timer 12.
    let attrs = ConnectOptions {
        service_level: c.sl,
        timeout: o.ack_timeout,
        retry_count: o.retry_count,
        rnr_retry: 7,
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
                port: c.ib_port(),
                lid: remote.lid,
                gid: remote.gid,
                gid_index: 0, // the peer's index; not needed to reach it
                mtu: o.mtu,
            },
            &attrs,
        )
        .map_err(|e| fail(format!("Couldn't connect to remote QP: {e}")))?;

    let is_client = c.is_client();
    let (iters, size) = (c.iters, o.size);
    let elapsed = channel
        .scope(|s| -> Result<_> {
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
                    let h = recvs.pop_front().ok_or_else(|| fail("no receive posted"))?;
                    let got = h.wait().map_err(|e| size_hint(e, size))?;
                    if got.bytes() != size {
                        return Err(fail(format!(
                            "message {rcnt} has {} bytes, expected {size} (same -s on both sides?)",
                            got.bytes()
                        )));
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
        })
        .map_err(rdma_safe::Error::from)?;

    report(size, iters, elapsed);
    if c.chk && !is_client {
        check_pages(rx)?;
    }
    // Linger before the queue pair goes: the peer's last message arrived,
    // but our acknowledgement of it may have been lost, and the peer's
    // send completes only when a retransmission is acknowledged. A queue
    // pair destroyed at once leaves it retrying into nothing until its
    // timeout (seen with 20% loss across two hosts). As TCP's TIME_WAIT.
    std::thread::sleep(LINGER);
    Ok(())
}

/// How long the queue pair outlives the last exchange: about fifteen
/// retransmissions at the C program's ACK timeout (67 ms).
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// Prints the C program's two summary lines.
fn report(size: usize, iters: usize, elapsed: std::time::Duration) {
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
}

/// The payload this side sends: the C program's fill byte and, with `-c`,
/// a zero at every page start. (The C client zeroes those bytes and the C
/// programs send back what they received, so the zeroes travel both ways;
/// our side sends a constant buffer, so it zeroes them in either role.)
fn fill_payload(tx: &mut [u8], chk: bool) {
    tx.fill(0x7b);
    if chk {
        for i in (0..tx.len()).step_by(page_size()) {
            tx[i] = 0;
        }
    }
}

/// `-c` on the server: the first byte of every page of the last message
/// must be zero; `invalid data in page N` for each that is not.
fn check_pages(rx: &[u8]) -> Result<()> {
    let page = page_size();
    let mut bad = false;
    for i in (0..rx.len()).step_by(page) {
        if rx[i] != 0 {
            println!("invalid data in page {}", i / page);
            bad = true;
        }
    }
    if bad {
        return Err(fail("received buffer failed validation (-c)"));
    }
    Ok(())
}

/// The first half of the address exchange. The client sends its address,
/// reads the server's and says "done": `(None, server)`. The server listens
/// (before printing, so a script that waits for the first line knows the
/// port is open) and reads the client's address: `(Some(link), client)`;
/// it answers with [`finish_server_exchange`] once its receives are posted.
fn exchange(c: &PingpongFlags, me: &Dest) -> Result<(Option<Link>, Dest)> {
    match &c.server {
        Some(host) => {
            println!("  local address:  {}", me.describe());
            let s = net::connect(host, c.port, net::CONNECT_RETRY, c.timeout())?;
            let mut link = Link::new(s, c.timeout())?;
            link.write_all(&me.to_wire())?;
            let mut msg = [0u8; MSG_LEN];
            link.read_exact(&mut msg, "the server's address")
                .map_err(|e| fail(format!("Couldn't read remote address: {e}")))?;
            link.write_all(DONE)?;
            Ok((None, Dest::from_wire(&msg).map_err(fail)?))
        }
        None => {
            let listener = net::listen(c.port)
                .map_err(|e| fail(format!("Couldn't listen to port {}: {e}", c.port)))?;
            println!("  local address:  {}", me.describe());
            let (s, _) = listener.accept()?;
            drop(listener);
            let mut link = Link::new(s, c.timeout())?;
            let mut msg = [0u8; MSG_LEN];
            link.read_exact(&mut msg, "the client's address")
                .map_err(|e| fail(format!("Couldn't read remote address: {e}")))?;
            Ok((Some(link), Dest::from_wire(&msg).map_err(fail)?))
        }
    }
}

/// The server's half after connecting: send our address, read "done".
fn finish_server_exchange(link: &mut Link, me: &Dest) -> Result<()> {
    link.write_all(&me.to_wire())?;
    let mut done = [0u8; DONE.len()];
    link.read_exact(&mut done, "the client's \"done\"")
        .map_err(|e| fail(format!("Couldn't send/recv local address: {e}")))?;
    if &done != DONE {
        return Err(fail(format!(
            "expected \"done\" from the client, got {done:?}"
        )));
    }
    Ok(())
}

/// A failed send or receive, with the likely cause when the statuses say
/// the two sides' message sizes differ. A message longer than the receive
/// buffer is a local length error by the verbs specification and a local
/// QP operation error on rxe; the sender sees a remote invalid request or
/// remote operation error.
fn size_hint(e: Error, size: usize) -> rdma_safe::Error {
    let hint = match e.status() {
        Some(WcStatus::LocalLengthError | WcStatus::LocalQpOperationError) => {
            format!("a message longer than -s {size} bytes arrived")
        }
        Some(WcStatus::RemoteInvalidRequestError | WcStatus::RemoteOperationError) => {
            format!("the peer's receive buffer is smaller than -s {size} bytes")
        }
        _ => return e,
    };
    fail(format!("{e} ({hint}: same -s on both sides?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_every_flag_of_ibv_rc_pingpong() {
        let o = Options::try_parse_from([
            "rc_pingpong",
            "-p",
            "19000",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-s",
            "100",
            "-m",
            "512",
            "-r",
            "8",
            "-n",
            "10",
            "-l",
            "1",
            "-e",
            "-g",
            "1",
            "-o",
            "-O",
            "-P",
            "-t",
            "-c",
            "-j",
            "-N",
            "host",
        ])
        .unwrap();
        assert_eq!((o.size, o.mtu), (100, Mtu::Mtu512));
        assert!(o.odp && o.iodp && o.prefetch && o.ts && o.dm && o.new_send);
        assert!(o.common.events && o.common.chk && o.common.is_client());
        let long = Options::try_parse_from([
            "rc_pingpong",
            "--odp",
            "--iodp",
            "--prefetch",
            "--ts",
            "--dm",
            "--new_send",
        ])
        .unwrap();
        assert!(long.odp && long.iodp && long.prefetch && long.ts && long.dm && long.new_send);
        let d = Options::try_parse_from(["rc_pingpong"]).unwrap();
        assert_eq!(
            (d.size, d.mtu, d.common.rx_depth),
            (4096, Mtu::Mtu1024, 500)
        );
        assert!(!(d.odp || d.iodp || d.prefetch || d.ts || d.dm || d.new_send));
        assert!(Options::try_parse_from(["rc_pingpong", "-m", "1000"]).is_err());
    }
}
