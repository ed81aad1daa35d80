//! `ud_pingpong` — ping-pong over unreliable datagrams, wire-compatible with
//! rdma-core's `ibv_ud_pingpong`: either side may be the C program.
//!
//! ```text
//! ud_pingpong -d rxe0 -g 1 -s 1000              server: wait for a client
//! ud_pingpong -d rxe0 -g 1 -s 1000 10.0.2.15    client: send first
//! ```
//!
//! Options `-p -d -i -s -r -n -l -e -g -c` as the C program (and `--timeout`) (`-s` defaults to 2048 as
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
//! program's fill byte `0x7b` (with `-c`, zero at every page start, as the
//! C client sends them; the server then also checks the last message page
//! by page as the C server does, printing `invalid data in page N`, and
//! exits 1 if one is). `-e` sleeps on completion events and `-l` sets the
//! service level of the address handle ([`DatagramOptions`]).

use clap::Parser;
use rdma_examples::fail;
use rdma_examples::flags::PingpongFlags;
use rdma_examples::limit::Limit;
use rdma_examples::net::{self, Link};
use rdma_examples::pingpong::{Dest, DONE, MSG_LEN};
use rdma_examples::{cli, device, page_size, Result};
use rdma_safe::{
    channel::Gid, datagram::DatagramAddress, datagram::DatagramOptions, DatagramEndpoint,
};
use std::process::ExitCode;
use std::time::Instant;

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
    #[command(flatten)]
    common: PingpongFlags,
    /// size of message to exchange (default 2048; at most the port's MTU)
    #[arg(short = 's', long = "size", value_name = "size", hide_default_value = true, default_value = "2048",
          value_parser = cli::number::<usize>(Limit::new("-s/--size", 1, 1 << 20)))]
    size: usize,
}

fn main() -> ExitCode {
    cli::finish("ud_pingpong", run(&Options::parse()))
}

fn run(o: &Options) -> Result<()> {
    let c = &o.common;
    let pd = device::open_checked(c.ib_dev(), c.ib_port(), c.gid_idx())?;
    let options = DatagramOptions::default()
        .port(c.ib_port())
        .gid_index(c.gid_idx())
        .service_level(c.sl)
        .completion_events(c.events);
    let mut endpoint = DatagramEndpoint::with_options(&pd, QKEY, &options)?;
    endpoint.set_timeout(c.timeout());
    if o.size > endpoint.max_message() {
        return Err(fail(format!(
            "Requested size larger than port MTU ({})",
            endpoint.max_message()
        )));
    }
    let local = endpoint.address();
    let me = Dest {
        lid: local.lid,
        qpn: local.qp_num,
        psn: 0,
        gid: local.gid,
    };

    // Address exchange; the receive ring is already posted.
    let remote = match &c.server {
        Some(host) => {
            println!("  local address:  {}", me.describe());
            let s = net::connect(host, c.port, net::CONNECT_RETRY, c.timeout())?;
            let mut link = Link::new(s, c.timeout())?;
            link.write_all(&me.to_wire())?;
            let mut msg = [0u8; MSG_LEN];
            link.read_exact(&mut msg, "the server's address")
                .map_err(|e| fail(format!("Couldn't read remote address: {e}")))?;
            link.write_all(DONE)?;
            Dest::from_wire(&msg).map_err(fail)?
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
            let remote = Dest::from_wire(&msg).map_err(fail)?;
            link.write_all(&me.to_wire())?;
            let mut done = [0u8; DONE.len()];
            link.read_exact(&mut done, "\"done\"")
                .map_err(|e| fail(format!("Couldn't send/recv local address: {e}")))?;
            remote
        }
    };
    println!("  remote address: {}", remote.describe());
    if remote.gid == Gid::default() && remote.lid == 0 {
        return Err(fail("the peer sent neither a GID nor a LID (give it -g)"));
    }
    let peer = endpoint.peer(&DatagramAddress {
        gid: remote.gid,
        lid: remote.lid,
        qp_num: remote.qpn,
        qkey: QKEY,
    })?;

    // What every datagram carries: the C program's fill byte, and with -c
    // a zero at the start of every page (what its client sends and its
    // server echoes). Ours sends it in both roles.
    let payload = expected_payload(o.size, c.chk, page_size());
    let mut buf = vec![0u8; o.size];
    let iters = c.iters;
    let start = Instant::now();
    let mut sent = 0;
    if c.is_client() {
        endpoint.send_to(&peer, &payload)?;
        sent += 1;
    }
    for received in 0..iters {
        let got = endpoint.receive(&mut buf)?;
        if got.len() != o.size {
            return Err(fail(format!(
                "datagram {received} has {} bytes, expected {} (same -s on both sides?)",
                got.len(),
                o.size
            )));
        }
        if let Some(i) = buf.iter().zip(&payload).position(|(a, b)| a != b) {
            return Err(fail(format!(
                "datagram {received}: byte {i} is {:#04x}, expected {:#04x}{}",
                buf[i],
                payload[i],
                if c.chk { "" } else { " (-c on one side only?)" }
            )));
        }
        if sent < iters {
            endpoint.send_to(&peer, &payload)?;
            sent += 1;
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
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
    // -c: the C server's check of the last message, page by page (every
    // byte of every datagram was checked above already).
    if c.chk && !c.is_client() {
        let bad = invalid_pages(&buf, page_size());
        for p in &bad {
            println!("invalid data in page {p}");
        }
        if !bad.is_empty() {
            return Err(fail("received buffer failed validation (-c)"));
        }
    }
    Ok(())
}

/// `size` bytes of the C program's fill byte, with a zero at every page
/// start when `chk` (-c).
fn expected_payload(size: usize, chk: bool, page: usize) -> Vec<u8> {
    let mut p = vec![FILL; size];
    if chk {
        for i in (0..size).step_by(page) {
            p[i] = 0;
        }
    }
    p
}

/// The pages of `buf` whose first byte is not the zero -c puts there.
fn invalid_pages(buf: &[u8], page: usize) -> Vec<usize> {
    (0..buf.len())
        .step_by(page)
        .filter(|&i| buf[i] != 0)
        .map(|i| i / page)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn takes_every_flag_of_ibv_ud_pingpong() {
        let o = Options::try_parse_from([
            "ud_pingpong",
            "-p",
            "19000",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-s",
            "1000",
            "-r",
            "100",
            "-n",
            "10",
            "-l",
            "2",
            "-e",
            "-g",
            "1",
            "-c",
            "10.0.2.15",
        ])
        .unwrap();
        assert_eq!(o.size, 1000);
        let c = &o.common;
        assert!(c.events && c.chk && c.is_client());
        assert_eq!(
            (c.sl, c.rx_depth, c.iters, c.gid_idx()),
            (2, 100, 10, Some(1))
        );
        assert_eq!(Options::try_parse_from(["ud_pingpong"]).unwrap().size, 2048);
    }

    #[test]
    fn chk_zeroes_page_starts_and_finds_bad_pages() {
        let p = expected_payload(9000, true, 4096);
        assert_eq!((p[0], p[4096], p[8192]), (0, 0, 0));
        assert!(p
            .iter()
            .enumerate()
            .all(|(i, &b)| (b == 0) == (i % 4096 == 0)));
        assert!(expected_payload(100, false, 4096)
            .iter()
            .all(|&b| b == FILL));
        assert!(invalid_pages(&p, 4096).is_empty());
        let mut q = p.clone();
        q[4096] = FILL;
        assert_eq!(invalid_pages(&q, 4096), vec![1]);
    }
}
