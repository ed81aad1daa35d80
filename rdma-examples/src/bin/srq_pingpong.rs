//! `srq_pingpong` — ping-pong over several reliable connections that share
//! one receive queue, wire-compatible with rdma-core's `ibv_srq_pingpong`:
//! either side may be the C program.
//!
//! ```text
//! srq_pingpong -d rxe0 -g 1                 server: wait for a client
//! srq_pingpong -d rxe0 -g 1 10.0.2.15       client: send first
//! ```
//!
//! Options `-p -d -i -s -m -q -r -n -l -e -g -o -c` as the C program
//! (and `--timeout`). The TCP exchange is the C program's: each side writes 256
//! address messages of 52 bytes (`"LID:QPN:PSN:GID"`, one per possible
//! queue pair; those past `-q` are all zero), the server connects after
//! reading the client's and answers with its own, and the client ends with
//! `"done"`. The client sends first on every connection; after that a side
//! sends on a connection once a message arrived on it, until `-n` messages
//! went each way in total; both print the C program's summary lines.
//!
//! Written against `rdma-safe`: `-q` channels built on one
//! [`SharedReceiveQueue`] of `-r` slots of `-s` bytes, which the receive
//! loop refills in batches; sends are blocking. Every message must be `-s`
//! bytes of zeros (the C program's buffer starts zeroed and echoes what it
//! receives). The C program may post a few sends past `-n` (it counts
//! completions, not posts); after its loop this side keeps its connections
//! up for a moment and takes what still arrives, so those sends complete.
//! `-e` sleeps on completion events (the receive queue's and the sends');
//! `-c` also checks, as the C server, the first byte of every page of the
//! last message and prints `invalid data in page N` (then exits 1); `-o`
//! (on-demand paging) ends the run with "not supported by this device"
//! where the device's ODP caps lack it, and with an error saying this
//! program does not implement it where they have it.

use clap::Parser;
use rdma_core::Mtu;
use rdma_examples::fail;
use rdma_examples::flags::PingpongFlags;
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Link};
use rdma_examples::pingpong::{Dest, DONE, MSG_LEN};
use rdma_examples::support::{self, Feature};
use rdma_examples::{cli, device, page_size, Result};
use rdma_safe::{
    channel::ConnectOptions, channel::Endpoint, Channel, RegisteredBuffer, SendWorkRequest,
    SharedReceiveQueue,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Address messages each side writes, whatever `-q` is (the C program's
/// `MAX_QP`).
const MAX_QP: usize = 256;
/// How long to keep taking messages after the loop (see the module docs).
const LINGER: Duration = Duration::from_secs(2);

/// Ping-pong over several connections sharing a receive queue,
/// wire-compatible with rdma-core's ibv_srq_pingpong.
#[derive(Debug, Parser)]
#[command(
    name = "srq_pingpong",
    override_usage = "srq_pingpong [options]          start a server and wait for connection\n       \
                      srq_pingpong [options] <host>   connect to server at <host>"
)]
struct Options {
    #[command(flatten)]
    common: PingpongFlags,
    /// size of message to exchange (default 4096)
    #[arg(short = 's', long = "size", value_name = "size", hide_default_value = true, default_value = "4096",
          value_parser = cli::number::<usize>(Limit::new("-s/--size", 1, 1 << 24)))]
    size: usize,
    /// path MTU (default 1024)
    #[arg(short = 'm', long = "mtu", value_name = "size", hide_default_value = true, default_value = "1024",
          value_parser = mtu)]
    mtu: Mtu,
    /// number of QPs to use (default 16)
    #[arg(short = 'q', long = "num-qp", value_name = "num", hide_default_value = true, default_value = "16",
          value_parser = cli::number::<usize>(Limit::new("-q/--num-qp", 1, MAX_QP as u64)))]
    num_qp: usize,
    /// use on demand paging (refused where the device lacks it)
    #[arg(short = 'o', long = "odp")]
    odp: bool,
}

