//! [`DatagramOptions`]: how a [`DatagramEndpoint`](crate::DatagramEndpoint)
//! is set up — its port and GID, the service level of the datagrams it
//! sends, and whether its waits sleep on completion events.

/// Options of [`DatagramEndpoint::with_options`](crate::DatagramEndpoint::with_options).
///
/// ```
/// # use rdma_safe::datagram::DatagramOptions;
/// let o = DatagramOptions::default().port(1).service_level(3).completion_events(true);
/// assert_eq!((o.port, o.service_level, o.completion_events), (1, 3, true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DatagramOptions {
    /// Device port (default 1).
    pub port: u8,
    /// Local GID index to send from (default: the port's RoCE v2 IPv4 GID,
    /// else its first).
    pub gid_index: Option<u32>,
    /// Service level of the address handles made by
    /// [`peer`](crate::DatagramEndpoint::peer) (default 0): on InfiniBand
    /// the virtual lane, on RoCE the priority the device maps it to.
    pub service_level: u8,
    /// Sleep on the completion queue's events while waiting instead of
    /// polling it (default false; `-e` of rdma-core's examples).
    pub completion_events: bool,
}

impl Default for DatagramOptions {
    fn default() -> Self {
        DatagramOptions {
            port: 1,
            gid_index: None,
            service_level: 0,
            completion_events: false,
        }
    }
}

impl DatagramOptions {
    /// Device port.
    pub fn port(mut self, port: u8) -> Self {
        self.port = port;
        self
    }
    /// Local GID index (`None`: the port's preferred GID).
    pub fn gid_index(mut self, index: Option<u32>) -> Self {
        self.gid_index = index;
        self
    }
    /// Service level of the datagrams sent (0 to 15).
    pub fn service_level(mut self, sl: u8) -> Self {
        self.service_level = sl;
        self
    }
    /// Whether waits sleep on completion events.
    pub fn completion_events(mut self, on: bool) -> Self {
        self.completion_events = on;
        self
    }
}
