//! The client: N connections at once, each sending M messages one after
//! the other and checking every echoed byte; with `--reconnect`, a
//! connection that breaks is made again (with backoff) and the run resumes
//! at the request that was lost, which is counted and reported, never
//! dropped silently.

use super::{cm_options, connect, size, Load, Options, RX_DEPTH};
use rdma_examples::fail;
use rdma_examples::{net, pattern, stats, Result};
use rdma_safe::owned::Request;
use rdma_safe::{
    cm::Connector, owned::RecvStream, BufferPool, Channel, ProtectionDomain, SharedChannel,
};
use std::time::{Duration, Instant};

/// The first wait before connecting again, doubled up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// The longest one reconnection attempt may take (a connect request into
/// a dead path waits for the CM's own retransmission otherwise).
const ATTEMPT_MAX: Duration = Duration::from_secs(3);

/// What one connection's client did.
#[derive(Debug, Default)]
struct Run {
    /// Round trips in microseconds, one per message echoed and checked.
    rtts: Vec<f64>,
    /// Requests whose connection broke before their echo was checked (each
    /// sent again on the next connection).
    lost: usize,
    /// Connections made again.
    reconnects: usize,
}

/// Why a connection's exchange stopped.
enum Stop {
    /// The connection broke (a failed send or receive, the channel closed):
    /// with `--reconnect`, connect again and resume.
    Broken(rdma_safe::Error),
    /// An echo was wrong: final.
    Wrong(rdma_safe::Error),
}

pub(super) async fn client(o: Options, load: Load, host: String) -> Result<()> {
    let pd = rdma_examples::device::open_pd(o.device.ib_dev.as_deref())?;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..load.clients {
        let (pd, o, host) = (pd.clone(), o.clone(), host.clone());
        tasks.spawn(async move { one_client(c, pd, o, load, host).await });
    }
    let mut rtts = Vec::with_capacity(load.clients * load.messages);
    let (mut failures, mut lost, mut reconnects) = (0usize, 0usize, 0usize);
    while let Some(r) = tasks.join_next().await {
        match r.map_err(fail)? {
            Ok(mut run) => {
                rtts.append(&mut run.rtts);
                lost += run.lost;
                reconnects += run.reconnects;
            }
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
    if reconnects > 0 || lost > 0 {
        println!(
            "{lost} requests lost to broken connections (errors, each sent again), \
             {reconnects} reconnects"
        );
    }
    if failures > 0 {
        return Err(fail(format!(
            "{failures} of {} clients failed",
            load.clients
        )));
    }
    Ok(())
}

/// One client: its messages over one connection, or with `--reconnect`
/// over as many as it takes.
async fn one_client(
    c: usize,
    pd: ProtectionDomain,
    o: Options,
    load: Load,
    host: String,
) -> Result<Run> {
    let tx_pool = BufferPool::new(&pd, load.size, 2)?;
    let mut run = Run {
        rtts: Vec::with_capacity(load.messages),
        ..Run::default()
    };
    let mut next = 0;
    loop {
        let (stream, channel) = if run.reconnects == 0 {
            let conn = connect_once(&pd, &o, &host, load.size).await?;
            if load.reconnect {
                eprintln!("async_echo: client {c}: connected");
            }
            conn
        } else {
            connect_again(c, &pd, &o, &host, load.size).await?
        };
        let shared: SharedChannel = channel.shared().with_tokio()?;
        // A pool per connection: the buffers of a broken one come back
        // only once its queue pair is flushed.
        let rx_pool = BufferPool::new(&pd, load.size, RX_DEPTH)?;
        let mut echoes = shared.receive_stream(rx_pool, RX_DEPTH);
        let outcome = exchange(c, &shared, &mut echoes, &tx_pool, load, &mut next, &mut run).await;
        drop(echoes);
        // Tells the server this connection is done (with --cm, dropping
        // the channel disconnects).
        drop(stream);
        drop(channel);
        match outcome {
            Ok(()) => return Ok(run),
            Err(Stop::Broken(e)) if load.reconnect => {
                run.lost += 1;
                run.reconnects += 1;
                eprintln!(
                    "async_echo: client {c}: connection lost at message {next} ({e}); reconnecting"
                );
            }
            Err(Stop::Broken(e) | Stop::Wrong(e)) => return Err(e),
        }
    }
}

/// Sends messages `*next..` one at a time on `shared`, checking each echo.
async fn exchange(
    c: usize,
    shared: &SharedChannel,
    echoes: &mut RecvStream,
    tx_pool: &BufferPool,
    load: Load,
    next: &mut usize,
    run: &mut Run,
) -> std::result::Result<(), Stop> {
    while *next < load.messages {
        let i = *next;
        let seed = ((c as u64) << 32) | i as u64;
        let mut buf = tx_pool.alloc().await;
        buf.set_len(load.size);
        pattern::fill(&mut buf, seed, 0);
        let t = Instant::now();
        let (sent, _) = shared.submit(Request::send(buf.freeze())).await;
        sent.map_err(Stop::Broken)?;
        let (got, echo) = echoes
            .next()
            .await
            .ok_or_else(|| Stop::Broken(fail("the channel closed")))?
            .map_err(Stop::Broken)?;
        run.rtts.push(t.elapsed().as_secs_f64() * 1e6);
        if got.bytes() != load.size {
            return Err(Stop::Wrong(fail(format!(
                "client {c}: echo {i} has {} bytes, not {}",
                got.bytes(),
                load.size
            ))));
        }
        pattern::check(&echo, seed, 0)
            .map_err(|e| Stop::Wrong(fail(format!("client {c}: echo {i}: {e}"))))?;
        *next += 1;
    }
    Ok(())
}

/// The first connection (the TCP path keeps its stream open as the
/// connection's liveness signal).
async fn connect_once(
    pd: &ProtectionDomain,
    o: &Options,
    host: &str,
    size: usize,
) -> Result<(Option<std::net::TcpStream>, Channel)> {
    if o.cm {
        let channel = connect_cm(pd, o, host, size).await?;
        let limit = channel.peer_private_data().and_then(size::decode);
        size::client_check(size, limit)?;
        return Ok((None, channel));
    }
    let (o2, pd2, host) = (o.clone(), pd.clone(), host.to_owned());
    let (stream, channel) = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut stream = net::connect(&host, o2.port, net::CONNECT_RETRY, o2.timeout.timeout)?;
        size::client_tcp(&mut stream, size, o2.timeout.timeout)?;
        let channel = connect(&pd2, &o2, &mut stream)?;
        Ok((stream, channel))
    })
    .await
    .map_err(fail)??;
    Ok((Some(stream), channel))
}

