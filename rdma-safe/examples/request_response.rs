//! A low-latency request/response loop: a server that reads each request
//! and answers it, and a client that checks every answer byte for byte,
//! each a plain loop in one polling scope.
//!
//! The buffers are lent to one operation at a time
//! ([`PollingScope::post_receive_lent`], [`PollingScope::post_send_lent`])
//! and come back from its handle when it completes, so the server reads
//! the request it just received, writes the reply into the buffer its last
//! send gave back, and posts the receive again, all in the same scope.
//! What makes it fast is in the crate's performance guide
//! (`rdma_safe::docs::performance`): the calling thread busy-polls (the
//! default), 64-byte messages go inline, nothing is allocated or locked in
//! the loop, and the clock is read once before and once after it.
//!
//! Run on a soft-RoCE device: `cargo xtask vm -- target/debug/examples/request_response`
//! (or natively: `cargo run --release -p rdma-safe --example request_response -- rxe0`).
//!
//! [`PollingScope::post_receive_lent`]: rdma_safe::PollingScope::post_receive_lent
//! [`PollingScope::post_send_lent`]: rdma_safe::PollingScope::post_send_lent

use rdma_safe::{Channel, Error, ProtectionDomain, RegisteredBuffer};
use std::time::Instant;

/// Bytes of every request and reply.
const SIZE: usize = 64;
/// Requests the client sends.
const ROUNDS: usize = 1000;

#[allow(dead_code)] // the `examples` test includes this file and calls `run`
fn main() -> Result<(), Error> {
    let device = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("RXE_DEVICE").ok())
        .unwrap_or_else(|| "rxe0".into());
    run(&device)
}

/// The whole program on `device`: the server on a thread of its own, the
/// client on this one, over two connected channels.
pub(crate) fn run(device: &str) -> Result<(), Error> {
    let pd = ProtectionDomain::open(device)?;
    // Messages this small go inline: the NIC takes them from the request
    // itself instead of reading them from memory.
    let build = || pd.channel_builder().max_inline_data(SIZE as u32).build();
    let (mut client, mut server) = (build()?, build()?);
    Channel::connect_pair(&mut client, &mut server)?;
    let server_pd = pd.clone();
    let served = std::thread::spawn(move || serve(&server_pd, &mut server, ROUNDS));
    let asked = ask(&pd, &mut client, ROUNDS);
    let served = served.join().expect("the server thread panicked");
    let took = asked?;
    served?;
    println!(
        "request_response: {ROUNDS} requests of {SIZE} bytes answered and checked, \
         {:.2} us per half round trip on average",
        took.as_secs_f64() * 1e6 / ROUNDS as f64 / 2.0
    );
    Ok(())
}

/// The reply to `request`: every byte inverted (so a reply that is the
/// request echoed, or stale, is caught).
fn answer(request: &[u8], reply: &mut [u8]) {
    for (r, q) in reply.iter_mut().zip(request) {
        *r = !q;
    }
}

/// Serves `rounds` requests on `ch`: receive one, read it, answer it.
fn serve(pd: &ProtectionDomain, ch: &mut Channel, rounds: usize) -> Result<(), Error> {
    let mut request = RegisteredBuffer::new(pd, SIZE)?;
    let mut reply = RegisteredBuffer::new(pd, SIZE)?;
    let (request_mr, request_buf) = request.split_mut();
    let (reply_mr, reply_buf) = reply.split_mut();
    ch.scope(|s| {
        // Moved in: each buffer is lent for the scope, and given back.
        let mut reply_buf = reply_buf;
        let mut next = Some(s.post_receive_lent(request_mr, request_buf)?);
        for i in 0..rounds {
            let Some(pending) = next.take() else { break };
            // The request's buffer comes back once it has arrived.
            let (got, request) = pending.wait()?;
            let n = got.bytes();
            answer(&request[..n], &mut reply_buf[..n]);
            // The next request's receive goes up before the reply leaves
            // (after the last request, nobody sends: none is posted).
            if i + 1 < rounds {
                next = Some(s.post_receive_lent(request_mr, request)?);
            }
            let (_, back) = s.post_send_lent(reply_mr, reply_buf, n)?.wait()?;
            reply_buf = back;
        }
        Ok::<_, Error>(())
    })?;
    Ok(())
}

/// Sends `rounds` requests on `ch`, each checked against its reply byte
/// for byte; how long they took together.
fn ask(
    pd: &ProtectionDomain,
    ch: &mut Channel,
    rounds: usize,
) -> Result<std::time::Duration, Error> {
    let mut request = RegisteredBuffer::new(pd, SIZE)?;
    let mut reply = RegisteredBuffer::new(pd, SIZE)?;
    let (request_mr, request_buf) = request.split_mut();
    let (reply_mr, reply_buf) = reply.split_mut();
    let mut expected = [0u8; SIZE];
    let start = Instant::now();
    ch.scope(|s| {
        // Moved in: each buffer is lent for the scope, and given back.
        let (mut request_buf, mut reply_buf) = (request_buf, reply_buf);
        for i in 0..rounds {
            for (k, b) in request_buf.iter_mut().enumerate() {
                *b = (i * 31 + k * 7) as u8;
            }
            answer(request_buf, &mut expected);
            // The reply's receive first: the answer may come at once.
            let replied = s.post_receive_lent(reply_mr, reply_buf)?;
            let (_, sent) = s.post_send_lent(request_mr, request_buf, SIZE)?.wait()?;
            let (got, reply) = replied.wait()?;
            if reply[..got.bytes()] != expected {
                return Err(Error::Io(std::io::Error::other(format!(
                    "reply {i} is not the answer to its request: {:02x?}",
                    &reply[..got.bytes()]
                ))));
            }
            (request_buf, reply_buf) = (sent, reply);
        }
        Ok::<_, Error>(())
    })?;
    Ok(start.elapsed())
}
