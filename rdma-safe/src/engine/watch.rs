//! Watching a device's asynchronous events: which queue pairs, completion
//! queues and ports the device declared broken, whether the whole device
//! failed, and the port changes a reconnecting caller looks at.
//!
//! A context has one async event queue, shared by every queue pair on it, so
//! one [`DeviceWatch`] per context (found through a process-wide registry)
//! drains it and remembers what concerns each object. The engine asks it
//! when a wait reads its clock, as it asks the queue pair's state: a queue
//! pair whose own event, CQ's event, port's event or device's event says it
//! can no longer work fails its pending work at once instead of at the
//! timeout. (rxe moves a queue pair to the error state without raising
//! these events; the state check covers it there.)
//!
//! Events are numbered as they are read. A queue pair remembers the number
//! reached when it was made ([`Watched`]): only a later event about its
//! objects concerns it. So an object id or port event from before the
//! channel existed (a destroyed CQ whose address is reused, a port flap a
//! reconnecting caller already saw) never fails a new channel.

use rdma_core::{AsyncEvent, Context, CqId, SrqId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// What the events so far said about one context's objects.
#[derive(Debug, Default)]
struct Record {
    /// Events read so far: the number of the latest.
    seq: u64,
    /// Queue pairs the device declared broken: the event and its number.
    broken_qps: HashMap<u32, (AsyncEvent, u64)>,
    /// Completion queues the device declared broken.
    broken_cqs: HashMap<CqId, (AsyncEvent, u64)>,
    /// The latest port error of each port.
    port_errors: HashMap<u8, (AsyncEvent, u64)>,
    /// The changes seen on each port.
    ports: HashMap<u8, PortEvents>,
    /// The device failed: every queue pair on it, made before or after,
    /// is done for.
    device_fatal: bool,
    /// Shared receive queues whose limit event arrived and was not taken.
    srq_limits: HashSet<SrqId>,
}

/// How many of each port event a device reported since its first channel
/// was made, as [`Channel::port_events`](crate::Channel::port_events)
/// reads them: a caller that reconnects after a port error or a GID
/// change compares two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortEvents {
    /// `IBV_EVENT_PORT_ERR`: the port went down. Every channel on the port
    /// made before it failed with [`Error::DeviceEvent`](crate::Error::DeviceEvent).
    pub errors: u64,
    /// `IBV_EVENT_PORT_ACTIVE`: the port came (back) up.
    pub active: u64,
    /// `IBV_EVENT_GID_CHANGE`: the port's GID table changed. Channels made
    /// from now on look the GID up again (they always do); existing ones
    /// go on.
    pub gid_changes: u64,
    /// Whether the latest of the port's up and down events says it is
    /// up (`true` before any).
    pub up: bool,
}

impl Record {
    fn note(&mut self, event: AsyncEvent) {
        self.seq += 1;
        let seq = self.seq;
        match event {
            AsyncEvent::DeviceFatal => self.device_fatal = true,
            AsyncEvent::SrqLimitReached { srq } => {
                self.srq_limits.insert(srq);
            }
            AsyncEvent::CqError { cq } => {
                self.broken_cqs.entry(cq).or_insert((event, seq));
            }
            AsyncEvent::PortError { port } => {
                self.port_errors.insert(port, (event, seq));
                let p = self.port(port);
                p.errors += 1;
                p.up = false;
            }
            AsyncEvent::PortActive { port } => {
                let p = self.port(port);
                p.active += 1;
                p.up = true;
            }
            AsyncEvent::GidChange { port } => self.port(port).gid_changes += 1,
            e if e.is_fatal() => {
                if let Some(qp) = e.qp_num() {
                    self.broken_qps.entry(qp).or_insert((e, seq));
                }
            }
            // Informational events (communication established, LID or
            // P_Key changes) carry no verdict on a queue pair.
            e => log::debug!("async event: {e}"),
        }
    }

    fn port(&mut self, port: u8) -> &mut PortEvents {
        self.ports.entry(port).or_insert(PortEvents {
            up: true,
            ..PortEvents::default()
        })
    }

    /// The event that ends the queue pair `key` watches: the device's
    /// fatal error whenever it came, else its own, its CQ's or its port's
    /// if it came after the queue pair was made.
    fn verdict(&self, key: &Key) -> Option<AsyncEvent> {
        let after = |&(event, seq): &(AsyncEvent, u64)| (seq > key.since).then_some(event);
        if self.device_fatal {
            return Some(AsyncEvent::DeviceFatal);
        }
        self.broken_qps
            .get(&key.qp_num)
            .and_then(after)
            .or_else(|| {
                key.cq
                    .and_then(|cq| self.broken_cqs.get(&cq))
                    .and_then(after)
            })
            .or_else(|| self.port_errors.get(&key.port).and_then(after))
    }
}

/// Which objects one queue pair's verdict looks at.
#[derive(Debug, Clone, Copy)]
struct Key {
    qp_num: u32,
    cq: Option<CqId>,
    port: u8,
    /// The number of the last event read before the queue pair was made.
    since: u64,
}

/// The async-event record of one context.
#[derive(Debug)]
pub(crate) struct DeviceWatch {
    context: Context,
    record: Mutex<Record>,
}

