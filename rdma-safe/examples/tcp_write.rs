//! RDMA write to a peer over TCP: the server exposes a region, the client
//! writes it and reads it back — one error type, `?` throughout.
//!
//! `tcp_write server PORT` and `tcp_write client HOST:PORT` run the two
//! sides; without arguments both run in this process over loopback TCP. The
//! device is `$RXE_DEVICE` (default `rxe0`). `cargo xtask test-rxe` runs it
//! (rdma-safe's `examples` test).

use rdma_safe::{
    MemoryRegion, ProtectionDomain, ReadWorkRequest, RegisteredBuffer, WriteWorkRequest,
};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// Exposes 4 KiB to one client until it says it is done; returns what the
/// client wrote there.
pub(crate) fn server(pd: &ProtectionDomain, listener: TcpListener) -> rdma_safe::Result<Vec<u8>> {
    let (mut stream, _) = listener.accept()?;
    let mut channel = pd.create_channel()?;
    channel.handshake(&mut stream)?;
    let mut exposed = vec![0u8; 4096];
    // SAFETY: `exposed` outlives `region` (dropped below), and Rust does not
    // touch it while the client may write or read it (until its "done").
    let region = unsafe { MemoryRegion::register_shared_mr(pd, exposed.as_mut_ptr(), 4096) }?;
    channel.send_region(&mut stream, &region.remote())?;
    stream.set_read_timeout(Some(channel.timeout()))?;
    stream.read_exact(&mut [0u8; 1])?; // the client is done
    drop(region);
    Ok(exposed)
}

/// Writes a message into the server's region and reads it back.
pub(crate) fn client(pd: &ProtectionDomain, server: &str) -> rdma_safe::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(server)?;
    let mut channel = pd.create_channel()?;
    channel.handshake(&mut stream)?;
    let remote = channel.receive_region(&mut stream)?;
    let message = RegisteredBuffer::register(pd, b"written by RDMA".to_vec())?;
    channel.write(WriteWorkRequest::new(&[message.gather(..)], remote))?;
    let mut back = RegisteredBuffer::new(pd, message.len())?;
    channel.read(ReadWorkRequest::new(&mut [back.scatter(..)], remote))?;
    stream.write_all(b"D")?;
    Ok(back.to_vec())
}

/// Both sides in one process, over loopback TCP; checks the bytes.
pub(crate) fn both(device: &str) -> rdma_safe::Result<()> {
    let pd = ProtectionDomain::open(device)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    let server_pd = pd.clone();
    let server = std::thread::spawn(move || server(&server_pd, listener));
    let back = client(&pd, &addr)?;
    let exposed = server.join().expect("server thread")?;
    assert_eq!(&back[..], b"written by RDMA", "read back");
    assert_eq!(
        &exposed[..back.len()],
        b"written by RDMA",
        "landed in the server"
    );
    assert!(
        exposed[back.len()..].iter().all(|&b| b == 0),
        "nothing past it"
    );
    println!("tcp_write: wrote and read back {} bytes", back.len());
    Ok(())
}

#[allow(dead_code)] // the `examples` test includes this file and calls `both`
fn main() -> rdma_safe::Result<()> {
    let device = std::env::var("RXE_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", port] => {
            let pd = ProtectionDomain::open(&device)?;
            let exposed = server(
                &pd,
                TcpListener::bind(("0.0.0.0", port.parse().unwrap_or(18600)))?,
            )?;
            println!(
                "{}",
                String::from_utf8_lossy(&exposed).trim_end_matches('\0')
            );
            Ok(())
        }
        ["client", addr] => {
            let back = client(&ProtectionDomain::open(&device)?, addr)?;
            println!("{}", String::from_utf8_lossy(&back));
            Ok(())
        }
        [] => both(&device),
        _ => {
            eprintln!("usage: tcp_write [server PORT | client HOST:PORT]");
            std::process::exit(2)
        }
    }
}
