//! `async_echo` — an echo service on the async, owned-buffer API (tokio).
//!
//! `async_echo server [-d DEV] [-x GID_INDEX] [-p PORT]` serves every
//! client that connects, until killed: each connection is a reliable
//! channel whose receive stream hands each message's pool buffer straight
//! back to a send (frozen, not copied).
//!
//! `async_echo client [-d DEV] [-x GID_INDEX] [-p PORT] [--clients N]
//! [--messages M] [-s SIZE] HOST` runs N connections at once from one
//! process, each sending M messages of SIZE bytes one after the other and
//! checking every byte echoed; prints messages/s and the p50/p99 round
//! trip, and exits 0 only if every byte matched.
//!
//! Connections are set up over TCP (endpoint exchange); the TCP stream
//! stays open as the connection's liveness signal: when it closes, the
//! server shuts the channel down at once instead of waiting for the
//! channel's timeout.

use rdma_examples::{args, net, open_pd, pattern, stats, Result};
use rdma_safe::{BufferPool, Channel, ProtectionDomain, SharedChannel};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const SYNOPSIS: &str = "\
usage: async_echo server [-d DEV] [-x GID_INDEX] [-p PORT]
       async_echo client [-d DEV] [-x GID_INDEX] [-p PORT] [--clients N] [--messages M] [-s SIZE] HOST";

const OPTS: &[args::Opt] = &[
    args::Opt::value(
        Some('d'),
        "ib-dev",
        "DEV",
        "RDMA device (default: the first)",
    ),
    args::Opt::value(
        Some('x'),
        "gid-idx",
        "GID_INDEX",
        "local GID index (default: RoCE v2 IPv4)",
    ),
    args::Opt::value(Some('p'), "port", "PORT", "TCP port (default 18520)"),
    args::Opt::value(
        None,
        "clients",
        "N",
        "client: concurrent connections (default 8)",
    ),
    args::Opt::value(
        None,
        "messages",
        "M",
        "client: messages per connection (default 1000)",
    ),
    args::Opt::value(
        Some('s'),
        "size",
        "SIZE",
        "message bytes, at most 1M (default 64)",
    ),
    args::Opt::value(None, "timeout", "SECS", "bound on every wait (default 30)"),
    args::Opt::flag(Some('h'), "help", "this text"),
];

/// Receives each connection keeps posted.
const RX_DEPTH: usize = 16;
/// The largest message (the server's buffers are this big).
const MAX_SIZE: u64 = 1 << 20;

#[derive(Debug, Clone)]
struct Options {
    dev: Option<String>,
    gid_index: Option<u32>,
    port: u16,
    clients: usize,
    messages: usize,
    size: usize,
    timeout: Duration,
}

fn main() -> ExitCode {
    let m = match args::parse(OPTS, std::env::args().skip(1)) {
        Ok(m) if m.flag("help") => {
            print!("{}", args::usage(SYNOPSIS, OPTS));
            return ExitCode::SUCCESS;
        }
        Ok(m) => m,
        Err(e) => return usage_error(&e.to_string()),
    };
    let opts = match options(&m) {
        Ok(o) => o,
        Err(e) => return usage_error(&e.to_string()),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("async_echo: starting tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match m.positionals.first().map(String::as_str) {
        Some("server") if m.positionals.len() == 1 => rt.block_on(server(opts)),
        Some("client") if m.positionals.len() == 2 => {
            rt.block_on(client(opts, m.positionals[1].clone()))
        }
        _ => return usage_error("expected `server` or `client HOST`"),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_echo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("async_echo: {msg}\n\n{}", args::usage(SYNOPSIS, OPTS));
    ExitCode::from(2)
}

fn options(m: &args::Matches) -> Result<Options> {
    Ok(Options {
        dev: m.value("ib-dev").map(str::to_owned),
        gid_index: match m.uint("gid-idx")? {
            Some(v) if v <= 255 => Some(v as u32),
            Some(v) => return Err(format!("--gid-idx: {v} is out of range (0..=255)").into()),
            None => None,
        },
        port: m.uint_in("port", 18520, 1, 65535)? as u16,
        clients: m.uint_in("clients", 8, 1, 4096)? as usize,
        messages: m.uint_in("messages", 1000, 1, 100_000_000)? as usize,
        size: m.uint_in("size", 64, 1, MAX_SIZE)? as usize,
        timeout: Duration::from_secs(m.uint_in("timeout", 30, 1, 86_400)?),
    })
}

/// A channel for one connection, connected over `stream` (blocking: run on
/// a blocking thread).
fn connect(
    pd: &ProtectionDomain,
    o: &Options,
    stream: &mut std::net::TcpStream,
) -> Result<Channel> {
    let mut builder = pd
        .channel_builder()
        .completion_events(true)
        .send_depth(RX_DEPTH as u32)
        .recv_depth(RX_DEPTH as u32)
        .timeout(o.timeout);
    if let Some(i) = o.gid_index {
        builder = builder.gid_index(i);
    }
    let mut channel = builder.build()?;
    channel.handshake(stream)?;
    Ok(channel)
}

async fn server(o: Options) -> Result<()> {
    let pd = open_pd(o.dev.as_deref())?;
    // One pool for every connection: RX_DEPTH receive buffers each, plus
    // the ones on their way back out.
    let pool = BufferPool::new(&pd, MAX_SIZE as usize, 64 * RX_DEPTH)?;
    let listener = net::listen(o.port)?;
    eprintln!("async_echo: serving on TCP port {}", o.port);
    loop {
        let (accepted, pd2, o2) = (listener.try_clone()?, pd.clone(), o.clone());
        let (stream, channel) = tokio::task::spawn_blocking(move || -> Result<_> {
            let (mut stream, peer) = accepted.accept()?;
            eprintln!("async_echo: client {peer}");
            let channel = connect(&pd2, &o2, &mut stream)?;
            Ok((stream, channel))
        })
        .await??;
        let pool = pool.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(stream, channel, pool).await {
                eprintln!("async_echo: connection ended: {e}");
            }
        });
    }
}

