//! The typed in-process event bus.
//!
//! One [`Bus`] handle (cheap to clone) fans every published [`Event`] out to
//! every [`Subscription`]. Guarantees:
//! - events published before [`Bus::start`] are held and delivered, in order,
//!   once it is called, so components can subscribe at construction time;
//! - every subscriber sees every event in publish order, or is told it
//!   lagged ([`Delivery::Lagged`]) — never a silent loss;
//! - publishing never blocks: a full buffer drops the oldest event for the
//!   subscribers that have not read it yet, and they get the lag notice;
//! - publishing with no subscriber is fine.

mod event;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use async_broadcast::{InactiveReceiver, RecvError, Sender, TrySendError};
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Serialize;

pub use event::{
    AdmissionResult, AuditCount, AuditViolation, BindingRejection, Change, ClassOutcome,
    Constraints, EnqueueReason, Event, EventName, Mode, ObjectKey, REPORT_RESULTS_PER_NAMESPACE,
    RejectedBinding, Requeue, ResourceKind, TriggerReason, WebhookKind,
};
pub use strum::IntoEnumIterator;

/// Default number of events a subscriber may fall behind before it lags.
pub const DEFAULT_CAPACITY: usize = 8192;

/// An event as delivered: its position in publish order and when it was published.
#[derive(Clone, Debug, Serialize)]
pub struct Envelope {
    pub seq: u64,
    #[serde(serialize_with = "serialize_time")]
    pub published_at: SystemTime,
    pub event: Event,
}

fn serialize_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime_serde::re::humantime::format_rfc3339_millis(*t).to_string())
}

/// What a subscriber receives.
#[derive(Clone, Debug)]
pub enum Delivery {
    Event(Arc<Envelope>),
    /// `n` events were dropped before this subscriber read them.
    Lagged(u64),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubscriberLabels {
    subscriber: String,
}

#[derive(Default)]
struct Metrics {
    published: Family<EventLabels, Counter>,
    lagged: Family<SubscriberLabels, Counter>,
}

struct Inner {
    sender: Sender<Arc<Envelope>>,
    /// Keeps the channel open while nobody is subscribed.
    _keepalive: InactiveReceiver<Arc<Envelope>>,
    started: AtomicBool,
    /// Events published before `start`, and the lock that orders them
    /// against the flush.
    pending: Mutex<Vec<Arc<Envelope>>>,
    seq: AtomicU64,
    metrics: Metrics,
    /// One counter per catalog entry, resolved once so publishing skips the
    /// label lookup; indexed by [`EventName`].
    published_by_name: Vec<Counter>,
}

/// Handle to the bus. Clone it freely.
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("started", &self.is_started())
            .field("published", &self.inner.seq.load(Ordering::Relaxed))
            .finish()
    }
}

