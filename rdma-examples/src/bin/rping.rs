//! `rping` — ping over RDMA reads and writes, connected by the RDMA
//! connection manager; wire-compatible with rdma-core's `rping`: either
//! side may be the C program.
//!
//! ```text
//! rping -s -a 10.0.2.15 -v            server: wait for a client
//! rping -c -a 10.0.2.15 -v -V -C 10   client: 10 pings, printed and checked
//! ```
//!
//! Options as in the C program: `-s`/`-c` (server/client), `-a addr`,
//! `-p port` (default 7174), `-C count` (client: pings to send, default
//! unlimited; server: pings to serve), `-S size` (26..=65535, default 64),
//! `-v` (print the data), `-V` (client: check it), `-d` (debug messages).
//!
//! Each ping is the C program's exchange, one 16-byte message (buffer
//! address u64, rkey u32, length u32, all big endian) at a time:
//!
//! 1. the client fills its source buffer with `rdma-ping-N: ` and then
//!    letters from `A` to `z` (the first letter advancing by one each ping),
//!    NUL-terminated, and sends the source buffer's address, rkey and size;
//! 2. the server RDMA-reads that many bytes and answers with a message of
//!    its own ("go ahead");
//! 3. the client sends its sink buffer's address, rkey and size;
//! 4. the server RDMA-writes the string it read (with its NUL) there and
//!    answers again; the client prints (`-v`: `ping data: …`) and compares
//!    (`-V`) the sink with the source.
//!
//! The server prints `server ping data: …` with `-v`. A client that
//! disconnects between pings ends the server (after `-C` pings the server
//! waits for that disconnect); in the middle of a ping, with an error.
//!
//! Written against `rdma-safe`: the connection is a [`Channel`] made by
//! [`Listener`] or [`Channel::connect_to_with`]; each step posts its receive
//! and send in one polling scope. The client's two buffers are the peer's
//! RDMA targets, so they are [`RemoteAccessBuffer`](rdma_safe::RemoteAccessBuffer)s
//! (registered with remote access, reached by Rust only atomically): the
//! client copies the ping in and the answer out. Not implemented: `-P`
//! (persistent server), `-I` (source address), `-q`.

use clap::Parser;
use rdma_examples::fail;
use rdma_examples::limit::Limit;
use rdma_examples::{cli, shared, Result};
use rdma_safe::{
    cm::Acceptance, cm::CmOptions, Channel, Error, GatherElement, Listener, ReadWorkRequest,
    ReceiveWorkRequest, RegisteredBuffer, RemoteMemoryRegion, SendWorkRequest, WriteWorkRequest,
};
use std::process::ExitCode;
use std::time::Duration;

/// `-S`: from room for `rdma-ping-2147483647: ` and the NUL, as in the C
/// program, to its 64 KiB buffers less one byte.
const SIZE: Limit = Limit::new("-S/--size", 26, 65535);
/// The length of the message both sides exchange.
const INFO_LEN: usize = 16;
/// Bound on every wait: under emulation a ping of 64 KiB takes a while.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Ping over RDMA reads and writes through the RDMA connection manager,
/// wire-compatible with rdma-core's rping; the options are the C program's.
#[derive(Debug, Parser)]
#[command(
    name = "rping",
    override_usage = "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n       \
                      rping -c [-vVd] [-S size] [-C count] -a addr [-p port]"
)]
struct Options {
    /// run as the server
    #[arg(
        short = 's',
        long = "server",
        conflicts_with = "client",
        required_unless_present = "client"
    )]
    server: bool,
    /// run as the client
    #[arg(short = 'c', long = "client")]
    client: bool,
    /// address to listen on (default: all) / connect to
    #[arg(
        short = 'a',
        long = "addr",
        value_name = "addr",
        required_if_eq("client", "true")
    )]
    addr: Option<String>,
    #[arg(help = "port (default 7174)", short = 'p', long = "port", value_name = "port", hide_default_value = true, default_value = "7174",
          value_parser = cli::number::<u16>(Limit::new("-p/--port", 0, 65535)))]
    port: u16,
    #[arg(help = "number of pings (default: unlimited)", short = 'C', long = "count", value_name = "count",
          value_parser = cli::number::<u64>(Limit::new("-C/--count", 0, u64::MAX)))]
    count: Option<u64>,
    #[arg(help = "ping data size, 26..=65535 (default 64)", short = 'S', long = "size", value_name = "size", hide_default_value = true, default_value = "64",
          value_parser = cli::number::<usize>(SIZE))]
    size: usize,
    /// print the ping data
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// check the ping data (client)
    #[arg(short = 'V', long = "validate")]
    validate: bool,
    /// print debug messages
    #[arg(short = 'd', long = "debug")]
    debug: bool,
}

