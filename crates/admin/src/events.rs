//! The `/debug/events` ring: the last bus events, fed by a lossy
//! subscription of its own.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use poolkeeper_bus::{Delivery, Envelope, Event, Subscription};
use serde::Serialize;
use serde::ser::SerializeMap;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub(crate) enum Entry {
    Event(Arc<Envelope>),
    /// The ring's subscription fell behind and missed this many events here.
    Lagged(u64),
}

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Entry::Event(envelope) => envelope.as_ref().serialize(serializer),
            Entry::Lagged(missed) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("lagged", missed)?;
                map.end()
            }
        }
    }
}

#[derive(Debug)]
struct Ring {
    capacity: usize,
    entries: VecDeque<Entry>,
    /// The last `AuditCompleted`, kept beyond the ring for `/debug/audit`.
    last_audit: Option<Arc<Envelope>>,
}

impl Ring {
    fn push(&mut self, delivery: Delivery) {
        if let Delivery::Event(envelope) = &delivery
            && matches!(envelope.event, Event::AuditCompleted { .. })
        {
            self.last_audit = Some(envelope.clone());
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(match delivery {
            Delivery::Event(envelope) => Entry::Event(envelope),
            Delivery::Lagged(missed) => Entry::Lagged(missed),
        });
    }
}

/// The handlers' side of the ring.
#[derive(Clone, Debug)]
pub(crate) struct EventLog {
    ring: Arc<Mutex<Ring>>,
    /// Asks the feeder to take in everything already published.
    catch_up: mpsc::Sender<oneshot::Sender<()>>,
}

impl EventLog {
    /// The log and the feeder that fills it from `subscription` until
    /// `stop` is cancelled.
    pub(crate) fn new(
        capacity: usize,
        subscription: Subscription,
        stop: CancellationToken,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let ring = Arc::new(Mutex::new(Ring {
            capacity: capacity.max(1),
            entries: VecDeque::new(),
            last_audit: None,
        }));
        let (catch_up, requests) = mpsc::channel(64);
        let feeder = feed(subscription, ring.clone(), requests, stop);
        (Self { ring, catch_up }, feeder)
    }

    /// The last `limit` entries (all when `None`), oldest first, including
    /// every event published before this call.
    pub(crate) async fn last(&self, limit: Option<usize>) -> Vec<Entry> {
        self.catch_up().await;
        let ring = self.ring.lock();
        let limit = limit.unwrap_or(ring.entries.len()).min(ring.entries.len());
        ring.entries
            .iter()
            .skip(ring.entries.len() - limit)
            .cloned()
            .collect()
    }

    /// The last audit round, including one published before this call.
    pub(crate) async fn last_audit(&self) -> Option<Arc<Envelope>> {
        self.catch_up().await;
        self.ring.lock().last_audit.clone()
    }

    async fn catch_up(&self) {
        let (done, caught_up) = oneshot::channel();
        // If the feeder has stopped there is nothing more to wait for.
        if self.catch_up.send(done).await.is_ok() {
            let _ = caught_up.await;
        }
    }
}

async fn feed(
    mut subscription: Subscription,
    ring: Arc<Mutex<Ring>>,
    mut requests: mpsc::Receiver<oneshot::Sender<()>>,
    stop: CancellationToken,
) {
    let mut requests_open = true;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            request = requests.recv(), if requests_open => match request {
                Some(done) => {
                    while let Some(delivery) = subscription.try_recv() {
                        ring.lock().push(delivery);
                    }
                    let _ = done.send(());
                }
                None => requests_open = false,
            },
            delivery = subscription.next_delivery() => ring.lock().push(delivery),
        }
    }
}
