//! The executor component on a real bus and index, with the in-memory API
//! server (`fake.rs`) and tokio's paused clock.

mod events;
mod leadership;
mod passes;
mod protection;
mod retries;
mod secrets;

use std::sync::Arc;
use std::time::Duration;

use poolkeeper_bus::{
    Bus, Change, ClassOutcome, EnqueueReason, Event, ObjectKey, Requeue, ResourceKind,
    TriggerReason,
};
use poolkeeper_config::Config;
use poolkeeper_index::{Changed, Index, IndexResource};
use poolkeeper_supervisor::LeaderTerm;
use poolkeeper_supervisor::testing::{BusRecorder, Running, spawn};
use serde_json::json;
use tokio::time::Instant;

use crate::fake::{Answer, FakeWriter};
use crate::{Executor, ExecutorSettings};

const NS: &str = "machine-system";
const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
const SHORT: Duration = Duration::from_secs(5);
const LONG: Duration = Duration::from_secs(600);
const CONFLICT: Duration = Duration::from_millis(200);

type MachineClass = poolkeeper_api::MachineClass;
type Machine = poolkeeper_api::Machine;

fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced(NS, name)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn secs(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// A MachineClass at resourceVersion 1 with `finalizers`.
fn class(name: &str, finalizers: &[&str]) -> MachineClass {
    let mut object = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
        "providerSpec": {"machineType": "m5.large"},
    });
    if !finalizers.is_empty() {
        object["metadata"]["finalizers"] = json!(finalizers);
    }
    serde_json::from_value(object).expect("a MachineClass parses")
}

/// `class` with a deletion timestamp.
fn deleting(mut class: MachineClass) -> MachineClass {
    class.metadata.deletion_timestamp =
        serde_json::from_value(json!("2025-01-01T00:00:00Z")).expect("a timestamp parses");
    class
}

fn machine(name: &str, class_name: &str) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"class": {"kind": "MachineClass", "name": class_name}},
    }))
    .expect("a Machine parses")
}

/// The settings the default configuration gives.
fn settings() -> ExecutorSettings {
    ExecutorSettings::from(&Config::default())
}

struct Setup {
    capacity: usize,
    settings: ExecutorSettings,
    term: Option<LeaderTerm>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            capacity: 1024,
            settings: settings(),
            term: None,
        }
    }
}

/// A running executor with every bus event recorded at its virtual time.
struct Harness {
    bus: Bus,
    index: Arc<Index>,
    fake: FakeWriter,
    recorder: BusRecorder,
    start: Instant,
    running: Running,
}

impl Harness {
    /// `classes` go into both the index and the fake API server; accepted
    /// writes show up in the index as the watch would bring them.
    fn start(classes: &[MachineClass], machines: &[Machine]) -> Self {
        Self::start_with(classes, machines, Setup::default())
    }

    fn start_with(classes: &[MachineClass], machines: &[Machine], setup: Setup) -> Self {
        let index = Arc::new(Index::new(POOL_LABEL));
        let fake = FakeWriter::default();
        for class in classes {
            index.apply(class.clone());
            fake.insert(class);
        }
        for machine in machines {
            index.apply(machine.clone());
        }
        fake.mirror_to(index.clone());
        let bus = Bus::new(setup.capacity);
        let recorder = BusRecorder::new(&bus);
        let mut executor = Executor::new(setup.settings, &bus, index.clone(), fake.clone());
        if let Some(term) = setup.term {
            executor = executor.guarded_by(term);
        }
        bus.start();
        let start = Instant::now();
        let running = spawn(Box::new(executor));
        Self {
            bus,
            index,
            fake,
            recorder,
            start,
            running,
        }
    }

    fn trigger(&self, reason: TriggerReason) {
        self.bus.publish(Event::ReconciliationTriggered { reason });
    }

    /// Applies `object` to the index and publishes the change, as a watcher
    /// does.
    fn apply<K: kube::Resource>(&self, kind: ResourceKind, object: K)
    where
        Index: IndexResource<K>,
    {
        if let Some(changed) = self.index.apply(object) {
            self.publish_changed(kind, changed);
        }
    }

    /// Deletes `name` of `kind` (the object type `K`) from the index and
    /// publishes the change, as a watcher does.
    fn delete<K: kube::Resource>(&self, kind: ResourceKind, name: &str)
    where
        Index: IndexResource<K>,
    {
        if let Some(changed) = <Index as IndexResource<K>>::delete(&self.index, &key(name)) {
            self.publish_changed(kind, changed);
        }
    }

    /// Publishes an update of Machine `name` relating to `classes`, without
    /// touching the index.
    fn machine_changed(&self, name: &str, classes: &[&str]) {
        self.bus.publish(Event::ResourceChanged {
            kind: ResourceKind::Machine,
            key: key(name),
            change: Change::Updated,
            initial: false,
            related: classes.iter().map(|class| key(class)).collect(),
        });
    }

    fn publish_changed(&self, kind: ResourceKind, changed: Changed) {
        self.bus.publish(Event::ResourceChanged {
            kind,
            key: changed.key,
            change: changed.change,
            initial: false,
            related: changed.related,
        });
    }

    /// Waits on the paused clock until `after` past the start.
    async fn at(&self, after: Duration) {
        tokio::time::sleep_until(self.start + after).await;
    }

    fn events(&self) -> Vec<(Duration, Event)> {
        self.recorder.timed()
    }

    fn count(&self, matches: impl Fn(&Event) -> bool) -> usize {
        self.recorder.count(matches)
    }

    /// Passes started.
    fn passes(&self) -> usize {
        self.count(|e| matches!(e, Event::ReconciliationStarted { .. }))
    }

    /// Reconciliations that wrote a finalizer change.
    fn writes(&self) -> usize {
        self.count(
            |e| matches!(e, Event::MachineClassReconciled { outcome, .. } if outcome.wrote()),
        )
    }

    /// `(class, reason, machines)` of every enqueue.
    fn enqueued(&self) -> Vec<(String, EnqueueReason, usize)> {
        self.events()
            .into_iter()
            .filter_map(|(_, event)| match event {
                Event::MachinesEnqueued {
                    class,
                    reason,
                    machines,
                } => Some((class.name, reason, machines)),
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
                    ..
                } => Some((at, key.name, outcome, requeue_after)),
                _ => None,
            })
            .collect()
    }

    /// `(when, class, answer)` of every write the fake API server answered.
    fn calls(&self) -> Vec<(Duration, String, Answer)> {
        self.fake
            .calls()
            .into_iter()
            .map(|call| (call.at - self.start, call.key.name, call.answer))
            .collect()
    }

    async fn stop(self) {
        self.running
            .stop()
            .await
            .expect("the executor stops cleanly");
    }
}