fn main() -> ExitCode {
    let mut o = Options::parse();
    // -C 0 is the C program's "unlimited".
    o.count = o.count.filter(|&c| c > 0);
    let outcome = if o.server { server(&o) } else { client(&o) };
    cli::finish("rping", outcome)
}

/// The 16-byte message: where a buffer is, its rkey and its length.
fn encode(addr: u64, rkey: u32, len: u32) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..8].copy_from_slice(&addr.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&len.to_be_bytes());
    b
}

fn decode(b: &[u8]) -> RemoteMemoryRegion {
    let addr = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
    let rkey = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes"));
    let len = u32::from_be_bytes(b[12..16].try_into().expect("4 bytes"));
    RemoteMemoryRegion::new(addr, len.into(), rkey)
}

/// Ping `ping`'s data: `rdma-ping-<ping>: ` then letters cycling from
/// `first` through `z` back to `A`, the last byte NUL.
fn fill(buf: &mut [u8], ping: u64, first: u8) {
    let prefix = format!("rdma-ping-{ping}: ");
    let n = prefix.len().min(buf.len());
    buf[..n].copy_from_slice(&prefix.as_bytes()[..n]);
    let mut c = first;
    for b in &mut buf[n..] {
        *b = c;
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
}

/// The text up to the first NUL, as `printf("%s")` shows it.
fn c_str(buf: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end])
}

