//! The executor component on a real bus and index, with the in-memory writer
//! and tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use poolkeeper_bus::{
    Bus, Change, ClassOutcome, Delivery, EnqueueReason, Event, ObjectKey, ResourceKind,
    TriggerReason,
};
use poolkeeper_index::{Index, Machine, MachineClass};
use poolkeeper_supervisor::{Activity, BoxError, Component, Context};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fake::FakeWriter;
use crate::*;

const NS: &str = "machine-system";
const FINALIZER: &str = DEFAULT_FINALIZER;
const SHORT: Duration = Duration::from_secs(5);
const LONG: Duration = Duration::from_secs(600);
const CONFLICT: Duration = Duration::from_millis(200);

fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced(NS, name)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn class(name: &str, finalizers: &[&str]) -> MachineClass {
    MachineClass {
        key: key(name),
        finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
        deleting: false,
        spec_hash: 1,
        resource_version: "1".into(),
    }
}

fn machine(name: &str, class_name: &str) -> Machine {
    Machine {
        key: key(name),
        class_name: class_name.into(),
        deleting: false,
    }
}

/// A running executor with every bus event recorded at its virtual time.
struct Harness {
    bus: Bus,
    index: Arc<Index>,
    fake: FakeWriter,
    stats: ExecutorStats,
    start: Instant,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), BoxError>>,
    events: Arc<Mutex<Vec<(Duration, Event)>>>,
}

struct Setup {
    capacity: usize,
    settings: ExecutorSettings,
    registry: Option<Registry>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            capacity: 1024,
            settings: ExecutorSettings::default(),
            registry: None,
        }
    }
}

impl Harness {
    /// `classes` go into both the index and the fake API server; accepted
    /// writes show up in the index as the watch would bring them.
    fn start(classes: &[MachineClass], machines: &[Machine]) -> Self {
        Self::start_with(classes, machines, &mut Setup::default())
    }

    fn start_with(classes: &[MachineClass], machines: &[Machine], setup: &mut Setup) -> Self {
        let index = Arc::new(Index::new("apps.openyurt.io/nodepool"));
        let fake = FakeWriter::default();
        for class in classes {
            index.upsert_machine_class(class.clone());
            fake.insert(class);
        }
        for machine in machines {
            index.upsert_machine(machine.clone());
        }
        fake.mirror_to(index.clone());
        let bus = Bus::new(setup.capacity);
        let mut recorder = bus.subscribe("test");
        let executor = Executor::new(&bus, index.clone(), fake.clone(), setup.settings.clone());
        if let Some(registry) = setup.registry.as_mut() {
            executor.register_metrics(registry);
        }
        let stats = executor.stats();
        bus.start();
        let start = Instant::now();
        let events = Arc::new(Mutex::new(Vec::new()));
        let recorded = events.clone();
        tokio::spawn(async move {
            while let Some(delivery) = recorder.recv().await {
                if let Delivery::Event(envelope) = delivery {
                    recorded
                        .lock()
                        .push((start.elapsed(), envelope.event.clone()));
                }
            }
        });
        let cancel = CancellationToken::new();
        let ctx = Context::new(
            cancel.clone(),
            Activity::default(),
            tokio::sync::watch::channel(false).0,
        );
        let task = tokio::spawn(Box::new(executor).run(ctx));
        Self {
            bus,
            index,
            fake,
            stats,
            start,
            cancel,
            task,
            events,
        }
    }

    fn trigger(&self, reason: TriggerReason) {
        self.bus.publish(Event::ReconciliationTriggered { reason });
    }

    fn changed(&self, kind: ResourceKind, name: &str, change: Change) {
        self.bus.publish(Event::ResourceChanged {
            kind,
            key: key(name),
            change,
            initial: false,
        });
    }

    /// Waits on the paused clock until `after` past the start.
    async fn at(&self, after: Duration) {
        tokio::time::sleep_until(self.start + after).await;
    }

    fn events(&self) -> Vec<(Duration, Event)> {
        self.events.lock().clone()
    }

    fn enqueued(&self) -> Vec<(String, EnqueueReason)> {
        self.events()
            .into_iter()
            .filter_map(|(_, event)| match event {
                Event::MachineEnqueued { key, reason } => Some((key.name, reason)),
                _ => None,
            })
            .collect()
    }