/// A connection made again after one broke: tried with backoff (from
/// [`BACKOFF_START`], doubling up to [`BACKOFF_MAX`]), each attempt given
/// at most [`ATTEMPT_MAX`] (an abandoned CM connect leaves nothing
/// behind), for as long as the timeout; the last failure when none
/// succeeded in that time.
async fn connect_again(
    c: usize,
    pd: &ProtectionDomain,
    o: &Options,
    host: &str,
    size: usize,
) -> Result<(Option<std::net::TcpStream>, Channel)> {
    let start = Instant::now();
    let mut wait = BACKOFF_START;
    loop {
        tokio::time::sleep(wait).await;
        let attempt = tokio::time::timeout(ATTEMPT_MAX, connect_once(pd, o, host, size))
            .await
            .unwrap_or_else(|_| Err(fail(format!("no answer within {ATTEMPT_MAX:?}"))));
        match attempt {
            Ok(conn) => {
                eprintln!(
                    "async_echo: client {c}: reconnected after {:.1} s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(conn);
            }
            Err(e) if start.elapsed() < o.timeout.timeout => {
                eprintln!("async_echo: client {c}: reconnecting failed ({e}); trying again");
                wait = (wait * 2).min(BACKOFF_MAX);
            }
            Err(e) => {
                return Err(fail(format!(
                    "client {c}: no connection again within {:?}: {e}",
                    o.timeout.timeout
                )))
            }
        }
    }
}

/// A CM connection to `host`, in `pd`. A server that is not listening yet
/// (the CM's reject) is tried again for [`net::CONNECT_RETRY`], as the TCP
/// path retries a refused connection; any other failure is final.
async fn connect_cm(
    pd: &ProtectionDomain,
    o: &Options,
    host: &str,
    size: usize,
) -> Result<Channel> {
    let start = Instant::now();
    loop {
        let attempt = async {
            Connector::resolve_in_async(pd, (host, o.port), &cm_options(o))
                .await?
                .connect_async(&size::encode(size))
                .await
        };
        match attempt.await {
            Ok(channel) => return Ok(channel),
            Err(rdma_safe::Error::Verbs(rdma_safe::error::VerbsError::Cm { event, .. }))
                if event == "RDMA_CM_EVENT_REJECTED" && start.elapsed() < net::CONNECT_RETRY =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(fail(e)),
        }
    }
}
