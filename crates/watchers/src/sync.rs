//! Publishes `IndexSynchronized` once every watched kind has synced, and is
//! the `index` readiness check until then.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use poolkeeper_bus::{Bus, Delivery, Event, ResourceKind, Subscription};
use poolkeeper_supervisor::{BoxError, Component, Context};

/// The `/readyz` check the tracker's readiness appears as.
const INDEX_CHECK: &str = "index";

/// The kinds whose first list is complete, shared by the watchers and the
/// tracker so that a lagging tracker subscription loses nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct SyncedKinds {
    inner: Arc<Mutex<BTreeSet<ResourceKind>>>,
}

impl SyncedKinds {
    pub(crate) fn insert(&self, kind: ResourceKind) {
        self.inner.lock().insert(kind);
    }

    #[cfg(test)]
    pub(crate) fn contains_all(&self, kinds: &BTreeSet<ResourceKind>) -> bool {
        let synced = self.inner.lock();
        kinds.iter().all(|kind| synced.contains(kind))
    }

    /// The kinds of `expected` not synced yet, in order.
    fn missing(&self, expected: &BTreeSet<ResourceKind>) -> Vec<ResourceKind> {
        let synced = self.inner.lock();
        expected.difference(&synced).copied().collect()
    }
}

/// Waits for `ResourceSynced` of every expected kind, then publishes
/// `IndexSynchronized` once and reports ready.
pub(crate) struct SyncTracker {
    bus: Bus,
    subscription: Subscription,
    expected: BTreeSet<ResourceKind>,
    synced: SyncedKinds,
}

impl SyncTracker {
    /// Subscribes to `bus`: build it before the bus starts.
    pub(crate) fn new(bus: &Bus, expected: BTreeSet<ResourceKind>, synced: SyncedKinds) -> Self {
        Self {
            bus: bus.clone(),
            subscription: bus.subscribe("index-sync-tracker"),
            expected,
            synced,
        }
    }

    /// Until every expected kind has synced: `None` when cancelled (or the
    /// bus is gone) first.
    async fn wait_for_sync(&mut self, ctx: &Context) -> Option<()> {
        let mut seen = BTreeSet::new();
        loop {
            // The shared set answers after a lag; the events answer when a
            // watcher's insert and publish race the check.
            let missing: Vec<ResourceKind> = self
                .synced
                .missing(&self.expected)
                .into_iter()
                .filter(|kind| !seen.contains(kind))
                .collect();
            if missing.is_empty() {
                return Some(());
            }
            ctx.waiting_for(waiting_reason(&missing));
            let delivery = tokio::select! {
                biased;
                () = ctx.cancelled() => return None,
                delivery = self.subscription.recv() => delivery,
            };
            match delivery {
                Some(Delivery::Event(envelope)) => {
                    if let Event::ResourceSynced { kind } = envelope.event {
                        seen.insert(kind);
                    }
                }
                // Missed events: the shared state has the answer.
                Some(Delivery::Lagged(_)) => {}
                // The bus is gone: the process is shutting down.
                None => return None,
            }
        }
    }
}

fn waiting_reason(missing: &[ResourceKind]) -> String {
    let kinds: Vec<&str> = missing.iter().map(|kind| kind.as_str()).collect();
    format!("index not synchronized: waiting for {}", kinds.join(", "))
}

impl Component for SyncTracker {
    fn name(&self) -> &'static str {
        "index-sync-tracker"
    }

    fn readiness_check(&self) -> Option<&'static str> {
        Some(INDEX_CHECK)
    }

    fn run(mut self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            if self.wait_for_sync(&ctx).await.is_some() {
                let Self {
                    bus,
                    subscription,
                    expected,
                    ..
                } = *self;
                // Nothing more to read: a subscription left open would only lag.
                drop(subscription);
                tracing::info!(kinds = ?expected, "index synchronized");
                bus.publish(Event::IndexSynchronized);
                ctx.mark_ready();
            }
            ctx.cancelled().await;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use poolkeeper_supervisor::testing::{EventRecorder, Running, spawn};

    use super::*;

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn synchronized(recorder: &EventRecorder) -> usize {
        recorder.count(|e| *e == Event::IndexSynchronized)
    }

    fn start(
        bus: &Bus,
        expected: &[ResourceKind],
        synced: &SyncedKinds,
    ) -> (EventRecorder, Running) {
        let tracker = SyncTracker::new(bus, expected.iter().copied().collect(), synced.clone());
        let recorder = EventRecorder::new(bus);
        bus.start();
        (recorder, spawn(Box::new(tracker)))
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_once_every_kind_synced() {
        let bus = Bus::new(16);
        let expected = [ResourceKind::Machine, ResourceKind::Node];
        let (recorder, mut running) = start(&bus, &expected, &SyncedKinds::default());
        settle().await;
        assert_eq!(
            running.waiting_reason().as_deref(),
            Some("index not synchronized: waiting for Machine, Node")
        );

        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Node,
        });
        settle().await;
        assert_eq!(
            running.waiting_reason().as_deref(),
            Some("index not synchronized: waiting for Machine")
        );
        assert_eq!(synchronized(&recorder), 0);

        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Machine,
        });
        running.wait_ready(Duration::from_secs(1)).await;
        recorder
            .wait_for(Duration::from_secs(1), |e| *e == Event::IndexSynchronized)
            .await;

        // A later relist does not publish again.
        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Machine,
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(synchronized(&recorder), 1);
        assert!(running.stop().await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_to_watch_is_synchronized_at_once() {
        let bus = Bus::new(16);
        let (recorder, mut running) = start(&bus, &[], &SyncedKinds::default());
        running.wait_ready(Duration::from_secs(1)).await;
        recorder
            .wait_for(Duration::from_secs(1), |e| *e == Event::IndexSynchronized)
            .await;
        assert!(running.stop().await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn lagged_tracker_uses_shared_state() {
        let bus = Bus::new(2);
        let synced = SyncedKinds::default();
        let (_recorder, mut running) = start(&bus, &[ResourceKind::Node], &synced);
        settle().await;
        assert!(!running.is_ready());
        // The ResourceSynced is pushed out of the tracker's buffer before
        // it runs again: it only learns that it lagged.
        synced.insert(ResourceKind::Node);
        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Node,
        });
        for _ in 0..4 {
            bus.publish(Event::ShutdownRequested);
        }
        running.wait_ready(Duration::from_secs(1)).await;
        assert!(running.stop().await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn stops_when_cancelled_before_sync() {
        let bus = Bus::new(16);
        let (recorder, running) = start(&bus, &[ResourceKind::Node], &SyncedKinds::default());
        settle().await;
        assert!(!running.is_ready());
        assert!(running.stop().await.is_ok());
        assert_eq!(synchronized(&recorder), 0);
    }

    #[test]
    fn is_the_index_readiness_check() {
        let bus = Bus::new(4);
        let tracker = SyncTracker::new(&bus, BTreeSet::new(), SyncedKinds::default());
        assert_eq!(tracker.readiness_check(), Some("index"));
        assert_eq!(tracker.name(), "index-sync-tracker");
    }
}