/// Live watches by context address.
type Registry = Mutex<Vec<(usize, Weak<DeviceWatch>)>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is a single insert; a panic elsewhere leaves it whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DeviceWatch {
    /// The watch of `context`'s device, shared with every other channel on
    /// the same context.
    pub(crate) fn of(context: &Context) -> Arc<DeviceWatch> {
        let key = context.as_ptr() as usize;
        let mut watches = lock(registry());
        watches.retain(|(_, w)| w.strong_count() > 0);
        if let Some(w) = watches
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            return w;
        }
        let watch = Arc::new(DeviceWatch {
            context: context.clone(),
            record: Mutex::new(Record::default()),
        });
        watches.push((key, Arc::downgrade(&watch)));
        watch
    }

    /// The watch of a queue pair about to be made on `port` of
    /// `context`'s device: events read from now on concern it (those
    /// pending are read first, so that they do not).
    pub(crate) fn for_port(context: &Context, port: u8) -> Watched {
        let watch = DeviceWatch::of(context);
        let since = watch.drain().seq;
        Watched {
            watch,
            port,
            since,
            key: OnceLock::new(),
        }
    }

    /// Drains the pending events (without blocking) and takes the limit
    /// event of `srq`, if one arrived since it was last taken.
    pub(crate) fn take_srq_limit(&self, srq: SrqId) -> bool {
        self.drain().srq_limits.remove(&srq)
    }

    /// Drains the pending events and reads what `port` saw.
    pub(crate) fn port_events(&self, port: u8) -> PortEvents {
        self.drain().port(port).to_owned()
    }

    fn drain(&self) -> MutexGuard<'_, Record> {
        let mut record = lock(&self.record);
        loop {
            match self.context.try_get_async_event() {
                Ok(Some(event)) => record.note(event),
                Ok(None) => break,
                Err(e) => {
                    log::warn!("reading async events failed: {e}");
                    break;
                }
            }
        }
        record
    }
}

/// One queue pair's view of its device's watch.
#[derive(Debug)]
pub(crate) struct Watched {
    watch: Arc<DeviceWatch>,
    port: u8,
    since: u64,
    /// Set once the queue pair and its CQ are known.
    key: OnceLock<Key>,
}

impl Watched {
    /// Names the queue pair and its CQ (`None`: a CQ the device names in
    /// no event this crate acts on).
    pub(crate) fn set_queue(&self, qp_num: u32, cq: Option<CqId>) {
        let _ = self.key.set(Key {
            qp_num,
            cq,
            port: self.port,
            since: self.since,
        });
    }

    /// Drains the pending events (without blocking) and returns the one
    /// that ends this queue pair, if the device reported one since it was
    /// made.
    pub(crate) fn verdict(&self) -> Option<AsyncEvent> {
        let key = self.key.get()?;
        self.watch.drain().verdict(key)
    }

    /// What the queue pair's port saw (see [`PortEvents`]).
    pub(crate) fn port_events(&self) -> PortEvents {
        self.watch.port_events(self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(qp_num: u32, since: u64) -> Key {
        Key {
            qp_num,
            cq: None,
            port: 1,
            since,
        }
    }

    #[test]
    fn fatal_events_mark_their_queue_pair_only() {
        let mut r = Record::default();
        r.note(AsyncEvent::CommEstablished { qp_num: 7 });
        r.note(AsyncEvent::PortActive { port: 1 });
        r.note(AsyncEvent::GidChange { port: 1 });
        assert_eq!(r.verdict(&key(7, 0)), None, "informational events");
        r.note(AsyncEvent::QpAccessError { qp_num: 7 });
        r.note(AsyncEvent::QpFatal { qp_num: 7 });
        let first = AsyncEvent::QpAccessError { qp_num: 7 };
        assert_eq!(r.verdict(&key(7, 0)), Some(first), "the first verdict");
        assert_eq!(r.verdict(&key(8, 0)), None, "another queue pair");
        assert_eq!(r.verdict(&key(7, r.seq)), None, "a queue pair made since");
        r.note(AsyncEvent::DeviceFatal);
        assert_eq!(r.verdict(&key(8, 0)), Some(AsyncEvent::DeviceFatal));
        let later = key(9, r.seq);
        assert_eq!(r.verdict(&later), Some(AsyncEvent::DeviceFatal), "for good");
    }

    #[test]
    fn port_errors_mark_the_queue_pairs_made_before_them() {
        let mut r = Record::default();
        let on = |port, since| Key {
            qp_num: 1,
            cq: None,
            port,
            since,
        };
        let since = r.seq;
        r.note(AsyncEvent::PortError { port: 2 });
        r.note(AsyncEvent::PortActive { port: 2 });
        assert_eq!(
            r.verdict(&on(2, since)),
            Some(AsyncEvent::PortError { port: 2 }),
            "the port came back, but its old queue pairs' paths broke"
        );
        assert_eq!(r.verdict(&on(1, since)), None, "another port");
        assert_eq!(r.verdict(&on(2, r.seq)), None, "made after the flap");
        let p = *r.port(2);
        assert_eq!((p.errors, p.active, p.gid_changes, p.up), (1, 1, 0, true));
        r.note(AsyncEvent::PortError { port: 2 });
        assert!(!r.port(2).up);
    }
}
