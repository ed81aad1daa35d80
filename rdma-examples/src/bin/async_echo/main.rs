//! `async_echo` — an echo service on the async, owned-buffer API (tokio).
//!
//! `async_echo server [-d DEV] [-x GID_INDEX] [-p PORT] [-s SIZE]` serves
//! every client that connects, until killed (messages up to SIZE bytes,
//! 1 MiB by default): each connection is a reliable
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
//!
//! With `--cm` (both sides) connections are made through the RDMA
//! connection manager instead, as futures end to end: the server awaits
//! `Listener::incoming_async_within` and `Incoming::accept_async`, the
//! client `Connector::resolve_in_async` and `connect_async`, all clients
//! share the one protection domain and pool of the device, and a client
//! that leaves is seen through the CM's disconnect. No thread is blocked
//! and no `spawn_blocking` is needed.

use clap::{Parser, Subcommand};
use rdma_examples::device::{open_checked, open_pd};
use rdma_examples::flags::{DeviceFlags, GidIndex, Timeout};
use rdma_examples::limit::Limit;
use rdma_examples::{cli, net, pattern, stats, Result};
use rdma_safe::{
    BufferPool, Channel, CmOptions, Connector, Listener, ProtectionDomain, SharedChannel,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Receives each connection keeps posted.
const RX_DEPTH: usize = 16;
/// The largest message (the server's buffers are this big).
const MAX_SIZE: u64 = 1 << 20;

/// An echo service on the async, owned-buffer API.
#[derive(Debug, Parser)]
#[command(name = "async_echo")]
struct Args {
    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// Serve every client that connects, until killed.
    Server {
        #[command(flatten)]
        common: Options,
        /// largest message accepted, at most 1M (default 1M); the server
        /// registers 1024 buffers of this size when it starts
        #[arg(short = 's', long = "size", value_name = "SIZE", default_value = "1M", hide_default_value = true,
              value_parser = cli::number::<usize>(Limit::new("-s/--size", 1, MAX_SIZE)))]
        size: usize,
    },
    /// Run N connections at once, each sending M messages and checking
    /// every echoed byte.
    Client {
        #[command(flatten)]
        common: Options,
        /// concurrent connections (default 8)
        #[arg(long = "clients", value_name = "N", default_value = "8", hide_default_value = true,
              value_parser = cli::number::<usize>(Limit::new("--clients", 1, 4096)))]
        clients: usize,
        /// messages per connection (default 1000)
        #[arg(long = "messages", value_name = "M", default_value = "1000", hide_default_value = true,
              value_parser = cli::number::<usize>(Limit::new("--messages", 1, 100_000_000)))]
        messages: usize,
        /// message bytes, at most 1M (default 64)
        #[arg(short = 's', long = "size", value_name = "SIZE", default_value = "64", hide_default_value = true,
              value_parser = cli::number::<usize>(Limit::new("-s/--size", 1, MAX_SIZE)))]
        size: usize,
        /// the server
        #[arg(value_name = "HOST")]
        host: String,
    },
}

#[derive(Debug, Clone, clap::Args)]
struct Options {
    #[command(flatten)]
    device: DeviceFlags,
    #[command(flatten)]
    gid: GidIndex,
    /// TCP port, or the RDMA CM's port with --cm (default 18520)
    #[arg(short = 'p', long = "port", value_name = "PORT", default_value = "18520", hide_default_value = true,
          value_parser = cli::number::<u16>(Limit::new("-p/--port", 1, 65535)))]
    port: u16,
    /// connect through the RDMA connection manager (both sides); -x is
    /// then not used: the CM picks the GID
    #[arg(long = "cm")]
    cm: bool,
    #[command(flatten)]
    timeout: Timeout,
}

/// What one client run does.
#[derive(Debug, Clone, Copy)]
struct Load {
    clients: usize,
    messages: usize,
    size: usize,
}

/// The most round trips one client run measures (their samples are kept in
/// memory: 8 bytes each).
const MAX_ROUND_TRIPS: usize = 10_000_000;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Role::Client {
        clients, messages, ..
    } = &args.role
    {
        // Each flag is within its limit; their product sizes the samples.
        if clients.saturating_mul(*messages) > MAX_ROUND_TRIPS {
            use clap::CommandFactory;
            Args::command()
                .error(
                    clap::error::ErrorKind::ValueValidation,
                    format!(
                        "--clients {clients} x --messages {messages} round trips exceed the \
                         {MAX_ROUND_TRIPS} one run measures (their samples are kept in memory)"
                    ),
                )
                .exit();
        }
    }
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
    let outcome = match args.role {
        Role::Server { common, size } => rt.block_on(server(common, size)),
        Role::Client {
            common,
            clients,
            messages,
            size,
            host,
        } => rt.block_on(client(
            common,
            Load {
                clients,
                messages,
                size,
            },
            host,
        )),
    };
    cli::finish("async_echo", outcome)
}

