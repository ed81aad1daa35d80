//! Fault injection at the verbs boundary, for tests (the `fault-injection`
//! feature, off by default).
//!
//! With the feature on, the data-path verbs this crate calls
//! ([`QueuePair::post_send_list`](crate::QueuePair::post_send_list),
//! [`post_recv_list`](crate::QueuePair::post_recv_list),
//! [`SharedReceiveQueue::post_recv_list`](crate::SharedReceiveQueue::post_recv_list),
//! [`CompQueue::poll`](crate::CompQueue::poll),
//! [`CompQueue::req_notify`](crate::CompQueue::req_notify)) and the control
//! verbs the safe layer uses (registration, QP/CQ/SRQ creation,
//! `ibv_modify_qp`) go through this layer, on top of the real provider.
//! With it off, none of this is compiled and those functions are what they
//! always were.
//!
//! # The schedule
//!
//! A [`Plan`] (a seed and rules: a [`Site`], a [`When`] and a [`Fault`]) is
//! [`install`]ed on a thread and injects faults into that thread's verbs
//! only, so parallel tests do not interfere. The faults play the failure
//! semantics of the providers the safe layer must survive:
//!
//! | fault | what the caller sees | what really happened |
//! | --- | --- | --- |
//! | [`Fault::bad_wr_at`]`(k)` (mlx5) | `EINVAL`, `bad_wr` = request k | requests before k posted, none after |
//! | [`Fault::queue_full_at`]`(k)` (mlx5) | `ENOMEM`, `bad_wr` = request k | as above |
//! | [`Fault::refused_doorbell`] (rxe) | `EINVAL`, `bad_wr` unset | every request posted |
//! | [`Fault::FlushAt`]`{ at }` | success | requests before `at` posted, the QP moved to ERR, the rest posted |
//! | [`Fault::PollError`] | `ibv_poll_cq` < 0 | nothing consumed |
//! | [`Fault::HoldCompletions`]`{ polls }` | that many empty polls | completions left on the CQ |
//! | [`Fault::Garble`] | an error completion with random undefined fields | the real completion |
//! | [`Fault::Refuse`]`{ errno }` | the control verb fails | nothing done |
//! | [`Fault::SmallerQp`] | a QP with smaller capacities than asked | asked for and reported smaller |
//! | [`Fault::Refuse`] at [`Site::AsyncEventRead`] | `ibv_get_async_event` fails | nothing read |
//! | [`Fault::Event`]`(event)` at any site | the next `ibv_get_async_event` on this thread returns `event` | nothing else: no state changes, no flush |
//!
//! An injected event names its object as the device would: a QP fatal its
//! queue pair's number, a CQ error the CQ's [`CqId`](crate::CqId), a port
//! error, port active or GID change the port, a device fatal nothing. It
//! is delivered through the same read the safe layer makes
//! ([`Context::try_get_async_event`](crate::Context::try_get_async_event)
//! and its waits), on the thread whose plan fired it, ahead of any event
//! of the device; the verb at the firing call runs unfaulted. The device
//! changes nothing (a queue pair named fatal stays ready to send), which
//! is the hardest case for the library: what it does about the event is
//! all that ends the work in flight.
//!
//! # The memory oracle
//!
//! Every request posted through this crate is recorded with the byte
//! ranges its SGEs name (read or written by the NIC) until the layer
//! delivers its completion from `ibv_poll_cq` (a send queue's completion
//! also ends the unsignaled requests before it), or the queue pair is moved
//! to RESET or destroyed. [`check_released`] and [`check_finished`] fail
//! the test, naming the request and the range, when memory a recorded
//! request names is handed back; the safe layer calls them (under the same
//! feature) wherever it gives memory back or ends a borrow.
//! Deregistering a memory region runs [`check_released`] over its range
//! here.

mod hooks;
mod oracle;
mod rng;
mod schedule;
#[cfg(test)]
mod tests;

pub(crate) use hooks::{
    async_event, clamp_caps, modified, modify, poll, post_recv, post_send, post_srq_recv, qp_caps,
    record_raw, refused, unrecord_raw,
};
pub(crate) use oracle::{attach_srq, discard_qp, discard_srq, Queue};
pub use oracle::{check_finished, check_released, in_flight, overlapping, unfinished, Violation};
pub use schedule::{install, Fault, Fired, Installed, Plan, Semantics, Site, When};
