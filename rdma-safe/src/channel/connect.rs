//! Connecting a channel to its peer: directly from an [`Endpoint`], or by
//! exchanging endpoints over a stream.

use super::Channel;
use crate::endpoint::Endpoint;
use crate::error::Result;
use crate::exchange::{self, HandshakeError};
use crate::memory::remote::RemoteMemoryRegion;
use rdma_core::{AddressVector, Mtu, RtrParams, RtsParams};
use std::io;
use std::net::TcpStream;

/// Connection attributes of a reliable connection (the RTR and RTS
/// attributes of `ibv_modify_qp(3)`). The defaults suit most uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Service level (default 0).
    pub service_level: u8,
    /// GRH hop limit (default 64).
    pub hop_limit: u8,
    /// GRH traffic class (default 0).
    pub traffic_class: u8,
    /// Path MTU (default: the smaller of the two ports' active MTUs).
    pub path_mtu: Option<Mtu>,
    /// RDMA reads/atomics this side may have outstanding (default 16).
    pub max_rd_atomic: u8,
    /// RDMA reads/atomics the peer may have outstanding here (default 16).
    pub max_dest_rd_atomic: u8,
    /// Local ACK timeout exponent: 4.096 µs · 2^timeout (default 17 ≈
    /// 0.54 s: a loaded host, or a long path, does not time out while it is
    /// only slow; perftest's 14, 67 ms, failed connections of a loaded
    /// emulated CI machine with retry count 6). It is also how long a lost
    /// packet that no later packet reveals (the last of a burst, a read
    /// response) waits for its retransmission: on a link that drops
    /// packets a lower value keeps throughput up (measured across two
    /// emulated hosts: RDMA reads of 64 KiB at 5–6 MB/s with 14, 1.3–3.6
    /// with 17), at the price of declaring a slow peer dead sooner.
    pub timeout: u8,
    /// Transport retries (default 6). With the default timeout a dead path
    /// fails the oldest request with `WcStatus::RetryExceeded` after
    /// 4.096 µs · 2^17 · (6 + 1) ≈ 3.8 s (the spec's figure; measured on
    /// rxe: see the README). 7 is the most the transport carries, and rxe
    /// takes 7 as "retry forever": a dead path is then noticed only by the
    /// channel's timeout.
    pub retry_count: u8,
    /// Receiver-not-ready retries (default 7 = unlimited; the channel's
    /// timeout still bounds every wait).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (default 12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            service_level: 0,
            hop_limit: 64,
            traffic_class: 0,
            path_mtu: None,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            timeout: 17,
            retry_count: 6,
            rnr_retry: 7,
            min_rnr_timer: 12,
        }
    }
}

impl Channel {
    /// Connects to the peer `remote` (RTR then RTS, with a GRH on RoCE)
    /// with the builder's [`connect_options`](super::ChannelBuilder::connect_options)
    /// ([`ConnectOptions::default`] unless set). The peer must connect to
    /// [`local_endpoint`](Self::local_endpoint) too before data flows; see
    /// [`handshake`](Self::handshake).
    pub fn connect(&mut self, remote: &Endpoint) -> Result<()> {
        let opts = self.connect_opts;
        self.connect_with(remote, &opts)
    }

    /// Connects to the peer `remote` with explicit connection attributes.
    ///
    /// Of `remote`, the QP number, PSN, LID, GID and MTU are used; its `port`
    /// and `gid_index` describe the peer's side and are informational here
    /// (the local port and GID index are the channel's own).
    pub fn connect_with(&mut self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        let qp = &self.queue.qp;
        let mut av = if self.needs_grh || !remote.gid.is_zero() {
            AddressVector::global(self.local.port, remote.gid, self.local.gid_index)
        } else {
            AddressVector::local(self.local.port, remote.lid)
        };
        av.sl = opts.service_level;
        if let Some(grh) = av.grh.as_mut() {
            grh.hop_limit = opts.hop_limit;
            grh.traffic_class = opts.traffic_class;
        }
        let mut rtr = RtrParams::new(remote.qp_num, remote.psn, av);
        rtr.path_mtu = opts
            .path_mtu
            .unwrap_or_else(|| self.local.mtu.min(remote.mtu));
        rtr.max_dest_rd_atomic = opts.max_dest_rd_atomic;
        rtr.min_rnr_timer = opts.min_rnr_timer;
        qp.to_rtr(&rtr)?;
        let mut rts = RtsParams::new(self.local.psn);
        rts.timeout = opts.timeout;
        rts.retry_cnt = opts.retry_count;
        rts.rnr_retry = opts.rnr_retry;
        rts.max_rd_atomic = opts.max_rd_atomic;
        qp.to_rts(&rts)?;
        self.remote = Some(*remote);
        Ok(())
    }

    /// Exchanges endpoints with the peer over `stream`, connects, and waits
    /// until the peer has connected too (so the first message cannot arrive
    /// before its queue pair is ready). Both sides call this. The whole
    /// exchange is bounded by the channel's [timeout](Self::timeout); the
    /// stream's own timeouts are restored afterwards.
    ///
    /// # Errors
    /// `Handshake(Timeout)` for a silent or stopped peer,
    /// `Handshake(Io)` for a closed stream or garbage
    /// (`InvalidData`), `Handshake(Connect)` when the queue pair
    /// cannot be connected to the peer's endpoint.
    pub fn handshake(&mut self, stream: &mut TcpStream) -> crate::Result<Endpoint> {
        let remote = Endpoint::exchange(stream, &self.local, self.timeout)?;
        self.connect(&remote)?;
        let ack = exchange::swap(stream, b"R", self.timeout)?;
        if &ack != b"R" {
            return Err(crate::Error::from(HandshakeError::Io(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad ready byte from peer",
            ))));
        }
        Ok(remote)
    }

    /// Sends `region` to the peer over `stream` (e.g. after
    /// [`handshake`](Self::handshake)), within the channel's timeout; the
    /// peer calls [`receive_region`](Self::receive_region).
    ///
    /// # Errors
    /// As [`handshake`](Self::handshake), without `Connect`.
    pub fn send_region(
        &self,
        stream: &mut TcpStream,
        region: &RemoteMemoryRegion,
    ) -> crate::Result<()> {
        region.send_to(stream, self.timeout)
    }

    /// Receives the region the peer sent with
    /// [`send_region`](Self::send_region), within the channel's timeout.
    ///
    /// # Errors
    /// As [`handshake`](Self::handshake), without `Connect`; bytes that are
    /// not a region are `InvalidData`.
    pub fn receive_region(&self, stream: &mut TcpStream) -> crate::Result<RemoteMemoryRegion> {
        RemoteMemoryRegion::receive_from(stream, self.timeout)
    }

    /// Connects two channels to each other (loopback, or two channels of one
    /// process on different devices).
    pub fn connect_pair(a: &mut Channel, b: &mut Channel) -> Result<()> {
        let (ea, eb) = (a.local, b.local);
        a.connect(&eb)?;
        b.connect(&ea)
    }
}
