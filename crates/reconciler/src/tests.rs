use poolkeeper_bus::{Change, ObjectKey};
use poolkeeper_supervisor::testing::{BusRecorder, Running, spawn};

use super::*;

/// A running reconciler on a real bus, with every trigger recorded at the
/// virtual time it was published.
struct Harness {
    bus: Bus,
    start: Instant,
    recorder: BusRecorder,
    running: Running,
}

fn default_settings() -> ReconcilerSettings {
    ReconcilerSettings::from(&Config::default())
}

impl Harness {
    fn start(capacity: usize) -> Self {
        Self::start_with(capacity, default_settings())
    }

    fn start_with(capacity: usize, settings: ReconcilerSettings) -> Self {
        let bus = Bus::new(capacity);
        let reconciler = Reconciler::new(settings, &bus);
        let recorder = BusRecorder::new(&bus);
        bus.start();
        Self {
            start: Instant::now(),
            running: spawn(Box::new(reconciler)),
            bus,
            recorder,
        }
    }

    fn change(&self, initial: bool) {
        self.bus.publish(Event::ResourceChanged {
            kind: ResourceKind::Machine,
            key: ObjectKey::namespaced("machine-system", "m1"),
            change: Change::Updated,
            initial,
            related: Vec::new(),
        });
    }

    /// Waits on the paused clock until `ms` after the start.
    async fn at_ms(&self, ms: u64) {
        tokio::time::sleep_until(self.start + Duration::from_millis(ms)).await;
    }

    fn triggers(&self) -> Vec<(Duration, TriggerReason)> {
        self.recorder
            .timed()
            .into_iter()
            .filter_map(|(at, event)| match event {
                Event::ReconciliationTriggered { reason } => Some((at, reason)),
                _ => None,
            })
            .collect()
    }

    async fn stop(self) {
        self.running.stop().await.unwrap();
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[tokio::test(start_paused = true)]
async fn changes_at_0_100_300_ms_trigger_once_at_800_ms() {
    let h = Harness::start(1024);
    h.change(false);
    h.at_ms(100).await;
    h.change(false);
    h.at_ms(300).await;
    h.change(false);
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), [(ms(800), TriggerReason::Debounced)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_ten_thousand_changes_triggers_once() {
    let h = Harness::start(16_384);
    for _ in 0..10_000 {
        h.change(false);
    }
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), [(ms(500), TriggerReason::Debounced)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn continuous_churn_triggers_every_max_delay() {
    let h = Harness::start(1024);
    for step in 0..200 {
        h.at_ms(step * 100).await;
        h.change(false);
    }
    h.at_ms(30_000).await;
    assert_eq!(
        h.triggers(),
        [
            (ms(5_000), TriggerReason::Debounced),
            (ms(10_000), TriggerReason::Debounced),
            (ms(15_000), TriggerReason::Debounced),
            (ms(20_000), TriggerReason::Debounced),
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn leadership_cancels_the_pending_timer_and_triggers_once() {
    let h = Harness::start(1024);
    h.change(false);
    h.at_ms(200).await;
    h.bus.publish(Event::LeadershipChanged { leader: true });
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), [(ms(200), TriggerReason::LeadershipGained)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn initial_sync_changes_never_trigger() {
    let h = Harness::start(1024);
    for _ in 0..100 {
        h.change(true);
    }
    h.at_ms(60_000).await;
    assert_eq!(h.triggers(), []);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn changes_of_other_kinds_do_not_trigger() {
    let h = Harness::start(1024);
    for kind in [
        ResourceKind::NodePool,
        ResourceKind::Node,
        ResourceKind::ConfigMap,
        ResourceKind::Namespace,
    ] {
        h.bus.publish(Event::ResourceChanged {
            kind,
            key: ObjectKey::cluster("x"),
            change: Change::Updated,
            initial: false,
            related: Vec::new(),
        });
    }
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), []);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn class_machine_and_secret_changes_trigger() {
    for kind in [
        ResourceKind::MachineClass,
        ResourceKind::Machine,
        ResourceKind::Secret,
    ] {
        let h = Harness::start(1024);
        h.bus.publish(Event::ResourceChanged {
            kind,
            key: ObjectKey::namespaced("machine-system", "x"),
            change: Change::Updated,
            initial: false,
            related: Vec::new(),
        });
        h.at_ms(10_000).await;
        assert_eq!(
            h.triggers(),
            [(ms(500), TriggerReason::Debounced)],
            "{kind}"
        );
        h.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_mid_timer_ends_cleanly_without_a_trigger() {
    let h = Harness::start(1024);
    h.change(false);
    h.at_ms(100).await;
    h.bus.publish(Event::ShutdownRequested);
    h.at_ms(200).await;
    h.change(false);
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), []);
    assert!(!h.running.is_finished(), "runs until cancelled");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cancellation_mid_timer_ends_cleanly_without_a_trigger() {
    let h = Harness::start(1024);
    h.change(false);
    h.at_ms(100).await;
    let recorder = h.recorder.clone();
    h.stop().await;
    tokio::time::sleep(ms(10_000)).await;
    let triggers = recorder.count(|e| matches!(e, Event::ReconciliationTriggered { .. }));
    assert_eq!(triggers, 0);
}

#[tokio::test(start_paused = true)]
async fn leadership_gained_triggers_immediately() {
    let h = Harness::start(1024);
    h.at_ms(50).await;
    h.bus.publish(Event::LeadershipChanged { leader: false });
    h.at_ms(100).await;
    h.bus.publish(Event::LeadershipChanged { leader: true });
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), [(ms(100), TriggerReason::LeadershipGained)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn lag_triggers_a_full_reconciliation() {
    // A tiny queue: the reconciler lags, and publishing its trigger onto
    // its own still-full queue must not make it lag again and again.
    let h = Harness::start(4);
    for _ in 0..20 {
        h.change(false);
    }
    h.at_ms(100).await;
    h.change(false);
    h.at_ms(10_000).await;
    // The changes queued behind the lag notice are covered by the full
    // trigger; the later change debounces as usual.
    assert_eq!(
        h.triggers(),
        [
            (ms(0), TriggerReason::Lagged),
            (ms(600), TriggerReason::Debounced)
        ]
    );
    assert!(TriggerReason::Lagged.is_full());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_queued_behind_a_lag_is_honoured() {
    let h = Harness::start(4);
    for _ in 0..20 {
        h.change(false);
    }
    h.bus.publish(Event::ShutdownRequested);
    h.at_ms(100).await;
    h.change(false);
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), [(ms(0), TriggerReason::Lagged)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn custom_interval_is_honoured() {
    let settings = ReconcilerSettings {
        debounce_interval: ms(2_000),
        max_delay: ms(3_000),
    };
    let h = Harness::start_with(1024, settings);
    h.change(false);
    h.at_ms(1_500).await;
    h.change(false);
    h.at_ms(10_000).await;
    assert_eq!(h.triggers(), [(ms(3_000), TriggerReason::Debounced)]);
    h.stop().await;
}
