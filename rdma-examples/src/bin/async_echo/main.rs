//! `async_echo` — an echo service on the async, owned-buffer API (tokio).
//!
//! `async_echo server [-d DEV] [-x GID_INDEX] [-p PORT] [-s SIZE]` serves
//! every client that connects, until killed (messages up to SIZE bytes,
//! 64 KiB by default; it registers [`POOL_BUFFERS`] buffers of SIZE, 64 MiB
//! by default, and says so when it starts). A client whose messages are
//! larger is refused, with an error on both sides naming both sizes (see
//! `size.rs`). Each connection is a reliable
//! channel whose receive stream hands each message's pool buffer straight
//! back to a send (frozen, not copied).
//!
//! `async_echo client [-d DEV] [-x GID_INDEX] [-p PORT] [--clients N]
//! [--messages M] [-s SIZE] HOST` runs N connections at once from one
//! process, each sending M messages of SIZE bytes one after the other and
//! checking every byte echoed; prints messages/s and the p50/p99 round
//! trip, and exits 0 only if every byte matched. With `--reconnect` a
//! connection that breaks is made again (backoff from 100 ms to 2 s, for as
//! long as `--timeout`) and the run resumes at the request that was lost;
//! lost requests are counted and reported (`N requests lost to broken
//! connections`), never dropped silently.
//!
//! Connections are set up over TCP (endpoint exchange); the TCP stream
//! stays open as the connection's liveness signal: when it closes, the
//! server shuts the channel down at once instead of waiting for the
//! channel's timeout.
//!
//! The server closes a connection that stays silent for its `--timeout`
//! (30 s by default): each holds receive buffers of the shared pool, and a
//! client whose host died sends no disconnect. Its own idle timer does it
//! (the channel's stall watchdog counts only sends in flight, not receives
//! waiting for a quiet peer: see `SharedChannel::with_timeout`); the end is
//! reported as an error with the client's address.
//!
//! With `--cm` (both sides) connections are made through the RDMA
//! connection manager instead, as futures end to end: the server awaits
//! `Listener::incoming_async_within` and `Incoming::accept_async`, the
//! client `Connector::resolve_in_async` and `connect_async`, all clients
//! share the one protection domain and pool of the device, and a client
//! that leaves is seen through the CM's disconnect. No thread is blocked
//! and no `spawn_blocking` is needed.

mod client;
mod size;

use clap::{Parser, Subcommand};
use rdma_examples::device::open_checked;
use rdma_examples::fail;
use rdma_examples::flags::{DeviceFlags, GidIndex, Timeout};
use rdma_examples::limit::Limit;
use rdma_examples::{cli, net, Result};
use rdma_safe::owned::Request;
use rdma_safe::work::WcStatus;
use rdma_safe::{
    cm::Acceptance, cm::CmOptions, BufferPool, Channel, Listener, ProtectionDomain, SharedChannel,
};
use std::process::ExitCode;
use std::time::Duration;