fn mtu(text: &str) -> Result<Mtu, String> {
    let bytes = Limit::new("-m/--mtu", 256, 4096).parse(text)?;
    Mtu::from_bytes(bytes as u32).ok_or_else(|| format!("-m/--mtu: {bytes} is not an IB MTU"))
}

fn main() -> ExitCode {
    cli::finish("srq_pingpong", run(&Options::parse()))
}

fn run(o: &Options) -> Result<()> {
    let c = &o.common;
    if o.num_qp > c.rx_depth as usize {
        return Err(fail(format!(
            "rx_depth {} is too small for {} QPs -- must have at least one receive per QP.",
            c.rx_depth, o.num_qp
        )));
    }
    let pd = device::open_checked(c.ib_dev(), c.ib_port(), c.gid_idx())?;
    if o.odp {
        support::require(pd.context(), "-o/--odp", Feature::SrqOdp).map_err(fail)?;
    }
    let mut srq = if c.events {
        SharedReceiveQueue::with_completion_events(&pd, c.rx_depth, o.size)?
    } else {
        SharedReceiveQueue::new(&pd, c.rx_depth, o.size)?
    };
    srq.set_refill_batch((c.rx_depth as usize / 4).max(1));
    let mut channels = Vec::with_capacity(o.num_qp);
    for _ in 0..o.num_qp {
        let mut b = pd
            .channel_builder()
            .port(c.ib_port())
            .send_depth(1)
            .max_send_sge(1)
            .shared_receive_queue(&srq)
            .mtu(o.mtu)
            .timeout(c.timeout())
            .completion_events(c.events);
        if let Some(g) = c.gid_idx() {
            b = b.gid_index(g);
        }
        channels.push(b.build()?);
    }
    let mine: Vec<Dest> = channels
        .iter()
        .map(|c| {
            let e = c.local_endpoint();
            Dest {
                lid: e.lid,
                qpn: e.qp_num,
                psn: e.psn,
                gid: e.gid,
            }
        })
        .collect();
    let print_mine = || {
        for d in &mine {
            println!("  local address:  {}", d.describe());
        }
    };

    // The exchange: MAX_QP messages each way, then "done".
    let wire = |i: usize| mine.get(i).map_or([0u8; MSG_LEN], Dest::to_wire);
    let remote = match &c.server {
        Some(host) => {
            print_mine();
            let s = net::connect(host, c.port, net::CONNECT_RETRY, c.timeout())?;
            let mut link = Link::new(s, c.timeout())?;
            for i in 0..MAX_QP {
                link.write_all(&wire(i))?;
            }
            let remote = read_dests(&mut link, o.num_qp, "the server's addresses")?;
            link.write_all(DONE)?;
            remote
        }
        None => {
            let listener = net::listen(c.port)
                .map_err(|e| fail(format!("Couldn't listen to port {}: {e}", c.port)))?;
            // Printed once listening, so a script that waits for it knows
            // the port is open.
            print_mine();
            let (s, _) = listener.accept()?;
            drop(listener);
            let mut link = Link::new(s, c.timeout())?;
            let remote = read_dests(&mut link, o.num_qp, "the client's addresses")?;
            connect_all(&mut channels, &remote, o)?;
            for i in 0..MAX_QP {
                link.write_all(&wire(i))?;
            }
            let mut done = [0u8; DONE.len()];
            link.read_exact(&mut done, "\"done\"")
                .map_err(|e| fail(format!("Couldn't send/recv local address: {e}")))?;
            remote
        }
    };
    for d in &remote {
        println!("  remote address: {}", d.describe());
    }
    if c.is_client() {
        connect_all(&mut channels, &remote, o)?;
    }

    let tx = RegisteredBuffer::new(&pd, o.size)?;
    let mut rx = vec![0u8; o.size];
    let (mut scnt, mut rcnt) = (0, 0);
    let start = Instant::now();
    let iters = c.iters;
    if c.is_client() {
        for ch in channels.iter_mut() {
            ch.send(SendWorkRequest::new(&[tx.gather(..)]))?;
            scnt += 1;
        }
    }
    while rcnt < iters || scnt < iters {
        let got = srq
            .receive(&mut rx, c.timeout())?
            .ok_or_else(|| fail("no message arrived within the timeout"))?;
        rcnt += 1;
        if got.len() != o.size || rx.iter().any(|&b| b != 0) {
            return Err(fail(format!(
                "message {rcnt}: {} bytes, expected {} zero bytes (same -s on both sides?)",
                got.len(),
                o.size
            )));
        }
        let i = channels
            .iter()
            .position(|c| c.qp_num() == got.qp_num())
            .ok_or_else(|| fail(format!("Couldn't find QPN {:06x}", got.qp_num())))?;
        if scnt < iters {
            channels[i].send(SendWorkRequest::new(&[tx.gather(..)]))?;
            scnt += 1;
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    // Take what the peer still sends past -n, so its sends complete.
    while srq.receive(&mut rx, LINGER)?.is_some() {}

    let bytes = o.size as u64 * iters as u64 * 2;
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
    // -c: the C server's check, page by page, of the buffer the last message
    // landed in (every byte of every message was checked above already).
    if c.chk && !c.is_client() {
        let page = page_size();
        let bad: Vec<_> = (0..o.size).step_by(page).filter(|&i| rx[i] != 0).collect();
        for i in &bad {
            println!("invalid data in page {}", i / page);
        }
        if !bad.is_empty() {
            return Err(fail("received buffer failed validation (-c)"));
        }
    }
    Ok(())
}

/// Reads the peer's `MAX_QP` address messages and keeps the first `n`.
fn read_dests(link: &mut Link, n: usize, what: &str) -> Result<Vec<Dest>> {
    let mut dests = Vec::with_capacity(n);
    for i in 0..MAX_QP {
        let mut msg = [0u8; MSG_LEN];
        link.read_exact(&mut msg, what)
            .map_err(|e| fail(format!("Couldn't read remote address [{i}]: {e}")))?;
        if i < n {
            dests.push(Dest::from_wire(&msg).map_err(fail)?);
        }
    }
    Ok(dests)
}

/// Connects channel `i` to the peer's queue pair `i` with the C program's
/// attributes (hop limit 1, one outstanding read, timeout 14, 7 retries).
fn connect_all(channels: &mut [Channel], remote: &[Dest], o: &Options) -> Result<()> {
    let attrs = ConnectOptions {
        service_level: o.common.sl,
        hop_limit: 1,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        path_mtu: Some(o.mtu),
        ..ConnectOptions::default()
    };
    for (c, r) in channels.iter_mut().zip(remote) {
        c.connect_with(
            &Endpoint {
                qp_num: r.qpn,
                psn: r.psn,
                port: o.common.ib_port(),
                lid: r.lid,
                gid: r.gid,
                gid_index: 0,
                mtu: o.mtu,
            },
            &attrs,
        )
        .map_err(|e| fail(format!("Couldn't connect to remote QP: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn takes_every_flag_of_ibv_srq_pingpong() {
        let o = Options::try_parse_from([
            "srq_pingpong",
            "-p",
            "19000",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-s",
            "100",
            "-m",
            "2048",
            "-q",
            "4",
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
            "-c",
            "host",
        ])
        .unwrap();
        assert_eq!((o.size, o.mtu, o.num_qp), (100, Mtu::Mtu2048, 4));
        assert!(o.odp && o.common.events && o.common.chk);
        assert_eq!((o.common.rx_depth, o.common.sl), (8, 1));
        let d = Options::try_parse_from(["srq_pingpong"]).unwrap();
        assert_eq!((d.size, d.num_qp, d.mtu), (4096, 16, Mtu::Mtu1024));
        assert!(Options::try_parse_from(["srq_pingpong", "-q", "257"]).is_err());
    }
}
