//! A one-sided table reader over the RDMA connection manager: the server
//! exposes one table of fixed-size entries to every client from one
//! protection domain, and clients fetch entries with RDMA reads — the
//! server's CPU takes no part in a lookup.
//!
//! The table is a [`RemoteAccessBuffer`]: memory peers may read (and
//! write) at any time, registered without `unsafe` because Rust reaches it
//! only through atomic copies. The server sends its region with the accept
//! (private data), so no side channel is needed. Blocking calls
//! throughout; one thread per side only to run both in one process.
//!
//! `kv_reader` runs a server and four clients on `$RXE_DEVICE` (default
//! `rxe0`) at `$RXE_IPV4` (default `10.0.2.15`); `cargo xtask test-rxe`
//! runs it (rdma-safe's `examples` test).

use rdma_safe::{
    cm::CmOptions, Listener, ProtectionDomain, ReadWorkRequest, ReceiveWorkRequest,
    RegisteredBuffer, RemoteAccessBuffer, RemoteMemoryRegion, SendWorkRequest,
};
use std::net::SocketAddr;

/// Entries in the table, and the bytes of one.
const ENTRIES: usize = 64;
const ENTRY: usize = 256;

/// Entry `k`: its key in the first bytes, then bytes derived from it.
pub(crate) fn entry(k: usize) -> Vec<u8> {
    let mut e: Vec<u8> = (0..ENTRY).map(|i| (k * 31 + i * 7) as u8).collect();
    e[..8].copy_from_slice(&(k as u64).to_le_bytes());
    e
}

/// Serves the table to `clients` clients, each until it says it is done.
pub(crate) fn server(
    pd: &ProtectionDomain,
    listener: Listener,
    clients: usize,
) -> rdma_safe::Result<()> {
    let table = RemoteAccessBuffer::new(pd, ENTRIES * ENTRY)?;
    for k in 0..ENTRIES {
        table.write(k * ENTRY, &entry(k))?;
    }
    // Every connection is in `pd` (the listener's): the one table serves
    // them all.
    let mut channels = Vec::new();
    for _ in 0..clients {
        let incoming = listener.incoming()?;
        channels.push(incoming.accept(&table.remote().to_bytes())?);
    }
    // Each client's one message: it has finished reading.
    let mut done = RegisteredBuffer::new(pd, 1)?;
    for channel in &mut channels {
        channel.receive(ReceiveWorkRequest::new(&mut [done.scatter(..)]))?;
    }
    Ok(())
}

/// Connects, reads `keys` from the table, and tells the server it is done.
pub(crate) fn client(addr: SocketAddr, keys: &[usize]) -> rdma_safe::Result<Vec<Vec<u8>>> {
    let mut channel = rdma_safe::Channel::connect_to_with(addr, &[], &CmOptions::default())?;
    // The accept's private data: the table's region, then the transport's
    // zero padding (which `from_bytes` accepts).
    let table = RemoteMemoryRegion::from_bytes(channel.peer_private_data().unwrap_or_default())?;
    let mut buf = RegisteredBuffer::new(channel.pd(), ENTRY)?;
    let mut found = Vec::new();
    for &k in keys {
        let at = table.slice((k * ENTRY) as u64, ENTRY as u64)?;
        channel.read(ReadWorkRequest::new(&mut [buf.scatter(..)], at))?;
        found.push(buf.to_vec());
    }
    let done = RegisteredBuffer::register(channel.pd(), vec![1u8])?;
    channel.send(SendWorkRequest::new(&[done.gather(..)]))?;
    Ok(found)
}

/// A server and four clients in one process; checks every entry read.
pub(crate) fn both(device: &str, ip: &str) -> rdma_safe::Result<()> {
    const CLIENTS: usize = 4;
    let pd = ProtectionDomain::open(device)?;
    let listener = Listener::bind_in(&pd, format!("{ip}:0"), &CmOptions::default())?;
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let server = std::thread::spawn(move || server(&pd, listener, CLIENTS));
    let readers: Vec<_> = (0..CLIENTS)
        .map(|c| {
            std::thread::spawn(move || {
                let keys: Vec<usize> = (0..16).map(|i| (c * 17 + i * 5) % ENTRIES).collect();
                client(addr, &keys).map(|found| (keys, found))
            })
        })
        .collect();
    for reader in readers {
        let (keys, found) = reader.join().expect("client thread")?;
        for (k, got) in keys.iter().zip(&found) {
            assert_eq!(got, &entry(*k), "entry {k}");
        }
    }
    server.join().expect("server thread")?;
    println!("kv_reader: {CLIENTS} clients read 16 entries each, every byte checked");
    Ok(())
}

#[allow(dead_code)] // the `examples` test includes this file and calls `both`
fn main() -> rdma_safe::Result<()> {
    let device = std::env::var("RXE_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let ip = std::env::var("RXE_IPV4").unwrap_or_else(|_| "10.0.2.15".into());
    both(&device, &ip)
}
