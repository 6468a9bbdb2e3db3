//! How decisions reach the bus from the webhook's own thread: in batches.
//!
//! Publishing wakes the bus's subscribers. On the webhook's thread
//! ([`WebhookRuntime::Dedicated`](crate::WebhookRuntime)) they run on
//! another thread, so publishing each `AdmissionDecided` as it is decided
//! would wake that thread once per admission: at the rates the API server
//! sends (one request per wake-up) that doubles the context switches of an
//! admission. The batches are published by a task on the subscribers'
//! runtime instead, woken by a batch's first event. While batching, events wait up to [`FLUSH_DELAY`] (or until
//! [`MAX_PENDING`] are waiting) and reach the bus together; each keeps its
//! own `duration`, measured when it was decided.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use poolkeeper_bus::{Bus, Event};
use tokio::sync::Notify;

/// How long a decision may wait for the bus while batching: far below
/// anything that reads the events (metrics scrapes, Kubernetes Events).
pub(crate) const FLUSH_DELAY: Duration = Duration::from_millis(20);

/// Beyond this many waiting events the batch goes out at once, so that a
/// burst neither grows the buffer nor delays its events.
pub(crate) const MAX_PENDING: usize = 256;

/// Decisions on their way to the bus.
#[derive(Debug)]
pub(crate) struct Outbox {
    bus: Bus,
    batching: AtomicBool,
    pending: Mutex<Vec<Event>>,
    /// The first event of a batch wakes the flushing task.
    first: Notify,
}

impl Outbox {
    pub(crate) fn new(bus: Bus) -> Self {
        Self {
            bus,
            batching: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            first: Notify::new(),
        }
    }

    /// Publishes `event` now, or, while batching, with the next batch.
    pub(crate) fn publish(&self, event: Event) {
        if !self.batching.load(Ordering::Acquire) {
            self.bus.publish(event);
            return;
        }
        let waiting = {
            let mut pending = self.pending.lock();
            pending.push(event);
            pending.len()
        };
        if waiting >= MAX_PENDING {
            self.flush();
        } else if waiting == 1 {
            self.first.notify_one();
        }
    }

    /// Hands every waiting event to the bus.
    pub(crate) fn flush(&self) {
        let events = std::mem::take(&mut *self.pending.lock());
        for event in events {
            self.bus.publish(event);
        }
    }

    /// Batches until dropped, handing each batch to the bus
    /// [`FLUSH_DELAY`] after its first event.
    pub(crate) async fn batch(self: Arc<Self>) {
        self.batching.store(true, Ordering::Release);
        loop {
            self.first.notified().await;
            tokio::time::sleep(FLUSH_DELAY).await;
            self.flush();
        }
    }

    /// Publishes as decided from now on, and what was waiting at once.
    pub(crate) fn stop_batching(&self) {
        self.batching.store(false, Ordering::Release);
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolkeeper_bus::{AdmissionResult, Delivery, Mode, WebhookKind};

    fn decided() -> Event {
        Event::AdmissionDecided {
            webhook: WebhookKind::Validate,
            result: AdmissionResult::Allowed,
            mode: Mode::Enforce,
            reason: "test",
            duration: Duration::from_micros(5),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn batches_wait_for_the_delay_then_arrive_together() {
        let bus = Bus::default();
        let mut events = bus.subscribe("test");
        bus.start();
        let outbox = Arc::new(Outbox::new(bus.clone()));
        outbox.publish(decided());
        assert!(matches!(events.try_recv(), Some(Delivery::Event(_))));

        let batching = tokio::spawn(Arc::clone(&outbox).batch());
        tokio::task::yield_now().await;
        outbox.publish(decided());
        outbox.publish(decided());
        tokio::task::yield_now().await;
        assert!(events.try_recv().is_none(), "held for the delay");
        tokio::time::sleep(FLUSH_DELAY * 2).await;
        assert!(matches!(events.try_recv(), Some(Delivery::Event(_))));
        assert!(matches!(events.try_recv(), Some(Delivery::Event(_))));

        for _ in 0..MAX_PENDING {
            outbox.publish(decided());
        }
        let mut arrived = 0;
        while let Some(Delivery::Event(_)) = events.try_recv() {
            arrived += 1;
        }
        assert_eq!(arrived, MAX_PENDING, "a full batch goes out at once");

        outbox.publish(decided());
        outbox.stop_batching();
        assert!(matches!(events.try_recv(), Some(Delivery::Event(_))));
        batching.abort();
    }
}
