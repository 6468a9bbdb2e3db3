//! Publishes `IndexSynchronized` once every watched kind has synced.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use poolkeeper_bus::{Bus, Delivery, Event, ResourceKind, Subscription};
use poolkeeper_supervisor::{BoxError, Component, Context, Gate};

/// The kinds whose first list is complete, shared by the watchers and the
/// tracker so that a lagging tracker subscription loses nothing.
#[derive(Clone, Debug, Default)]
pub struct SyncedKinds {
    inner: Arc<Mutex<BTreeSet<ResourceKind>>>,
}

impl SyncedKinds {
    pub fn insert(&self, kind: ResourceKind) {
        self.inner.lock().insert(kind);
    }

    pub fn contains_all(&self, kinds: &BTreeSet<ResourceKind>) -> bool {
        let synced = self.inner.lock();
        kinds.iter().all(|kind| synced.contains(kind))
    }
}

/// Waits for `ResourceSynced` of every expected kind, then publishes
/// `IndexSynchronized` once and reports ready.
pub struct SyncTracker {
    bus: Bus,
    subscription: Subscription,
    expected: BTreeSet<ResourceKind>,
    synced: SyncedKinds,
    gate: Option<Gate>,
}

impl SyncTracker {
    /// Subscribes to `bus`: build it before the bus starts.
    pub fn new(bus: &Bus, expected: BTreeSet<ResourceKind>, synced: SyncedKinds) -> Self {
        Self {
            bus: bus.clone(),
            subscription: bus.subscribe("index-sync-tracker"),
            expected,
            synced,
            gate: None,
        }
    }

    /// Also passes `gate` (a readiness check) once the index is synchronized.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }
}

impl Component for SyncTracker {
    fn name(&self) -> &'static str {
        "index-sync-tracker"
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            let Self {
                bus,
                mut subscription,
                expected,
                synced,
                gate,
            } = *self;
            let mut seen = BTreeSet::new();
            loop {
                if expected.is_subset(&seen) || synced.contains_all(&expected) {
                    break;
                }
                let delivery = tokio::select! {
                    biased;
                    () = ctx.cancelled() => return Ok(()),
                    delivery = subscription.recv() => delivery,
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
                    None => {
                        ctx.cancelled().await;
                        return Ok(());
                    }
                }
            }
            drop(subscription);
            tracing::info!(kinds = ?expected, "index synchronized");
            bus.publish(Event::IndexSynchronized);
            if let Some(gate) = gate {
                gate.pass();
            }
            ctx.mark_ready();
            ctx.cancelled().await;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use poolkeeper_supervisor::Activity;
    use tokio_util::sync::CancellationToken;

    use super::*;

    struct Running {
        cancel: CancellationToken,
        ready: tokio::sync::watch::Receiver<bool>,
        task: tokio::task::JoinHandle<Result<(), BoxError>>,
    }

    fn start(component: Box<dyn Component>) -> Running {
        let cancel = CancellationToken::new();
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let ctx = Context::new(cancel.clone(), Activity::default(), ready_tx);
        let task = tokio::spawn(component.run(ctx));
        Running {
            cancel,
            ready,
            task,
        }
    }

    fn synchronized_count(sub: &mut Subscription) -> usize {
        let mut n = 0;
        while let Some(delivery) = sub.try_recv() {
            if let Delivery::Event(envelope) = delivery
                && envelope.event == Event::IndexSynchronized
            {
                n += 1;
            }
        }
        n
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_once_every_kind_synced() {
        let bus = Bus::new(16);
        let mut observer = bus.subscribe("observer");
        let expected: BTreeSet<_> = [ResourceKind::Node, ResourceKind::Machine].into();
        let tracker = SyncTracker::new(&bus, expected, SyncedKinds::default());
        bus.start();
        let running = start(Box::new(tracker));

        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Node,
        });
        settle().await;
        assert!(!*running.ready.borrow());
        assert_eq!(synchronized_count(&mut observer), 0);

        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Machine,
        });
        settle().await;
        assert!(*running.ready.borrow());
        assert_eq!(synchronized_count(&mut observer), 1);

        // A later relist does not publish again.
        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Machine,
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(synchronized_count(&mut observer), 0);

        running.cancel.cancel();
        assert!(running.task.await.expect("joins").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_to_watch_is_synchronized_at_once() {
        let bus = Bus::new(16);
        let mut observer = bus.subscribe("observer");
        let tracker = SyncTracker::new(&bus, BTreeSet::new(), SyncedKinds::default());
        bus.start();
        let running = start(Box::new(tracker));
        settle().await;
        assert!(*running.ready.borrow());
        assert_eq!(synchronized_count(&mut observer), 1);
        running.cancel.cancel();
        assert!(running.task.await.expect("joins").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn lagged_tracker_uses_shared_state() {
        let bus = Bus::new(2);
        let synced = SyncedKinds::default();
        let expected: BTreeSet<_> = [ResourceKind::Node].into();
        let tracker = SyncTracker::new(&bus, expected, synced.clone());
        bus.start();
        let running = start(Box::new(tracker));
        settle().await;
        assert!(!*running.ready.borrow());
        // The ResourceSynced is pushed out of the tracker's buffer before
        // it runs again: it only learns that it lagged.
        synced.insert(ResourceKind::Node);
        bus.publish(Event::ResourceSynced {
            kind: ResourceKind::Node,
        });
        for _ in 0..4 {
            bus.publish(Event::ShutdownRequested);
        }
        settle().await;
        assert!(*running.ready.borrow());
        running.cancel.cancel();
        assert!(running.task.await.expect("joins").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn stops_when_cancelled_before_sync() {
        let bus = Bus::new(16);
        let expected: BTreeSet<_> = [ResourceKind::Node].into();
        let tracker = SyncTracker::new(&bus, expected, SyncedKinds::default());
        bus.start();
        let running = start(Box::new(tracker));
        settle().await;
        running.cancel.cancel();
        assert!(running.task.await.expect("joins").is_ok());
        assert!(!*running.ready.borrow());
    }
}