/// Posts a receive for the peer's next message, sends `message` (if any),
/// and waits for both; returns the received message.
fn exchange(
    channel: &mut Channel,
    rx: &mut RegisteredBuffer,
    message: Option<&[GatherElement<'_>]>,
    acceptance: Option<Acceptance>,
) -> std::result::Result<(), Error> {
    let got = channel
        .scope(|s| {
            let mut scatter = [rx.scatter(..)];
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            // The server accepts once the receive for the client's first
            // message is up, as the C server posts it before rdma_accept:
            // the client sends as soon as it is accepted, which can be
            // long before this side sees the connection established.
            if let Some(acceptance) = acceptance {
                acceptance.accept(&[])?;
            }
            let send = match message {
                Some(gather) => Some(s.post_send(SendWorkRequest::new(gather))?),
                None => None,
            };
            if let Some(send) = send {
                send.wait()?;
            }
            recv.wait()
        })
        .map_err(|e| match e.flatten() {
            // A scope reports the flush of its requests; the channel knows why.
            Error::WorkCompletion { operation, .. } | Error::Timeout { operation, .. }
                if channel.peer_disconnected() =>
            {
                Error::PeerDisconnected { operation }
            }
            e => e,
        })?;
    if got.bytes() != INFO_LEN {
        return Err(Error::Unusable(format!(
            "the peer sent {} bytes, not the {INFO_LEN} of an rping message",
            got.bytes()
        )));
    }
    Ok(())
}

fn cm_options() -> CmOptions {
    // One outstanding RDMA read each way, as the C program asks for.
    let mut o = CmOptions::default().timeout(TIMEOUT);
    o.rd_atomic = 1;
    o
}

fn client(o: &Options) -> Result<()> {
    let host = o.addr.as_deref().expect("checked by options()");
    let connector = rdma_safe::cm::Connector::resolve((host, o.port), &cm_options())?;
    let pd = connector.pd().clone();
    // The server reads `source` and writes `sink` only between our
    // advertising them and its "go ahead" answers; this function fills and
    // reads them only outside those windows.
    let source = shared::expose(&pd, o.size, "the source buffer (-S)")?;
    let sink = shared::expose(&pd, o.size, "the sink buffer (-S)")?;
    let mut ping_data = vec![0u8; o.size];
    let mut channel = connector.connect(&[])?;
    if o.debug {
        eprintln!("rping: connected to {:?}", channel.peer_addr());
    }
    let mut rx = RegisteredBuffer::new(&pd, INFO_LEN)?;
    let len = o.size as u32;
    let source_info = RegisteredBuffer::register(
        &pd,
        encode(source.remote().address(), source.remote().rkey(), len).to_vec(),
    )?;
    let sink_info = RegisteredBuffer::register(
        &pd,
        encode(sink.remote().address(), sink.remote().rkey(), len).to_vec(),
    )?;
    let mut first = b'A';
    let mut ping = 0u64;
    while o.count.is_none_or(|c| ping < c) {
        fill(&mut ping_data, ping, first);
        source.write(0, &ping_data)?;
        first = if first >= b'z' { b'A' } else { first + 1 };
        exchange(&mut channel, &mut rx, Some(&[source_info.gather(..)]), None)?;
        exchange(&mut channel, &mut rx, Some(&[sink_info.gather(..)]), None)?;
        let answer = shared::copy_out(&sink, 0..o.size)?;
        if o.verbose {
            println!("ping data: {}", c_str(&answer));
        }
        if o.validate && ping_data != answer {
            return Err(fail("data mismatch!"));
        }
        ping += 1;
    }
    if o.debug {
        eprintln!("rping: {ping} pings done, disconnecting");
    }
    drop(channel);
    drop((source, sink));
    Ok(())
}

fn server(o: &Options) -> Result<()> {
    let host = o.addr.as_deref().unwrap_or("0.0.0.0");
    let listener = Listener::bind_with((host, o.port), &cm_options())?;
    let incoming = loop {
        // Wait for a client as long as it takes, a bounded wait at a time.
        if let Some(incoming) = listener.incoming_within(Duration::from_secs(3600))? {
            break incoming;
        }
    };
    if o.debug {
        eprintln!("rping: connect request from {:?}", incoming.peer_addr());
    }
    let pd = incoming.pd().clone();
    let mut buf = RegisteredBuffer::new(&pd, o.size)?;
    let mut rx = RegisteredBuffer::new(&pd, INFO_LEN)?;
    let go_ahead = RegisteredBuffer::register(&pd, encode(0, 0, o.size as u32).to_vec())?;
    let (mut channel, acceptance) = incoming.prepare()?;
    let mut acceptance = Some(acceptance);
    let go = [go_ahead.gather(..)];
    let mut ping = 0u64;
    loop {
        // The client's source buffer, or its disconnect between pings. The
        // receive for it goes up with the previous ping's last "go ahead",
        // as the C server's does, so the client's next message never finds
        // the queue empty (an RNR NAK would delay it).
        let last_go_ahead = (ping > 0).then_some(&go[..]);
        let disconnected = match exchange(&mut channel, &mut rx, last_go_ahead, acceptance.take()) {
            Ok(()) => false,
            Err(Error::PeerDisconnected { .. }) => true,
            Err(e) => return Err(fail(e)),
        };
        if disconnected {
            // The C server's words for the same moment.
            eprintln!("server DISCONNECT EVENT...");
            break;
        }
        if o.count.is_some_and(|c| ping == c) {
            // Like the C server, the disconnect is the client's: one made
            // here right after the last "go ahead" can overtake it in a C
            // client, which then reports a failure.
            return Err(fail(format!("the client sent more than -C {ping} pings")));
        }
        let source = decode(&rx);
        let len = usize::try_from(source.length()).unwrap_or(usize::MAX);
        if len > o.size {
            return Err(fail(format!(
                "the client's ping has {len} bytes, more than this server's -S {}",
                o.size
            )));
        }
        channel.read(ReadWorkRequest::new(&mut [buf.scatter(..len)], source))?;
        if o.verbose {
            println!("server ping data: {}", c_str(&buf[..len]));
        }
        // Go ahead, and the client's sink buffer in return.
        exchange(&mut channel, &mut rx, Some(&go), None)?;
        let sink = decode(&rx);
        let written = buf[..len]
            .iter()
            .position(|&b| b == 0)
            .map_or(len, |n| n + 1);
        if written as u64 > sink.length() {
            return Err(fail("the client's sink buffer is smaller than its ping"));
        }
        channel.write(WriteWorkRequest::new(&[buf.gather(..written)], sink))?;
        ping += 1;
    }
    if o.debug {
        eprintln!("rping: {ping} pings served");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_data_is_the_c_programs() {
        let mut b = vec![0u8; 32];
        fill(&mut b, 0, b'A');
        assert_eq!(c_str(&b), "rdma-ping-0: ABCDEFGHIJKLMNOPQR");
        fill(&mut b, 12, b'y');
        assert_eq!(c_str(&b), "rdma-ping-12: yzABCDEFGHIJKLMNO");
        assert_eq!(b[31], 0);
    }

    #[test]
    fn the_message_is_big_endian() {
        let b = encode(0x0102_0304_0506_0708, 0x0a0b_0c0d, 64);
        assert_eq!(b[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[8..12], [10, 11, 12, 13]);
        let r = decode(&b);
        assert_eq!(
            (r.address(), r.rkey(), r.length()),
            (0x0102_0304_0506_0708, 0x0a0b_0c0d, 64)
        );
    }
}
