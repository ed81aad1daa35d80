//! Connecting over a real TCP connection with `Channel::handshake`, then
//! transferring; garbage from the peer is an error, never a panic.

mod common;

use common::*;
use rdma_safe::{
    channel::Endpoint, channel::ENDPOINT_ENCODED_LEN, error::EndpointDecodeError,
    error::HandshakeError, memory::REMOTE_REGION_ENCODED_LEN, Channel, Error, ReceiveWorkRequest,
    RemoteMemoryRegion, SendWorkRequest, WriteWorkRequest,
};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn handshake_over_tcp_then_send_and_write() {
    const LEN: usize = 100_000;
    let pd = pd();
    let mut server = pd.create_channel().expect("server channel");
    let mut client = pd.create_channel().expect("client channel");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();

    let msg = pattern(seed("handshake send", LEN), LEN);
    let block = pattern(seed("handshake write", LEN), LEN);
    let mut received = vec![FILL; LEN];
    let mut exposed = vec![FILL; LEN];

    std::thread::scope(|t| {
        // Server: receives a message, then exposes a buffer for a write.
        let server_side = t.spawn(|| {
            let (mut stream, _) = listener.accept().expect("accept");
            let client_ep = server.handshake(&mut stream).expect("server handshake");
            assert_eq!(server.remote_endpoint(), Some(client_ep));
            // Borrowed registration: `received` is lent to it until it is
            // dropped at the end of this closure.
            let mut rx = registered(&pd, &mut received[..]);
            server
                .scope(|s| {
                    let mut scatter = [rx.scatter(..)];
                    let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
                    stream.write_all(b"posted").unwrap();
                    let got = recv.wait()?;
                    assert_eq!(got.bytes(), LEN);
                    Ok::<_, Error>(())
                })
                .expect("server receive");
            // SAFETY: `exposed` outlives `exposed_mr` (dropped at the end of
            // this closure) and is not touched by Rust until the client says
            // it is done.
            let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
            stream.write_all(&exposed_mr.remote().to_bytes()).unwrap();
            let mut done = [0u8; 4];
            stream.read_exact(&mut done).unwrap();
            assert_eq!(&done, b"done");
            drop(exposed_mr);
            assert_quiescent(&server, "server");
        });

        // Client: sends, then writes into the server's buffer.
        let mut stream = TcpStream::connect(addr).expect("connect");
        let server_ep = client.handshake(&mut stream).expect("client handshake");
        assert_eq!(client.remote_endpoint(), Some(server_ep));
        let msg_buf = registered(&pd, msg.clone());
        let mut ready = [0u8; 6];
        stream.read_exact(&mut ready).unwrap();
        assert_eq!(&ready, b"posted");
        client
            .send(SendWorkRequest::new(&[msg_buf.gather(..)]))
            .expect("client send");
        let mut region = [0u8; REMOTE_REGION_ENCODED_LEN];
        stream.read_exact(&mut region).unwrap();
        let remote = RemoteMemoryRegion::from_bytes(&region).expect("remote region");
        assert_eq!(remote.length(), LEN as u64);
        let block_buf = registered(&pd, block.clone().into_boxed_slice());
        client
            .write(WriteWorkRequest::new(&[block_buf.gather(..)], remote))
            .expect("client write");
        stream.write_all(b"done").unwrap();
        server_side.join().expect("server thread");
        assert_quiescent(&client, "client");
    });
    assert_bytes(&received, &msg, "sent over the handshaken connection");
    assert_bytes(&exposed, &block, "written over the handshaken connection");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn handshake_with_a_peer_sending_garbage_fails() {
    let pd = pd();
    let mut channel = pd.create_channel().expect("channel");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let liar = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut theirs = [0u8; ENDPOINT_ENCODED_LEN];
        stream.read_exact(&mut theirs).unwrap();
        // Their endpoint decodes; ours is garbage of the right length.
        assert!(Endpoint::from_bytes(&theirs).is_ok());
        stream.write_all(&[0x5a; ENDPOINT_ENCODED_LEN]).unwrap();
    });
    let mut stream = TcpStream::connect(addr).expect("connect");
    match channel.handshake(&mut stream) {
        Err(Error::Handshake(HandshakeError::Io(e))) => {
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        }
        other => panic!("expected an InvalidData error, got {other:?}"),
    }
    liar.join().unwrap();
    assert!(channel.remote_endpoint().is_none());

    // A peer that hangs up half way.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let quitter = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        stream.write_all(&[b'R'; 10]).unwrap();
    });
    let mut stream = TcpStream::connect(addr).expect("connect");
    assert!(matches!(
        channel.handshake(&mut stream),
        Err(Error::Handshake(HandshakeError::Io(_)))
    ));
    quitter.join().unwrap();
    assert_quiescent(&channel, "channel");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn local_endpoint_round_trips() {
    let pd = pd();
    let channel = pd.create_channel().expect("channel");
    let ep = channel.local_endpoint();
    assert_eq!(Endpoint::from_bytes(&ep.to_bytes()).unwrap(), ep);
    assert!(ep.qp_num > 0 && ep.qp_num <= 0x00ff_ffff);
    assert_eq!(ep.gid, channel.gid().gid);
    let _ = Channel::builder().pd(&pd).build().expect("builder");
}

/// Needs no device: decoding is pure.
#[test]
fn endpoint_from_garbage_is_an_error() {
    assert_eq!(
        Endpoint::from_bytes(&[]).unwrap_err(),
        EndpointDecodeError::Length {
            got: 0,
            expected: ENDPOINT_ENCODED_LEN
        }
    );
    assert_eq!(
        Endpoint::from_bytes(&[0u8; ENDPOINT_ENCODED_LEN + 1]).unwrap_err(),
        EndpointDecodeError::Length {
            got: ENDPOINT_ENCODED_LEN + 1,
            expected: ENDPOINT_ENCODED_LEN
        }
    );
    assert_eq!(
        Endpoint::from_bytes(&[0u8; ENDPOINT_ENCODED_LEN]).unwrap_err(),
        EndpointDecodeError::Magic
    );
    assert_eq!(
        Endpoint::from_bytes(
            b"hello, this is not an endpoint!!!!!"[..]
                .get(..35)
                .unwrap()
        )
        .unwrap_err(),
        EndpointDecodeError::Length {
            got: 35,
            expected: ENDPOINT_ENCODED_LEN
        }
    );
    // Every byte pattern of the right length decodes or errors; none panics.
    for fill in 0..=255u8 {
        let mut b = [fill; ENDPOINT_ENCODED_LEN];
        b[..4].copy_from_slice(b"RDEP");
        let _ = Endpoint::from_bytes(&b);
    }
    for bytes in [
        &[][..],
        &[0u8; REMOTE_REGION_ENCODED_LEN][..],
        &[0xffu8; REMOTE_REGION_ENCODED_LEN + 1][..],
    ] {
        assert!(RemoteMemoryRegion::from_bytes(bytes).is_err());
    }
}