/// Echoes every message of one connection until it fails or its TCP
/// stream closes.
async fn serve(stream: std::net::TcpStream, channel: Channel, pool: BufferPool) -> Result<()> {
    let shared = channel.shared().with_tokio()?;
    let mut messages = shared.receive_stream(pool, RX_DEPTH);
    stream.set_nonblocking(true)?;
    let mut control = tokio::net::TcpStream::from_std(stream)?;
    let watcher = {
        let shared = shared.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let _ = control.read(&mut [0u8; 1]).await; // EOF: the client left
            shared.shutdown();
        })
    };
    let mut echoed = 0u64;
    while let Some(item) = messages.next().await {
        let Ok((_, buf)) = item else { break };
        // The received buffer goes back out as is: no copy.
        let (sent, _) = shared.send_async(buf.freeze()).await;
        sent?;
        echoed += 1;
    }
    watcher.abort();
    eprintln!("async_echo: connection closed after {echoed} messages");
    Ok(())
}

async fn client(o: Options, host: String) -> Result<()> {
    let pd = open_pd(o.dev.as_deref())?;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..o.clients {
        let (pd, o, host) = (pd.clone(), o.clone(), host.clone());
        tasks.spawn(async move { one_client(c, pd, o, host).await });
    }
    let mut rtts = Vec::with_capacity(o.clients * o.messages);
    let mut failures = 0usize;
    while let Some(r) = tasks.join_next().await {
        match r? {
            Ok(mut v) => rtts.append(&mut v),
            Err(e) => {
                eprintln!("async_echo: client failed: {e}");
                failures += 1;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    rtts.sort_by(f64::total_cmp);
    println!(
        "{} clients x {} messages of {} bytes: {} echoed and checked in {secs:.2} s, \
         {:.0} msgs/s, round trip p50 {:.1} us, p99 {:.1} us",
        o.clients,
        o.messages,
        o.size,
        rtts.len(),
        rtts.len() as f64 / secs,
        stats::percentile(&rtts, 0.50),
        stats::percentile(&rtts, 0.99),
    );
    if failures > 0 {
        return Err(format!("{failures} of {} clients failed", o.clients).into());
    }
    Ok(())
}

/// One connection: M messages, one at a time, every echoed byte checked.
/// Returns the round trips in microseconds.
async fn one_client(c: usize, pd: ProtectionDomain, o: Options, host: String) -> Result<Vec<f64>> {
    let (o2, pd2) = (o.clone(), pd.clone());
    let (stream, channel) = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut stream = net::connect(&host, o2.port, net::CONNECT_RETRY)?;
        let channel = connect(&pd2, &o2, &mut stream)?;
        Ok((stream, channel))
    })
    .await??;
    let shared: SharedChannel = channel.shared().with_tokio()?;
    let tx_pool = BufferPool::new(&pd, o.size, 2)?;
    let rx_pool = BufferPool::new(&pd, o.size, RX_DEPTH)?;
    let mut echoes = shared.receive_stream(rx_pool, RX_DEPTH);
    let mut rtts = Vec::with_capacity(o.messages);
    for i in 0..o.messages {
        let seed = ((c as u64) << 32) | i as u64;
        let mut buf = tx_pool.alloc().await;
        buf.set_len(o.size);
        pattern::fill(&mut buf, seed, 0);
        let t = Instant::now();
        let (sent, _) = shared.send_async(buf.freeze()).await;
        sent?;
        let (got, echo) = echoes.next().await.ok_or("the channel closed")??;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
        if got.bytes() != o.size {
            return Err(format!(
                "client {c}: echo {i} has {} bytes, not {}",
                got.bytes(),
                o.size
            )
            .into());
        }
        pattern::check(&echo, seed, 0).map_err(|e| format!("client {c}: echo {i}: {e}"))?;
    }
    drop(echoes);
    drop(stream); // tells the server this connection is done
    Ok(rtts)
}