impl Bus {
    /// A bus on which each subscriber may fall `capacity` events behind
    /// before it lags.
    pub fn new(capacity: usize) -> Self {
        let (mut sender, receiver) = async_broadcast::broadcast(capacity.max(1));
        sender.set_overflow(true);
        sender.set_await_active(false);
        let metrics = Metrics::default();
        let published_by_name = EventName::iter()
            .map(|name| {
                metrics
                    .published
                    .get_or_create(&EventLabels {
                        event: name.as_str(),
                    })
                    .clone()
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                sender,
                _keepalive: receiver.deactivate(),
                started: AtomicBool::new(false),
                pending: Mutex::new(Vec::new()),
                seq: AtomicU64::new(0),
                metrics,
                published_by_name,
            }),
        }
    }

    /// Registers `events_published_total{event}` and
    /// `events_lagged_total{subscriber}` in `registry` (the binary passes its
    /// `poolkeeper_bus` sub-registry).
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "events_published",
            "Events published on the bus, by event",
            self.inner.metrics.published.clone(),
        );
        registry.register(
            "events_lagged",
            "Events a subscriber missed because it fell behind, by subscriber",
            self.inner.metrics.lagged.clone(),
        );
    }

    /// Subscribes to every event published from now on (and to the ones held
    /// back before [`Bus::start`]). `name` labels the lag metric.
    pub fn subscribe(&self, name: impl Into<String>) -> Subscription {
        let subscriber = name.into();
        let lagged = self
            .inner
            .metrics
            .lagged
            .get_or_create(&SubscriberLabels {
                subscriber: subscriber.clone(),
            })
            .clone();
        Subscription {
            name: subscriber,
            receiver: self.inner.sender.new_receiver(),
            lagged,
        }
    }

    /// Releases the events held since construction, in publish order, and
    /// delivers later events directly.
    pub fn start(&self) {
        let mut pending = self.inner.pending.lock();
        for envelope in pending.drain(..) {
            self.send(envelope);
        }
        self.inner.started.store(true, Ordering::Release);
    }

    pub fn is_started(&self) -> bool {
        self.inner.started.load(Ordering::Acquire)
    }

    /// Publishes `event` to every subscriber. Never blocks.
    pub fn publish(&self, event: Event) {
        self.inner.published_by_name[EventName::from(&event) as usize].inc();
        if self.is_started() {
            let envelope = self.envelope(event);
            self.send(envelope);
            return;
        }
        let mut pending = self.inner.pending.lock();
        // `start` may have run while we waited for the lock.
        let envelope = self.envelope(event);
        if self.is_started() {
            drop(pending);
            self.send(envelope);
        } else {
            pending.push(envelope);
        }
    }

    fn envelope(&self, event: Event) -> Arc<Envelope> {
        Arc::new(Envelope {
            seq: self.inner.seq.fetch_add(1, Ordering::Relaxed),
            published_at: SystemTime::now(),
            event,
        })
    }

    fn send(&self, envelope: Arc<Envelope>) {
        match self.inner.sender.try_broadcast(envelope) {
            // `Some` is the oldest event, dropped for the subscribers that had
            // not read it yet; they learn it through `Delivery::Lagged`.
            Ok(_) => {}
            // Nobody is subscribed: there is no one to tell.
            Err(TrySendError::Inactive(_)) => {}
            Err(TrySendError::Closed(_)) | Err(TrySendError::Full(_)) => {
                unreachable!("the bus keeps its channel open and overflows instead of filling")
            }
        }
    }
}

/// One subscriber's view of the bus.
#[derive(Debug)]
pub struct Subscription {
    name: String,
    receiver: async_broadcast::Receiver<Arc<Envelope>>,
    lagged: Counter,
}

impl Subscription {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next delivery, or `None` once every [`Bus`] handle is gone.
    pub async fn recv(&mut self) -> Option<Delivery> {
        match self.receiver.recv_direct().await {
            Ok(envelope) => Some(Delivery::Event(envelope)),
            Err(RecvError::Overflowed(n)) => {
                self.lagged.inc_by(n);
                Some(Delivery::Lagged(n))
            }
            Err(RecvError::Closed) => None,
        }
    }

    /// The next delivery; once every [`Bus`] handle is gone, never resolves.
    /// The one way a component's loop reads the bus: the loop selects on
    /// this beside its cancellation (and its own sources), so a closed bus
    /// needs no flag and no branch of its own: nothing arrives any more, and
    /// the loop ends on cancellation as the process stops.
    pub async fn next_delivery(&mut self) -> Delivery {
        match self.recv().await {
            Some(delivery) => delivery,
            None => std::future::pending().await,
        }
    }

    /// A delivery if one is waiting, without blocking.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        match self.receiver.try_recv() {
            Ok(envelope) => Some(Delivery::Event(envelope)),
            Err(async_broadcast::TryRecvError::Overflowed(n)) => {
                self.lagged.inc_by(n);
                Some(Delivery::Lagged(n))
            }
            Err(_) => None,
        }
    }

    /// Total events this subscriber missed by lagging.
    pub fn lagged_total(&self) -> u64 {
        self.lagged.get()
    }
}

#[cfg(test)]
mod tests;