/// The builder of every connection's channel.
fn channel_builder<'a>(pd: &'a ProtectionDomain, o: &Options) -> rdma_safe::ChannelBuilder<'a> {
    let builder = pd
        .channel_builder()
        .completion_events(true)
        .send_depth(RX_DEPTH as u32)
        .recv_depth(RX_DEPTH as u32)
        .port(o.device.ib_port)
        .timeout(o.timeout.timeout);
    match o.gid.gid_index {
        Some(i) => builder.gid_index(i),
        None => builder,
    }
}

/// A channel for one connection, connected over `stream` (blocking: run on
/// a blocking thread).
fn connect(
    pd: &ProtectionDomain,
    o: &Options,
    stream: &mut std::net::TcpStream,
) -> Result<Channel> {
    let mut channel = channel_builder(pd, o).build()?;
    channel.handshake(stream)?;
    Ok(channel)
}

async fn server(o: Options, size: usize) -> Result<()> {
    // The device options (device, port, GID index) are checked now: a bad
    // one fails at start-up, not at the first client.
    let pd = open_checked(
        o.device.ib_dev.as_deref(),
        o.device.ib_port,
        o.gid.gid_index,
    )?;
    // One pool for every connection: RX_DEPTH receive buffers each, plus
    // the ones on their way back out. With 1 MiB buffers that is 1 GiB,
    // pinned: a small machine needs a smaller -s.
    let pool = BufferPool::new(&pd, size, 64 * RX_DEPTH)?;
    if o.cm {
        return serve_cm(pd, o, pool).await;
    }
    let listener = net::listen(o.port)?;
    eprintln!("async_echo: serving on TCP port {}", o.port);
    loop {
        // The loop waits only for the next TCP connection. Each client's
        // handshake and echoes run on a task of its own, and every failure
        // ends that connection only: a client that sends garbage, stays
        // silent (the handshake is bounded by the timeout) or leaves costs
        // the server nothing else.
        let accepted = listener.try_clone()?;
        let (stream, peer) = match tokio::task::spawn_blocking(move || accepted.accept()).await? {
            Ok(conn) => conn,
            Err(e) => {
                eprintln!("async_echo: accepting a connection failed: {e}");
                continue;
            }
        };
        eprintln!("async_echo: client {peer}");
        let (pd, o, pool) = (pd.clone(), o.clone(), pool.clone());
        tokio::spawn(async move {
            let handshake = tokio::task::spawn_blocking(move || -> Result<_> {
                let mut stream = stream;
                let channel = connect(&pd, &o, &mut stream)?;
                Ok((stream, channel))
            })
            .await;
            let outcome = match handshake {
                Ok(Ok((stream, channel))) => serve(stream, channel, pool).await,
                Ok(Err(e)) => Err(e),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = outcome {
                eprintln!("async_echo: client {peer}: connection ended: {e}");
            }
        });
    }
}

/// The options of every CM connection.
fn cm_options(o: &Options) -> CmOptions {
    CmOptions::default()
        .completion_events(true)
        .timeout(o.timeout.timeout)
}

/// The server over the RDMA CM: every connection in `pd`, served from
/// `pool`; a request that fails costs only itself.
async fn serve_cm(pd: ProtectionDomain, o: Options, pool: BufferPool) -> Result<()> {
    let listener = Listener::bind_in(&pd, ("0.0.0.0", o.port), &cm_options(&o))?;
    eprintln!("async_echo: serving on RDMA CM port {}", o.port);
    loop {
        let incoming = match listener
            .incoming_async_within(Duration::from_secs(3600))
            .await
        {
            Ok(Some(incoming)) => incoming,
            Ok(None) => continue,
            Err(e) => {
                // A request on a device the domain does not serve, or one
                // that vanished: refused, and the listener goes on.
                eprintln!("async_echo: a connect request failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let peer = incoming.peer_addr();
        eprintln!("async_echo: client {peer:?}");
        let pool = pool.clone();
        tokio::spawn(async move {
            let outcome = async {
                let channel = incoming.accept_async(&[]).await?;
                let shared = channel.shared().with_tokio()?;
                let echoed = echo_all(&shared, pool).await?;
                eprintln!("async_echo: connection closed after {echoed} messages");
                Ok::<_, rdma_examples::BoxError>(())
            };
            if let Err(e) = outcome.await {
                eprintln!("async_echo: client {peer:?}: connection ended: {e}");
            }
        });
    }
}

/// A CM connection to `host`, in `pd`. A server that is not listening yet
/// (the CM's reject) is tried again for [`net::CONNECT_RETRY`], as the TCP
/// path retries a refused connection; any other failure is final.
async fn connect_cm(pd: &ProtectionDomain, o: &Options, host: &str) -> Result<Channel> {
    let start = Instant::now();
    loop {
        let attempt = async {
            Connector::resolve_in_async(pd, (host, o.port), &cm_options(o))
                .await?
                .connect_async(&[])
                .await
        };
        match attempt.await {
            Ok(channel) => return Ok(channel),
            Err(rdma_safe::Error::Verbs(rdma_safe::IbvError::Cm { event, .. }))
                if event == "RDMA_CM_EVENT_REJECTED" && start.elapsed() < net::CONNECT_RETRY =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Echoes every message that arrives on `shared` until its receive stream
/// ends (the peer left) or fails; returns how many it echoed.
async fn echo_all(shared: &SharedChannel, pool: BufferPool) -> Result<u64> {
    let mut messages = shared.receive_stream(pool, RX_DEPTH);
    let mut echoed = 0u64;
    while let Some(item) = messages.next().await {
        let Ok((_, buf)) = item else { break };
        // The received buffer goes back out as is: no copy.
        let (sent, _) = shared.send_async(buf.freeze()).await;
        sent?;
        echoed += 1;
    }
    Ok(echoed)
}

/// Echoes every message of one connection until it fails or its TCP
/// stream closes.
async fn serve(stream: std::net::TcpStream, channel: Channel, pool: BufferPool) -> Result<()> {
    let shared = channel.shared().with_tokio()?;
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
    let echoed = echo_all(&shared, pool).await;
    watcher.abort();
    let echoed = echoed?;
    eprintln!("async_echo: connection closed after {echoed} messages");
    Ok(())
}

async fn client(o: Options, load: Load, host: String) -> Result<()> {
    let pd = open_pd(o.device.ib_dev.as_deref())?;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..load.clients {
        let (pd, o, host) = (pd.clone(), o.clone(), host.clone());
        tasks.spawn(async move { one_client(c, pd, o, load, host).await });
    }
    let mut rtts = Vec::with_capacity(load.clients * load.messages);
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
        load.clients,
        load.messages,
        load.size,
        rtts.len(),
        rtts.len() as f64 / secs,
        stats::percentile(&rtts, 0.50),
        stats::percentile(&rtts, 0.99),
    );
    if failures > 0 {
        return Err(format!("{failures} of {} clients failed", load.clients).into());
    }
    Ok(())
}

/// One connection: M messages, one at a time, every echoed byte checked.
/// Returns the round trips in microseconds.
async fn one_client(
    c: usize,
    pd: ProtectionDomain,
    o: Options,
    load: Load,
    host: String,
) -> Result<Vec<f64>> {
    let (stream, channel) = if o.cm {
        (None, connect_cm(&pd, &o, &host).await?)
    } else {
        let (o2, pd2) = (o.clone(), pd.clone());
        let (stream, channel) = tokio::task::spawn_blocking(move || -> Result<_> {
            let mut stream = net::connect(&host, o2.port, net::CONNECT_RETRY, o2.timeout.timeout)?;
            let channel = connect(&pd2, &o2, &mut stream)?;
            Ok((stream, channel))
        })
        .await??;
        (Some(stream), channel)
    };
    let shared: SharedChannel = channel.shared().with_tokio()?;
    let tx_pool = BufferPool::new(&pd, load.size, 2)?;
    let rx_pool = BufferPool::new(&pd, load.size, RX_DEPTH)?;
    let mut echoes = shared.receive_stream(rx_pool, RX_DEPTH);
    let mut rtts = Vec::with_capacity(load.messages);
    for i in 0..load.messages {
        let seed = ((c as u64) << 32) | i as u64;
        let mut buf = tx_pool.alloc().await;
        buf.set_len(load.size);
        pattern::fill(&mut buf, seed, 0);
        let t = Instant::now();
        let (sent, _) = shared.send_async(buf.freeze()).await;
        sent?;
        let (got, echo) = echoes.next().await.ok_or("the channel closed")??;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
        if got.bytes() != load.size {
            return Err(format!(
                "client {c}: echo {i} has {} bytes, not {}",
                got.bytes(),
                load.size
            )
            .into());
        }
        pattern::check(&echo, seed, 0).map_err(|e| format!("client {c}: echo {i}: {e}"))?;
    }
    drop(echoes);
    // Tells the server this connection is done (with --cm, dropping the
    // channel disconnects).
    drop(stream);
    drop(channel);
    Ok(rtts)
}
