//! Publishes `IndexSynchronized` once every watched kind has synced, and is
//! the `index` readiness check until then. The watchers record their first
//! complete list in one shared set; the tracker waits on that set, not on
//! the bus, so there is one record of what synced and no lag to recover
//! from.

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use poolkeeper_bus::{Bus, Event, ResourceKind};
use poolkeeper_supervisor::{BoxError, Component, Context};
use tokio::sync::watch;

/// The `/readyz` check the tracker's readiness appears as.
const INDEX_CHECK: &str = "index";

/// The kinds whose first list is complete, written by the watchers and
/// awaited by the tracker.
#[derive(Clone, Debug)]
pub(crate) struct SyncedKinds {
    sender: watch::Sender<BTreeSet<ResourceKind>>,
}

impl Default for SyncedKinds {
    fn default() -> Self {
        Self {
            sender: watch::Sender::new(BTreeSet::new()),
        }
    }
}

impl SyncedKinds {
    pub(crate) fn insert(&self, kind: ResourceKind) {
        self.sender.send_if_modified(|synced| synced.insert(kind));
    }

    #[cfg(test)]
    pub(crate) fn contains_all(&self, kinds: &BTreeSet<ResourceKind>) -> bool {
        kinds.is_subset(&self.sender.borrow())
    }
}

/// The kinds of `expected` not in `synced`, in order.
fn missing(
    expected: &BTreeSet<ResourceKind>,
    synced: &BTreeSet<ResourceKind>,
) -> Vec<ResourceKind> {
    expected.difference(synced).copied().collect()
}

/// Waits until every expected kind has synced, then publishes
/// `IndexSynchronized` once and reports ready.
pub(crate) struct SyncTracker {
    bus: Bus,
    expected: BTreeSet<ResourceKind>,
    synced: SyncedKinds,
}

impl SyncTracker {
    pub(crate) fn new(bus: &Bus, expected: BTreeSet<ResourceKind>, synced: SyncedKinds) -> Self {
        Self {
            bus: bus.clone(),
            expected,
            synced,
        }
    }

    /// Until every expected kind has synced: `None` when cancelled first.
    async fn wait_for_sync(&self, ctx: &Context) -> Option<()> {
        let mut synced = self.synced.sender.subscribe();
        loop {
            let missing = missing(&self.expected, &synced.borrow_and_update());
            if missing.is_empty() {
                return Some(());
            }
            ctx.waiting_for(waiting_reason(&missing));
            tokio::select! {
                biased;
                () = ctx.cancelled() => return None,
                // The sender lives in `self.synced`: it cannot close first.
                _ = synced.changed() => {}
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

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            if self.wait_for_sync(&ctx).await.is_some() {
                tracing::info!(kinds = ?self.expected, "index synchronized");
                self.bus.publish(Event::IndexSynchronized);
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

    use poolkeeper_supervisor::testing::{BusRecorder, Running, spawn};

    use super::*;

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn synchronized(recorder: &BusRecorder) -> usize {
        recorder.count(|e| *e == Event::IndexSynchronized)
    }

    fn start(bus: &Bus, expected: &[ResourceKind], synced: &SyncedKinds) -> (BusRecorder, Running) {
        let tracker = SyncTracker::new(bus, expected.iter().copied().collect(), synced.clone());
        let recorder = BusRecorder::new(bus);
        bus.start();
        (recorder, spawn(Box::new(tracker)))
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_once_every_kind_synced() {
        let bus = Bus::new(16);
        let synced = SyncedKinds::default();
        let expected = [ResourceKind::Machine, ResourceKind::Node];
        let (recorder, mut running) = start(&bus, &expected, &synced);
        settle().await;
        assert_eq!(
            running.waiting_reason().as_deref(),
            Some("index not synchronized: waiting for Machine, Node")
        );

        synced.insert(ResourceKind::Node);
        settle().await;
        assert_eq!(
            running.waiting_reason().as_deref(),
            Some("index not synchronized: waiting for Machine")
        );
        assert_eq!(synchronized(&recorder), 0);

        synced.insert(ResourceKind::Machine);
        running.wait_ready(Duration::from_secs(1)).await;
        recorder
            .wait_for(Duration::from_secs(1), |e| *e == Event::IndexSynchronized)
            .await;

        // A later relist does not publish again.
        synced.insert(ResourceKind::Machine);
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
    async fn kinds_synced_before_the_tracker_runs_count() {
        let bus = Bus::new(2);
        let synced = SyncedKinds::default();
        synced.insert(ResourceKind::Node);
        let (_recorder, mut running) = start(&bus, &[ResourceKind::Node], &synced);
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
