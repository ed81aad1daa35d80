//! Watching a device's asynchronous events: which queue pairs the device
//! declared broken, and whether the whole device failed.
//!
//! A context has one async event queue, shared by every queue pair on it, so
//! one [`DeviceWatch`] per context (found through a process-wide registry)
//! drains it and remembers what concerns each queue pair. The engine asks
//! it when a wait has spun a while, as it asks the queue pair's state: a
//! queue pair the device declared fatal fails its pending work at once
//! instead of at the timeout. (rxe moves a queue pair to the error state
//! without raising these events; the state check covers it there.)

use rdma_core::{AsyncEvent, Context, SrqId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// What the events so far said about one context's objects.
#[derive(Debug, Default)]
struct Record {
    /// Queue pairs the device declared broken, with the event's name.
    broken_qps: HashMap<u32, &'static str>,
    /// The device itself failed.
    device_fatal: bool,
    /// Shared receive queues whose limit event arrived and was not taken.
    srq_limits: HashSet<SrqId>,
}

impl Record {
    fn note(&mut self, event: &AsyncEvent) {
        match event {
            AsyncEvent::DeviceFatal => self.device_fatal = true,
            AsyncEvent::SrqLimitReached { srq } => {
                self.srq_limits.insert(*srq);
            }
            e if e.is_fatal() => {
                if let Some(qp) = e.qp_num() {
                    self.broken_qps.entry(qp).or_insert(e.name());
                }
            }
            // Informational events (port changes, communication
            // established) carry no verdict on a queue pair.
            e => log::debug!("async event: {e}"),
        }
    }

    fn verdict(&self, qp_num: u32) -> Option<String> {
        if self.device_fatal {
            return Some("the device reported a fatal error".to_owned());
        }
        self.broken_qps
            .get(&qp_num)
            .map(|name| format!("the device reported {name} on queue pair {qp_num}"))
    }
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

    /// Drains the pending events (without blocking) and says why `qp_num`
    /// can no longer work, if the device said so.
    pub(crate) fn broken(&self, qp_num: u32) -> Option<String> {
        self.drain().verdict(qp_num)
    }

    /// Drains the pending events (without blocking) and takes the limit
    /// event of `srq`, if one arrived since it was last taken.
    pub(crate) fn take_srq_limit(&self, srq: SrqId) -> bool {
        self.drain().srq_limits.remove(&srq)
    }

    fn drain(&self) -> MutexGuard<'_, Record> {
        let mut record = lock(&self.record);
        loop {
            match self.context.try_get_async_event() {
                Ok(Some(event)) => record.note(&event),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_events_mark_their_queue_pair_only() {
        let mut r = Record::default();
        r.note(&AsyncEvent::CommEstablished { qp_num: 7 });
        r.note(&AsyncEvent::PortError { port: 1 });
        assert_eq!(r.verdict(7), None, "informational events are no verdict");
        r.note(&AsyncEvent::QpAccessError { qp_num: 7 });
        r.note(&AsyncEvent::QpFatal { qp_num: 7 });
        let why = r.verdict(7).expect("qp 7 is broken");
        assert!(why.contains("queue pair 7"), "{why}");
        assert_eq!(r.verdict(8), None, "another queue pair is unaffected");
        r.note(&AsyncEvent::DeviceFatal);
        assert!(r.verdict(8).expect("device fatal").contains("device"));
    }
}
