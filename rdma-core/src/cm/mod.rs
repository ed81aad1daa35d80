//! The RDMA connection manager (librdmacm): connecting queue pairs by IP
//! address and port instead of exchanging QP numbers and GIDs by hand.
//!
//! A [`CmId`] is the CM's socket; its [`EventChannel`] delivers typed
//! [`CmEvent`]s. Every step that waits for the CM (resolving, connecting,
//! accepting, waiting for a request) takes a timeout.

mod addr;
mod connect;
mod devices;
mod event;
mod event_channel;
mod id;

pub use connect::ConnectParams;
pub use event::{CmEvent, ConnParams, ConnectRequest};
pub use event_channel::EventChannel;
pub use id::{CmId, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};