/// Receives each connection keeps posted.
const RX_DEPTH: usize = 16;
/// The largest message (the server's buffers are this big).
const MAX_SIZE: u64 = 1 << 20;
/// The buffers of the server's one pool: [`RX_DEPTH`] receives for each
/// of up to 64 connections at once (more wait for buffers), and the ones
/// on their way back out.
const POOL_BUFFERS: usize = 64 * RX_DEPTH;

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
        /// largest message accepted, at most 1M (default 64K); the server
        /// registers 1024 buffers of this size when it starts (64 MiB by
        /// default) and refuses clients whose messages are larger
        #[arg(short = 's', long = "size", value_name = "SIZE", default_value = "64K", hide_default_value = true,
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
        /// when a connection breaks, connect again (with backoff, for as
        /// long as --timeout) and resume at the lost request, which is
        /// counted and reported
        #[arg(long = "reconnect")]
        reconnect: bool,
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
    /// Connect again when a connection breaks.
    reconnect: bool,
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
            reconnect,
            host,
        } => rt.block_on(client::client(
            common,
            Load {
                clients,
                messages,
                size,
                reconnect,
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
    // One pool for every connection, pinned for the server's life.
    let pool = BufferPool::new(&pd, size, POOL_BUFFERS)?;
    eprintln!(
        "async_echo: registered {POOL_BUFFERS} buffers of {size} bytes ({:.1} MiB) for messages \
         up to {size} bytes (-s)",
        (POOL_BUFFERS * size) as f64 / (1 << 20) as f64
    );
    if o.cm {
        return serve_cm(pd, o, pool, size).await;
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
        let (stream, peer) = match tokio::task::spawn_blocking(move || accepted.accept())
            .await
            .map_err(fail)?
        {
            Ok(conn) => conn,
            Err(e) => {
                eprintln!("async_echo: accepting a connection failed: {e}");
                continue;
            }
        };
        eprintln!("async_echo: client {peer}");
        let (pd, o, pool) = (pd.clone(), o.clone(), pool.clone());
        let idle = o.timeout.timeout;
        tokio::spawn(async move {
            let handshake = tokio::task::spawn_blocking(move || -> Result<_> {
                let mut stream = stream;
                size::server_tcp(&mut stream, size, o.timeout.timeout)?;
                let channel = connect(&pd, &o, &mut stream)?;
                Ok((stream, channel))
            })
            .await;
            let outcome = match handshake {
                Ok(Ok((stream, channel))) => serve(stream, channel, pool, idle).await,
                Ok(Err(e)) => Err(e),
                Err(e) => Err(fail(e)),
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
/// `pool`, for messages up to `limit` bytes; a request that fails costs
/// only itself.
async fn serve_cm(pd: ProtectionDomain, o: Options, pool: BufferPool, limit: usize) -> Result<()> {
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
        let idle = o.timeout.timeout;
        tokio::spawn(async move {
            let outcome = async {
                let asked = size::decode(incoming.private_data()).unwrap_or(0);
                if let Err(refused) = size::server_check(asked, limit) {
                    // Accepted, with the limit, so the client learns it;
                    // dropping the channel disconnects at once.
                    drop(incoming.accept_async(&size::encode(limit)).await?);
                    return Err(refused);
                }
                // The receives go up before the accept: the client sends as
                // soon as it is accepted, which can be seconds before this
                // side sees the connection established (a lost RTU).
                let (channel, acceptance) = incoming.prepare()?;
                let shared = channel.shared().with_tokio()?;
                let echoed = echo_all(&shared, pool, idle, Some((acceptance, limit))).await?;
                eprintln!("async_echo: connection closed after {echoed} messages");
                Ok::<_, rdma_safe::Error>(())
            };
            if let Err(e) = outcome.await {
                eprintln!("async_echo: client {peer:?}: connection ended: {e}");
            }
        });
    }
}

/// Echoes every message that arrives on `shared` until its receive stream
/// ends (the peer left, or the channel was shut down) or fails; returns how
/// many it echoed. A connection
/// silent for `idle` (the server's --timeout) is closed: it holds
/// [`RX_DEPTH`] of the pool's buffers, so silent clients must not keep
/// them for good (a host that died without a disconnect is silent too).
///
/// With an `acceptance` (a CM request whose channel was made first), the
/// stream's receives are posted before it accepts, with the server's
/// message size limit.
async fn echo_all(
    shared: &SharedChannel,
    pool: BufferPool,
    idle: Duration,
    acceptance: Option<(Acceptance, usize)>,
) -> Result<u64> {
    let mut messages = shared.receive_stream(pool, RX_DEPTH);
    if let Some((acceptance, limit)) = acceptance {
        messages.post_now()?;
        acceptance.accept_async(&size::encode(limit)).await?;
    }
    let mut echoed = 0u64;
    loop {
        let item = match tokio::time::timeout(idle, messages.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(_) => {
                return Err(fail(format!(
                    "idle for {idle:?} after {echoed} messages: connection closed"
                )))
            }
        };
        let (_, buf) = match item {
            Ok(item) => item,
            // Flushed by `SharedChannel::shutdown` (the TCP watcher of
            // `serve`: the client left): the end of the connection.
            Err(e) if e.status() == Some(WcStatus::WrFlushError) => break,
            // Anything else ends the connection with its error, reported
            // with the peer's address: a receive that failed, or the
            // channel's stall watchdog (an echo that made no progress for
            // its timeout) that shut it down.
            Err(e) => return Err(e),
        };
        // The received buffer goes back out as is: no copy.
        let (sent, _) = shared.submit(Request::send(buf.freeze())).await;
        sent?;
        echoed += 1;
    }
    Ok(echoed)
}

/// Echoes every message of one connection until it fails or its TCP
/// stream closes.
async fn serve(
    stream: std::net::TcpStream,
    channel: Channel,
    pool: BufferPool,
    idle: Duration,
) -> Result<()> {
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
    let echoed = echo_all(&shared, pool, idle, None).await;
    watcher.abort();
    let echoed = echoed?;
    eprintln!("async_echo: connection closed after {echoed} messages");
    Ok(())
}
