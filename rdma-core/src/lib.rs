//! Owned handles over the objects of `libibverbs`.
//!
//! Every verbs object is one type in one file, owned through the small
//! [`Wrapper<T: Deleter>`](Wrapper) model: a `NonNull` pointer released by its
//! destroy verb on `Drop` (a failed destroy is logged, never a panic).
//!
//! ```text
//! DeviceList ─► Device ─► Context ─┬─► ProtectionDomain ─┬─► MemoryRegion
//!                                  │                     ├─► QueuePair ◄── CompQueue(s), SharedReceiveQueue
//!                                  │                     ├─► AddressHandle
//!                                  │                     └─► SharedReceiveQueue
//!                                  ├─► CompChannel ◄── CompQueue
//!                                  └─► CompQueue
//! CmId (connection manager) ─► Context (lent by librdmacm) ─► …as above
//! ```
//!
//! # Ownership: children keep their parents alive
//!
//! One model everywhere: a child holds a reference-counted clone of each
//! parent handle (`Context`, `ProtectionDomain`, `CompChannel`, `CompQueue`,
//! `SharedReceiveQueue` are cheap `Arc` clones). A parent is therefore
//! destroyed only after its last child, so objects may be dropped in any
//! order, and destroy verbs never fail with `EBUSY` because of ordering.
//!
//! # What is `unsafe` here
//!
//! This layer does not track which memory the NIC may touch: registering
//! memory ([`MemoryRegion::register`]) and posting work requests
//! ([`QueuePair::post_send_list`], [`QueuePair::post_recv_list`],
//! [`SharedReceiveQueue::post_recv_list`], built from [`SendRequest`],
//! [`RecvRequest`] and [`Sge`]) are `unsafe`, with the contract written
//! on each. The `rdma-safe` crate builds a borrow-checked API on top.
//!
//! # Errors
//!
//! Every failure is an [`Error`]: the verb that failed and its errno, or a
//! work completion's status with a hint of its usual cause.
//!
//! # Features
//!
//! `fault-injection` (off by default, for tests): the `fault` module, a
//! fault-injecting layer over the verbs this crate calls and a memory
//! oracle that fails a test when memory a posted request names is handed
//! back. Off, nothing of it is compiled.

mod ah;
mod async_event;
mod cm;
mod comp_channel;
mod context;
mod cq;
mod device;
mod device_caps;
mod error;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod fd;
mod gid;
mod mr;
mod mw;
mod pd;
mod port;
mod qp;
mod qp_builder;
mod qp_ex;
mod srq;
mod wc;
mod wr;
mod wrapper;

pub use ah::{AddressHandle, AddressVector, GlobalRoute};
pub use async_event::{AsyncEvent, CqId, SrqId, WqId};
pub use cm::{
    CmEvent, CmId, ConnParams, ConnectParams, ConnectRequest, EventChannel,
    MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
pub use comp_channel::CompChannel;
pub use context::{Context, DeviceAttr};
pub use cq::CompQueue;
pub use device::{Device, DeviceList, NodeType, TransportType};
pub use device_caps::OdpCaps;
pub use error::{Error, PostError, Result};
pub use gid::{Gid, GidEntry, GidType};
pub use mr::{AccessFlags, MemoryRegion};
pub use mw::{MemoryWindow, MwType};
pub use pd::ProtectionDomain;
pub use port::{LinkLayer, Mtu, PortAttr, PortState};
pub use qp::{QpState, QpType, QueuePair, RtrParams, RtsParams};
pub use qp_builder::{QpCapabilities, QueuePairBuilder};
pub use qp_ex::{QueuePairEx, SendOps, WrBatch};
pub use srq::SharedReceiveQueue;
pub use wc::{WcOpcode, WcStatus, WorkCompletion};
pub use wr::{RecvRequest, SendFlags, SendOpcode, SendRequest, Sge};
pub use wrapper::{Deleter, Wrapper};

/// The raw bindings this crate is built on.
pub use ibverbs_sys as sys;

/// The crate README's program compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeProgram;