    /// `(when, class, outcome, requeue_after)` of every reconciliation.
    fn reconciled(&self) -> Vec<(Duration, String, ClassOutcome, Duration)> {
        self.events()
            .into_iter()
            .filter_map(|(at, event)| match event {
                Event::MachineClassReconciled {
                    key,
                    outcome,
                    requeue_after,
                } => Some((at, key.name, outcome, requeue_after)),
                _ => None,
            })
            .collect()
    }

    /// `(when, result)` of every write the fake API server answered.
    fn writes(&self) -> Vec<(Duration, String, Result<(), WriteError>)> {
        self.fake
            .calls()
            .into_iter()
            .map(|call| (call.at - self.start, call.key.name, call.result))
            .collect()
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_class_in_use_gets_the_finalizer_and_its_machines_are_enqueued() {
    let h = Harness::start(
        &[class("a", &[])],
        &[machine("m1", "a"), machine("m2", "a")],
    );
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(10)).await;
    assert_eq!(
        h.fake.finalizers(&key("a")),
        Some(vec![FINALIZER.to_owned()])
    );
    assert_eq!(h.writes(), [(ms(0), "a".into(), Ok(()))]);
    let mut enqueued = h.enqueued();
    enqueued.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        enqueued,
        [
            ("m1".into(), EnqueueReason::FinalizerAdded),
            ("m2".into(), EnqueueReason::FinalizerAdded)
        ]
    );
    assert_eq!(
        h.reconciled(),
        [(ms(0), "a".into(), ClassOutcome::FinalizerAdded, LONG)]
    );
    let started: Vec<_> = h
        .events()
        .into_iter()
        .filter(|(_, e)| {
            matches!(
                e,
                Event::ReconciliationStarted { .. } | Event::ReconciliationCompleted { .. }
            )
        })
        .map(|(_, e)| e)
        .collect();
    assert_eq!(
        started,
        [
            Event::ReconciliationStarted { pass: 1, keys: 1 },
            Event::ReconciliationCompleted {
                pass: 1,
                duration: Duration::ZERO,
                writes: 1
            }
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn in_steady_state_a_second_pass_writes_and_enqueues_nothing() {
    let h = Harness::start(
        &[
            class("a", &[]),
            class("b", &["example.com/other", FINALIZER]),
        ],
        &[machine("m1", "a"), machine("m2", "b")],
    );
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(100)).await;
    let after_first = h.stats.snapshot();
    assert_eq!(after_first.writes, 1);
    assert_eq!(after_first.machines_enqueued, 1);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(200)).await;
    let after_second = h.stats.snapshot();
    assert_eq!(after_second.passes, 2);
    assert_eq!(after_second.writes, 1, "no write in steady state");
    assert_eq!(
        after_second.machines_enqueued, 1,
        "no enqueue in steady state"
    );
    let second: Vec<_> = h
        .reconciled()
        .into_iter()
        .filter(|r| r.0 == ms(100))
        .map(|r| (r.1, r.2))
        .collect();
    assert_eq!(
        second,
        [
            ("a".into(), ClassOutcome::Unchanged),
            ("b".into(), ClassOutcome::Unchanged)
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unused_class_loses_the_finalizer_and_keeps_the_others() {
    let mut deleting = class("gone-soon", &[FINALIZER]);
    deleting.deleting = true;
    let h = Harness::start(
        &[
            class("a", &["example.com/other", FINALIZER, "example.com/last"]),
            deleting,
            class("bare", &[]),
        ],
        &[],
    );
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(10)).await;
    assert_eq!(
        h.fake.finalizers(&key("a")),
        Some(vec!["example.com/other".into(), "example.com/last".into()])
    );
    assert_eq!(h.fake.finalizers(&key("gone-soon")), Some(vec![]));
    let mut outcomes: Vec<_> = h.reconciled().into_iter().map(|r| (r.1, r.2)).collect();
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        outcomes,
        [
            ("a".into(), ClassOutcome::FinalizerRemoved),
            ("bare".into(), ClassOutcome::Unused),
            ("gone-soon".into(), ClassOutcome::FinalizerRemoved),
        ]
    );
    assert_eq!(h.stats.snapshot().writes, 2, "no write for the bare class");
    assert!(h.enqueued().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_conflict_is_retried_after_conflict_retry_and_converges() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    // Someone else wrote the class; the index has not seen it yet.
    let mut newer = class("a", &["example.com/other"]);
    newer.resource_version = "2".into();
    h.fake.insert(&newer);
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(50)).await;
    // The watch catches up before the retry.
    h.index.upsert_machine_class(newer);
    h.at(ms(1_000)).await;
    let writes = h.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(matches!(writes[0], (at, _, Err(WriteError::Conflict(_))) if at == ms(0)));
    assert_eq!(writes[1], (CONFLICT, "a".into(), Ok(())));
    assert_eq!(
        h.fake.finalizers(&key("a")),
        Some(vec!["example.com/other".into(), FINALIZER.into()])
    );
    assert_eq!(h.fake.resource_version(&key("a")), Some("3".into()));
    let outcomes: Vec<_> = h
        .reconciled()
        .into_iter()
        .map(|r| (r.0, r.2, r.3))
        .collect();
    assert_eq!(
        outcomes,
        [
            (ms(0), ClassOutcome::Conflict, CONFLICT),
            (CONFLICT, ClassOutcome::FinalizerAdded, LONG)
        ]
    );
    // Machines are enqueued once, when the finalizer is in place.
    assert_eq!(h.enqueued(), [("m1".into(), EnqueueReason::FinalizerAdded)]);
    let stats = h.stats.snapshot();
    assert_eq!((stats.conflicts, stats.writes), (1, 1));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_api_error_is_retried_after_short_retry() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.fake.fail_next(WriteError::Api("etcd unavailable".into()));
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(SHORT + ms(10)).await;
    let writes = h.writes();
    assert_eq!(
        writes,
        [
            (
                ms(0),
                "a".into(),
                Err(WriteError::Api("etcd unavailable".into()))
            ),
            (SHORT, "a".into(), Ok(()))
        ]
    );
    let failed = h
        .events()
        .into_iter()
        .find_map(|(_, e)| match e {
            Event::ReconciliationFailed { pass, error } => Some((pass, error)),
            _ => None,
        })
        .unwrap();
    assert_eq!(failed.0, 1);
    assert!(failed.1.contains("etcd unavailable"), "{}", failed.1);
    assert_eq!(h.stats.snapshot().errors, 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_without_answer_times_out_and_is_retried() {
    let mut setup = Setup::default();
    setup.settings.write_timeout = Duration::from_secs(1);
    let h = Harness::start_with(&[class("a", &[])], &[machine("m1", "a")], &mut setup);
    h.fake.set_latency(Duration::from_secs(3600));
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(Duration::from_secs(2)).await;
    let reconciled = h.reconciled();
    assert_eq!(
        reconciled,
        [(
            Duration::from_secs(1),
            "a".into(),
            ClassOutcome::Error,
            SHORT
        )]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_long_retry_requeue_fires_a_pass_for_that_key() {
    let h = Harness::start(
        &[class("a", &[FINALIZER]), class("b", &[])],
        &[machine("m1", "a")],
    );
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(10)).await;
    assert_eq!(h.stats.snapshot().passes, 1);
    // Only "b" changes later, so only "b" is rescheduled.
    h.at(Duration::from_secs(60)).await;
    h.changed(ResourceKind::MachineClass, "b", Change::Updated);
    h.trigger(TriggerReason::Debounced);
    h.at(LONG + ms(10)).await;
    let passes: Vec<_> = h
        .events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::ReconciliationStarted { keys, .. } => Some((at, keys)),
            _ => None,
        })
        .collect();
    assert_eq!(
        passes,
        [
            (ms(0), 2),
            (Duration::from_secs(60), 1),
            // "a" is due after its long retry; "b" was rescheduled at 60 s.
            (LONG, 1)
        ]
    );
    let last = h.reconciled().pop().unwrap();
    assert_eq!(last, (LONG, "a".into(), ClassOutcome::Unchanged, LONG));
    h.at(LONG + Duration::from_secs(60) + ms(10)).await;
    let last = h.reconciled().pop().unwrap();
    assert_eq!(
        last,
        (
            LONG + Duration::from_secs(60),
            "b".into(),
            ClassOutcome::Unused,
            LONG
        )
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn triggers_during_a_pass_coalesce_into_one_next_pass() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.fake.set_latency(Duration::from_secs(1));
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(100)).await;
    for _ in 0..5 {
        h.trigger(TriggerReason::Debounced);
    }
    h.changed(ResourceKind::Machine, "m1", Change::Updated);
    h.trigger(TriggerReason::Lagged);
    h.at(Duration::from_secs(10)).await;
    let started: Vec<_> = h
        .events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::ReconciliationStarted { pass, keys } => Some((at, pass, keys)),
            _ => None,
        })
        .collect();
    assert_eq!(started, [(ms(0), 1, 1), (Duration::from_secs(1), 2, 1)]);
    assert_eq!(h.stats.snapshot().passes, 2);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_bounded_and_no_key_is_written_twice_at_once() {
    let names: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
    let classes: Vec<_> = names.iter().map(|n| class(n, &[])).collect();
    let machines: Vec<_> = names
        .iter()
        .map(|n| machine(&format!("m-{n}"), n))
        .collect();
    let mut setup = Setup::default();
    setup.settings.concurrency = 3;
    let h = Harness::start_with(&classes, &machines, &mut setup);
    h.fake.set_latency(ms(100));
    h.trigger(TriggerReason::IndexSynchronized);
    // A trigger for a key while it is being written.
    h.at(ms(50)).await;
    h.changed(ResourceKind::MachineClass, "c00", Change::Updated);
    h.trigger(TriggerReason::Debounced);
    h.at(Duration::from_secs(5)).await;
    assert_eq!(h.fake.max_in_flight(), 3);
    assert_eq!(h.fake.overlaps(), 0);
    assert_eq!(h.stats.snapshot().writes, 12);
    let last_write = h.writes().iter().map(|w| w.0).max().unwrap();
    assert_eq!(last_write, ms(400), "12 writes of 100 ms, 3 at a time");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_debounced_pass_looks_only_at_dirty_classes() {
    let h = Harness::start(
        &[
            class("a", &[FINALIZER]),
            class("b", &[]),
            class("idle", &[FINALIZER]),
        ],
        &[machine("m1", "a"), machine("m2", "idle")],
    );
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(10)).await;
    // m1 moves from "a" to "b".
    h.index.upsert_machine(machine("m1", "b"));
    h.changed(ResourceKind::Machine, "m1", Change::Updated);
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    let second: Vec<_> = h
        .reconciled()
        .into_iter()
        .filter(|r| r.0 == ms(10))
        .map(|r| (r.1, r.2))
        .collect();
    assert_eq!(
        second,
        [
            ("a".into(), ClassOutcome::FinalizerRemoved),
            ("b".into(), ClassOutcome::FinalizerAdded)
        ]
    );
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![]));
    assert_eq!(h.fake.finalizers(&key("b")), Some(vec![FINALIZER.into()]));
    assert_eq!(h.enqueued(), [("m1".into(), EnqueueReason::FinalizerAdded)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_machine_releases_its_class() {
    let h = Harness::start(&[class("a", &[FINALIZER])], &[machine("m1", "a")]);
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(10)).await;
    h.index.remove_machine(&key("m1"));
    h.changed(ResourceKind::Machine, "m1", Change::Deleted);
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![]));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_spec_change_enqueues_the_machines_without_a_write() {
    let h = Harness::start(
        &[class("a", &[FINALIZER])],
        &[machine("m1", "a"), machine("m2", "a")],
    );
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(10)).await;
    assert!(h.enqueued().is_empty(), "first sight is not a change");
    let mut changed = class("a", &[FINALIZER]);
    changed.spec_hash = 2;
    changed.resource_version = "5".into();
    h.index.upsert_machine_class(changed);
    h.changed(ResourceKind::MachineClass, "a", Change::Updated);
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(
        h.enqueued(),
        [
            ("m1".into(), EnqueueReason::ClassSpecChanged),
            ("m2".into(), EnqueueReason::ClassSpecChanged)
        ]
    );
    assert_eq!(h.stats.snapshot().writes, 0);
    // Seen now: the next pass enqueues nothing more.
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(30)).await;
    assert_eq!(h.enqueued().len(), 2);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_class_being_deleted_while_in_use_keeps_nudging_its_machines() {
    let mut deleting = class("a", &[FINALIZER]);
    deleting.deleting = true;
    let h = Harness::start(&[deleting], &[machine("m1", "a")]);
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(SHORT * 2 + ms(10)).await;
    let enqueued: Vec<_> = h
        .events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::MachineEnqueued { reason, .. } => Some((at, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        enqueued,
        [
            (ms(0), EnqueueReason::ClassDeleting),
            (SHORT, EnqueueReason::ClassDeleting),
            (SHORT * 2, EnqueueReason::ClassDeleting)
        ]
    );
    assert_eq!(h.stats.snapshot().writes, 0);
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![FINALIZER.into()]));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_class_gone_from_the_index_is_forgotten() {
    let h = Harness::start(&[class("a", &[])], &[]);
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(10)).await;
    h.index.remove_machine_class(&key("a"));
    h.changed(ResourceKind::MachineClass, "a", Change::Deleted);
    h.trigger(TriggerReason::Debounced);
    h.at(LONG * 2).await;
    let outcomes: Vec<_> = h.reconciled().into_iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(
        outcomes,
        [(ms(0), ClassOutcome::Unused), (ms(10), ClassOutcome::Gone)],
        "no requeue once gone"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lag_makes_the_next_pass_a_full_one() {
    let mut setup = Setup {
        capacity: 8,
        ..Setup::default()
    };
    let h = Harness::start_with(
        &[class("a", &[]), class("b", &[])],
        &[machine("m1", "a"), machine("m2", "b")],
        &mut setup,
    );
    // Unrelated churn overflows the executor's queue.
    for i in 0..50 {
        h.bus.publish(Event::ResourceChanged {
            kind: ResourceKind::Node,
            key: ObjectKey::cluster(format!("node-{i}")),
            change: Change::Updated,
            initial: false,
        });
    }
    h.at(ms(10)).await;
    let stats = h.stats.snapshot();
    assert_eq!(stats.passes, 1);
    assert_eq!(stats.writes, 2, "every class was looked at");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_follower_does_not_write_until_it_leads_again() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.bus.publish(Event::LeadershipChanged { leader: false });
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(100)).await;
    assert_eq!(h.stats.snapshot().passes, 0);
    h.bus.publish(Event::LeadershipChanged { leader: true });
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(200)).await;
    assert_eq!(h.stats.snapshot().passes, 1);
    assert_eq!(h.writes(), [(ms(100), "a".into(), Ok(()))]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn losing_leadership_mid_pass_stops_writing() {
    let h = Harness::start(
        &[class("a", &[]), class("b", &[])],
        &[machine("m1", "a"), machine("m2", "b")],
    );
    h.fake.set_latency(Duration::from_secs(1));
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(500)).await;
    h.bus.publish(Event::LeadershipChanged { leader: false });
    h.at(LONG * 2).await;
    assert!(h.writes().is_empty(), "the writes in flight were abandoned");
    assert!(h.reconciled().is_empty(), "and nothing was requeued");
    assert_eq!(h.stats.snapshot().passes, 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn after_shutdown_is_requested_no_pass_starts() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.bus.publish(Event::ShutdownRequested);
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(ms(100)).await;
    assert_eq!(h.stats.snapshot().passes, 0);
    assert!(!h.task.is_finished(), "runs until cancelled");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn metrics_are_exported() {
    let mut setup = Setup {
        registry: Some(Registry::default()),
        ..Setup::default()
    };
    let h = Harness::start_with(
        &[class("a", &[]), class("b", &[FINALIZER])],
        &[machine("m1", "a"), machine("m2", "a")],
        &mut setup,
    );
    h.fake.fail_next(WriteError::Conflict("test failed".into()));
    h.trigger(TriggerReason::IndexSynchronized);
    h.at(Duration::from_secs(1)).await;
    h.stop().await;
    let mut text = String::new();
    encode(&mut text, setup.registry.as_ref().unwrap()).unwrap();
    for line in [
        "poolkeeper_executor_passes_total 2",
        "poolkeeper_reconciliations_total 3",
        "poolkeeper_reconciliation_errors_total 0",
        "poolkeeper_reconciliation_duration_seconds_count 3",
        "poolkeeper_machineclass_outcomes_total{outcome=\"conflict\"} 1",
        "poolkeeper_machineclass_outcomes_total{outcome=\"finalizer_added\"} 1",
        "poolkeeper_machineclass_outcomes_total{outcome=\"finalizer_removed\"} 1",
        "poolkeeper_requeues_total{reason=\"conflict_retry\"} 1",
        "poolkeeper_requeues_total{reason=\"long_retry\"} 2",
        "poolkeeper_api_writes_total{result=\"success\"} 2",
        "poolkeeper_api_writes_total{result=\"conflict\"} 1",
        "poolkeeper_machines_enqueued_total{reason=\"finalizer_added\"} 2",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[test]
fn the_kube_writer_makes_a_component() {
    fn component<C: Component>() {}
    component::<Executor<KubeClassWriter>>();
}
