//! MachineClass protection end to end: the whole controller (placement and
//! the webhook disabled) against a real kube-apiserver, one control plane
//! per test.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use json_patch::Patch as JsonPatch;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::{Machine, MachineClass};
use poolkeeper_bus::{
    Change, ClassOutcome, Delivery, EnqueueReason, Event, ObjectKey, ResourceKind, Subscription,
    TriggerReason,
};
use poolkeeper_config::Config;
use poolkeeper_executor::{ClassWriter, KubeClassWriter, WriteError};
use poolkeeper_testenv::TestEnv;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::harness::{
    Running, TIMEOUT, control_plane, next_event, protection_only_config, wait_until,
};
use crate::objects::{
    MACHINE_NAMESPACE, create_class, create_machine, delete_machine, expected_state,
    finalized_classes, finalizers_of, has_finalizer, machine, poolkeeper_events, used_classes,
};

/// A control plane with the namespace created, and the configuration of a
/// controller that does MachineClass protection only.
struct Cluster {
    env: TestEnv,
    config: Config,
    _cert_dir: TempDir,
}

impl Cluster {
    async fn start() -> Self {
        Self::with(control_plane(TestEnv::builder(), &[MACHINE_NAMESPACE]).await)
    }

    /// Without the MachineClass and Machine CRDs.
    async fn start_without_crds() -> Self {
        let env = TestEnv::builder()
            .start()
            .await
            .expect("the control plane starts");
        env.create_namespace(MACHINE_NAMESPACE)
            .await
            .expect("the namespace is created");
        Self::with(env)
    }

    fn with(env: TestEnv) -> Self {
        let cert_dir = tempfile::tempdir().expect("a temporary directory");
        let config = protection_only_config(cert_dir.path());
        Self {
            env,
            config,
            _cert_dir: cert_dir,
        }
    }

    fn client(&self) -> Client {
        self.env.client()
    }

    fn classes(&self) -> Api<MachineClass> {
        Api::namespaced(self.client(), MACHINE_NAMESPACE)
    }

    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client(), MACHINE_NAMESPACE)
    }

    fn finalizer(&self) -> String {
        self.config.machine_classes.finalizer.clone()
    }
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced(MACHINE_NAMESPACE, name)
}

async fn wait_finalizer(classes: &Api<MachineClass>, name: &str, finalizer: &str, present: bool) {
    let what = if present {
        format!("MachineClass {name} has the finalizer")
    } else {
        format!("MachineClass {name} has lost the finalizer")
    };
    wait_until(&what, || async {
        // The class still exists, and has the finalizer or not as wanted.
        finalizers_of(classes, name)
            .await
            .is_some_and(|finalizers| finalizers.iter().any(|f| f == finalizer) == present)
            .then_some(())
    })
    .await;
}

/// `MachinesEnqueued` of the Machines of `of` for `why`.
fn is_enqueued(event: &Event, of: &ObjectKey, why: EnqueueReason) -> bool {
    matches!(event, Event::MachinesEnqueued { class, reason, .. } if class == of && *reason == why)
}

/// `MachineClassReconciled` of `class` with `result`.
fn is_reconciled(event: &Event, class: &ObjectKey, result: ClassOutcome) -> bool {
    matches!(
        event,
        Event::MachineClassReconciled { key, outcome, .. } if key == class && *outcome == result
    )
}

/// Add, keep while in use, remove with the last Machine; a class deleted
/// while in use waits (deletionTimestamp set, finalizer kept) until its
/// Machines are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_follows_machines_and_holds_back_deletion() {
    let started = Instant::now();
    let mut cluster = Cluster::start().await;
    // The re-check of a class being deleted while in use.
    cluster.config.executor.short_retry = Duration::from_secs(1);
    let (classes, machines, finalizer) =
        (cluster.classes(), cluster.machines(), cluster.finalizer());
    let mut running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;

    create_class(&classes, "small").await;
    create_machine(&machines, "m1", "small").await;
    create_machine(&machines, "m2", "small").await;
    wait_finalizer(&classes, "small", &finalizer, true).await;
    let small = key("small");
    next_event(
        &mut running.events,
        "MachinesEnqueued{small, FinalizerAdded}",
        |event| is_enqueued(event, &small, EnqueueReason::FinalizerAdded),
    )
    .await;

    // Not the last Machine: the class stays protected.
    let m1 = key("m1");
    delete_machine(&machines, "m1").await;
    next_event(&mut running.events, "m1 deleted in the index", |event| {
        matches!(
            event,
            Event::ResourceChanged {
                kind: ResourceKind::Machine,
                key,
                change: Change::Deleted,
                ..
            } if *key == m1
        )
    })
    .await;
    let reconciled = next_event(
        &mut running.events,
        "a reconciliation of small after m1 went",
        // A conflict (stale index) decides nothing; the retry does.
        |event| {
            matches!(event, Event::MachineClassReconciled { key, outcome, .. }
                if *key == small && *outcome != ClassOutcome::Conflict)
        },
    )
    .await;
    assert!(
        matches!(
            reconciled.event,
            Event::MachineClassReconciled {
                outcome: ClassOutcome::Unchanged,
                ..
            }
        ),
        "one Machine still uses small: {:?}",
        reconciled.event
    );
    assert!(has_finalizer(&classes, "small", &finalizer).await);

    // The last Machine goes: so does the finalizer.
    delete_machine(&machines, "m2").await;
    wait_finalizer(&classes, "small", &finalizer, false).await;

    // In use again, then deleted while in use.
    create_machine(&machines, "m3", "small").await;
    wait_finalizer(&classes, "small", &finalizer, true).await;
    classes
        .delete("small", &DeleteParams::default())
        .await
        .expect("deleting MachineClass small");
    // The deletion is seen and its Machines are told once; the class is
    // looked at again after shortRetry, still kept, without enqueueing them
    // again (machine-controller-manager's PR 1056).
    next_event(
        &mut running.events,
        "MachinesEnqueued{small, ClassDeleting}",
        |event| is_enqueued(event, &small, EnqueueReason::ClassDeleting),
    )
    .await;
    let before = running.executor_totals().await.machines_enqueued;
    for round in 1..=2 {
        next_event(
            &mut running.events,
            &format!("small kept after shortRetry #{round}"),
            |event| is_reconciled(event, &small, ClassOutcome::Unchanged),
        )
        .await;
    }
    assert_eq!(
        running.executor_totals().await.machines_enqueued,
        before,
        "the retries of a deleting class enqueue nothing more"
    );
    let held = classes
        .get_opt("small")
        .await
        .expect("reading MachineClass small")
        .expect("a class in use is not deleted");
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "small is being deleted: {:?}",
        held.metadata
    );
    assert!(
        held.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| *f == finalizer),
        "small keeps the finalizer while m3 uses it: {:?}",
        held.metadata.finalizers
    );

    // Its last Machine goes: the deletion completes.
    delete_machine(&machines, "m3").await;
    wait_until("MachineClass small is gone (404)", || async {
        finalizers_of(&classes, "small")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    let totals = running.executor_totals().await;
    println!("finalizer lifecycle: {totals:?} in {:?}", started.elapsed());
    assert_eq!(totals.errors, 0, "{totals:?}");
    running.stop().await;
}

/// A Machine that switches classes takes the protection along: the new
/// class gains the finalizer, the old one (now unused) loses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_machine_moves_the_finalizer() {
    let started = Instant::now();
    let cluster = Cluster::start().await;
    let (classes, machines, finalizer) =
        (cluster.classes(), cluster.machines(), cluster.finalizer());
    let mut running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;

    create_class(&classes, "old").await;
    create_class(&classes, "new").await;
    create_machine(&machines, "worker", "old").await;
    wait_finalizer(&classes, "old", &finalizer, true).await;
    let new = key("new");
    next_event(&mut running.events, "new reconciled as unused", |event| {
        is_reconciled(event, &new, ClassOutcome::Unused)
    })
    .await;
    assert!(!has_finalizer(&classes, "new", &finalizer).await);

    machines
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"class": {"name": "new"}}})),
        )
        .await
        .expect("moving the Machine to class new");
    wait_until("the finalizer moved from old to new", || async {
        let state = finalized_classes(&classes, &finalizer).await;
        (state == expected_state(&["old", "new"], &["new"])).then_some(())
    })
    .await;
    let new = key("new");
    next_event(
        &mut running.events,
        "MachinesEnqueued{new, FinalizerAdded} for the worker's new class",
        |event| is_enqueued(event, &new, EnqueueReason::FinalizerAdded),
    )
    .await;

    let totals = running.executor_totals().await;
    println!("machine move: {totals:?} in {:?}", started.elapsed());
    // Add on old, add on new, remove from old.
    assert_eq!(totals.writes, 3, "{totals:?}");
    running.stop().await;
}

const BURST_CLASSES: usize = 50;
const BURST_MACHINES: usize = 1_000;
const BURST_CONCURRENCY: usize = 32;
const STEADY_STATE: Duration = Duration::from_secs(60);
const STEADY_REQUEUE: Duration = Duration::from_secs(25);

/// 1,000 Machines created as fast as the API server takes them, over 50
/// classes: the debouncer folds them into a few passes and every class gets
/// exactly one write. Then, with periodic requeues every 25 s, a minute of
/// re-checks writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_converges_in_few_passes_and_requeues_write_nothing() {
    let mut cluster = Cluster::start().await;
    // The classes' own requeues (longRetry after they are first seen) must
    // not fall inside the burst, or their pass would be counted as the
    // debouncer's: the burst and its wait take a few seconds at most.
    cluster.config.executor.long_retry = STEADY_REQUEUE;
    let (classes, machines, finalizer) =
        (cluster.classes(), cluster.machines(), cluster.finalizer());
    let mut running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;

    let class_names: Vec<String> = (0..BURST_CLASSES)
        .map(|i| format!("class-{i:02}"))
        .collect();
    let created: Vec<()> = futures::stream::iter(class_names.clone())
        .map(|name| {
            let classes = classes.clone();
            async move { create_class(&classes, &name).await }
        })
        .buffer_unordered(BURST_CONCURRENCY)
        .collect()
        .await;
    assert_eq!(created.len(), BURST_CLASSES);
    // The classes themselves are settled (unused, nothing written) before
    // the burst is measured.
    let mut seen = HashSet::new();
    while seen.len() < BURST_CLASSES {
        let envelope = next_event(
            &mut running.events,
            "the new classes reconciled as unused",
            |event| {
                matches!(
                    event,
                    Event::MachineClassReconciled {
                        outcome: ClassOutcome::Unused,
                        ..
                    }
                )
            },
        )
        .await;
        if let Event::MachineClassReconciled { key, .. } = &envelope.event {
            seen.insert(key.clone());
        }
    }
    let before = running.executor_totals().await;
    assert_eq!(before.writes, 0, "nothing to write for unused classes");

    let burst_started = Instant::now();
    let results: Vec<Result<(), String>> = futures::stream::iter(0..BURST_MACHINES)
        .map(|i| {
            let machines = machines.clone();
            let class = class_names[i % BURST_CLASSES].clone();
            async move {
                machines
                    .create(
                        &PostParams::default(),
                        &machine(&format!("machine-{i:04}"), &class),
                    )
                    .await
                    .map(drop)
                    .map_err(|e| format!("machine-{i:04}: {e}"))
            }
        })
        .buffer_unordered(BURST_CONCURRENCY)
        .collect()
        .await;
    let created_in = burst_started.elapsed();
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failures.is_empty(), "creates failed: {failures:?}");

    wait_until("every class of the burst has the finalizer", || async {
        let state = finalized_classes(&classes, &finalizer).await;
        (state.len() == BURST_CLASSES && state.values().all(|protected| *protected)).then_some(())
    })
    .await;
    // A write is counted when its answer is back, right after the API
    // server has stored it.
    let converged = wait_until("the executor counted its writes", || async {
        let now = running.executor_totals().await;
        (now.writes >= BURST_CLASSES as u64).then_some(now)
    })
    .await;
    let converged_in = burst_started.elapsed();
    let changes = BURST_MACHINES as u64;
    println!(
        "burst: {changes} Machine creates over {BURST_CLASSES} classes \
         (concurrency {BURST_CONCURRENCY}) took {created_in:?}; every class protected after \
         {converged_in:?} with {} passes, {} reconciliations, {} writes, {} conflicts",
        converged.passes - before.passes,
        converged.reconciliations - before.reconciliations,
        converged.writes,
        converged.conflicts,
    );

    // Settled: the pass after the last change of the burst has run. The
    // triggers on the way are what the debouncer made of the burst.
    let burst = observe_burst(&mut running.events).await;
    let settled = running.executor_totals().await;
    let settled_in = burst_started.elapsed();
    let passes = settled.passes - before.passes;
    let reconciliations = settled.reconciliations - before.reconciliations;
    println!(
        "burst settled after {settled_in:?}: {} triggers for changes over {:?}, {passes} passes, \
         {reconciliations} reconciliations, {} writes, {} conflicts, {} errors, \
         {} machines enqueued",
        burst.triggers,
        burst.span,
        settled.writes,
        settled.conflicts,
        settled.errors,
        settled.machines_enqueued
    );
    // Each trigger needs a quiet period (or a maxDelay) of its own, however
    // slow the machine: a debouncer that passed changes through would make
    // hundreds.
    let debounce = cluster.config.reconciler.debounce_interval;
    let most_triggers = burst.span.as_millis() / debounce.as_millis() + 2;
    assert!(
        u128::from(burst.triggers) <= most_triggers && burst.triggers < changes / 10,
        "{} triggers for {changes} changes over {:?}: the debouncer should fold them",
        burst.triggers,
        burst.span
    );
    // A trigger looks at each class at most once; conflicts are retried.
    let most_reconciliations = burst.triggers * BURST_CLASSES as u64 + settled.conflicts;
    assert!(
        reconciliations <= most_reconciliations,
        "{reconciliations} reconciliations for {} triggers over {BURST_CLASSES} classes",
        burst.triggers
    );
    assert_eq!(
        settled.writes, BURST_CLASSES as u64,
        "one finalizer add per class, nothing else: {settled:?}"
    );
    assert_eq!(settled.errors, 0, "{settled:?}");

    // Steady state: every class is requeued every longRetry; the re-checks
    // find nothing to do.
    tokio::time::sleep(STEADY_STATE).await;
    let steady = running.executor_totals().await;
    let steady_passes = steady.passes - settled.passes;
    let steady_reconciliations = steady.reconciliations - settled.reconciliations;
    println!(
        "steady state over {STEADY_STATE:?} (longRetry {STEADY_REQUEUE:?}): {steady_passes} passes, \
         {steady_reconciliations} reconciliations, {} writes, {} conflicts, {} errors, \
         {} machines enqueued",
        steady.writes - settled.writes,
        steady.conflicts - settled.conflicts,
        steady.errors - settled.errors,
        steady.machines_enqueued - settled.machines_enqueued
    );
    assert_eq!(steady.writes, settled.writes, "requeues wrote: {steady:?}");
    assert_eq!(steady.errors, 0, "{steady:?}");
    assert_eq!(
        steady.machines_enqueued, settled.machines_enqueued,
        "periodic re-checks do not enqueue Machines"
    );
    assert!(steady_passes > 0, "no requeue pass ran");
    // Two rounds are due in a minute; at least one of every class.
    assert!(
        steady_reconciliations >= BURST_CLASSES as u64,
        "only {steady_reconciliations} requeued reconciliations in {STEADY_STATE:?}"
    );
    let state = finalized_classes(&classes, &finalizer).await;
    assert!(state.values().all(|protected| *protected), "{state:?}");
    running.stop().await;
}

/// What the controller's bus showed of a Machine burst.
struct Burst {
    /// Debounced triggers from the first change up to the settling pass.
    triggers: u64,
    /// From the first Machine created to the last change, the classes'
    /// finalizer updates included, as the index saw them.
    span: Duration,
}

/// Reads the bus until every Machine of the burst is in the index and the
/// burst has settled: a pass opened after the last change wrote nothing.
/// The finalizers a pass writes change their classes, and those changes
/// take the debouncer's way like any other, so they are part of the burst.
async fn observe_burst(events: &mut Subscription) -> Burst {
    let mut created = HashSet::new();
    let (mut first, mut last) = (None, None);
    let mut triggers = 0;
    // Every Machine is in and nothing changed since the latest trigger.
    let mut quiet = false;
    let mut settling_pass = None;
    loop {
        let envelope =
            next_event(events, "the burst in the index and its last pass", |_| true).await;
        match &envelope.event {
            Event::ResourceChanged {
                kind: ResourceKind::Machine,
                change: Change::Created,
                key,
                ..
            } => {
                created.insert(key.clone());
                first.get_or_insert(envelope.published_at);
                last = Some(envelope.published_at);
                quiet = false;
            }
            Event::ResourceChanged {
                kind: ResourceKind::MachineClass,
                ..
            } if first.is_some() => {
                last = Some(envelope.published_at);
                quiet = false;
            }
            Event::ReconciliationTriggered {
                reason: TriggerReason::Debounced,
            } if first.is_some() => {
                triggers += 1;
                quiet = created.len() == BURST_MACHINES;
                settling_pass = None;
            }
            Event::ReconciliationStarted { pass, .. } if quiet && settling_pass.is_none() => {
                settling_pass = Some(*pass);
            }
            Event::ReconciliationCompleted {
                pass, writes: 0, ..
            } if quiet && settling_pass == Some(*pass) => break,
            _ => {}
        }
    }
    let span = match (first, last) {
        (Some(first), Some(last)) => last.duration_since(first).unwrap_or_default(),
        _ => Duration::ZERO,
    };
    Burst { triggers, span }
}

/// Changes made while the controller is down are caught up by the next one:
/// the same finalizers as if it had never stopped, with exactly the writes
/// needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_catches_up() {
    let started = Instant::now();
    let cluster = Cluster::start().await;
    let (classes, machines, finalizer) =
        (cluster.classes(), cluster.machines(), cluster.finalizer());
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;

    for name in ["c0", "c1", "c2", "c3", "c4", "c5"] {
        create_class(&classes, name).await;
    }
    for (name, class) in [
        ("m0a", "c0"),
        ("m0b", "c0"),
        ("m1a", "c1"),
        ("m1b", "c1"),
        ("m2", "c2"),
        ("m3", "c3"),
    ] {
        create_machine(&machines, name, class).await;
    }
    let first_all = ["c0", "c1", "c2", "c3", "c4", "c5"];
    let first_used = ["c0", "c1", "c2", "c3"];
    wait_until("the first controller converged", || async {
        (finalized_classes(&classes, &finalizer).await == expected_state(&first_all, &first_used))
            .then_some(())
    })
    .await;
    running.stop().await;

    // While no controller runs: new classes in use, c4 used, c1 unused,
    // c0 still used by one Machine.
    for name in ["c6", "c7"] {
        create_class(&classes, name).await;
    }
    for (name, class) in [("m4", "c4"), ("m6a", "c6"), ("m6b", "c6"), ("m7", "c7")] {
        create_machine(&machines, name, class).await;
    }
    for name in ["m1a", "m1b", "m0b"] {
        delete_machine(&machines, name).await;
    }
    let all = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"];
    let used = ["c0", "c2", "c3", "c4", "c6", "c7"];
    assert_eq!(
        used_classes(&machines).await,
        used.iter().map(|s| s.to_string()).collect(),
        "the changes made while down"
    );
    // Nobody acted on them yet.
    assert_eq!(
        finalized_classes(&classes, &finalizer).await,
        expected_state(&all, &first_used)
    );

    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    wait_until(
        "the restarted controller converged: finalizers exactly on the classes in use",
        || async {
            let used = used_classes(&machines).await;
            let state = finalized_classes(&classes, &finalizer).await;
            let expected: BTreeMap<String, bool> = state
                .keys()
                .map(|name| (name.clone(), used.contains(name)))
                .collect();
            (state == expected
                && state == expected_state(&all, &["c0", "c2", "c3", "c4", "c6", "c7"]))
            .then_some(())
        },
    )
    .await;
    let totals = wait_until("the executor counted its writes", || async {
        let now = running.executor_totals().await;
        (now.writes >= 4).then_some(now)
    })
    .await;
    println!(
        "restart: second controller {totals:?}, test took {:?}",
        started.elapsed()
    );
    // c4, c6, c7 added, c1 removed; c0, c2, c3 already right.
    assert_eq!(totals.writes, 4, "{totals:?}");
    assert_eq!(totals.errors, 0, "{totals:?}");
    running.stop().await;
}

const OTHER_WRITER_ANNOTATION: &str = "e2e.poolkeeper.io/other-writer";

/// One patch the executor asked for.
#[derive(Clone, Debug)]
struct Attempt {
    key: ObjectKey,
    /// Another writer changed the class right before this patch.
    interfered: Result<bool, String>,
    result: Written,
}

/// What came of one patch.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Written {
    Ok,
    Conflict,
    Failed(String),
}

impl From<&Result<(), WriteError>> for Written {
    fn from(result: &Result<(), WriteError>) -> Self {
        match result {
            Ok(()) => Written::Ok,
            Err(WriteError::Conflict(_)) => Written::Conflict,
            Err(error) => Written::Failed(error.to_string()),
        }
    }
}

/// A [`ClassWriter`] that lets another writer change each class (an
/// annotation, which bumps its resourceVersion) right before the first
/// finalizer patch of that class goes out.
#[derive(Clone)]
struct InterferingWriter {
    inner: KubeClassWriter,
    client: Client,
    attempts: Arc<Mutex<Vec<Attempt>>>,
}

impl InterferingWriter {
    fn new(client: Client) -> Self {
        Self {
            inner: KubeClassWriter::new(client.clone()),
            client,
            attempts: Arc::default(),
        }
    }

    fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    async fn interfere(&self, key: &ObjectKey) -> Result<(), String> {
        let classes: Api<MachineClass> =
            Api::namespaced(self.client.clone(), key.namespace.as_deref().unwrap_or(""));
        let patch = json!({"metadata": {"annotations": {OTHER_WRITER_ANNOTATION: "was-here"}}});
        classes
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

impl ClassWriter for InterferingWriter {
    async fn patch_finalizers(&self, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        let first = !self
            .attempts
            .lock()
            .unwrap()
            .iter()
            .any(|attempt| attempt.key == *key);
        let interfered = if first {
            self.interfere(key).await.map(|()| true)
        } else {
            Ok(false)
        };
        let result = self.inner.patch_finalizers(key, patch).await;
        self.attempts.lock().unwrap().push(Attempt {
            key: key.clone(),
            interfered,
            result: Written::from(&result),
        });
        result
    }

    /// Secrets are not interfered with: the classes of this test reference none.
    async fn patch_secret_finalizers(
        &self,
        key: &ObjectKey,
        patch: &JsonPatch,
    ) -> Result<(), WriteError> {
        self.inner.patch_secret_finalizers(key, patch).await
    }
}

/// A finalizer patch that loses a race with another writer is rejected by
/// its guards (no clobbering), counted as a conflict, and retried: the class
/// ends up with the finalizer and with the other writer's change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_write_is_retried_without_clobbering() {
    let started = Instant::now();
    let cluster = Cluster::start().await;
    let (classes, machines, finalizer) =
        (cluster.classes(), cluster.machines(), cluster.finalizer());
    let writer = InterferingWriter::new(cluster.client());
    let mut running =
        Running::start_with_writer(&cluster.config, &cluster.env, writer.clone()).await;
    running.wait_ready().await;

    create_class(&classes, "contested").await;
    create_machine(&machines, "m1", "contested").await;
    let contested = key("contested");
    next_event(&mut running.events, "a conflict on contested", |event| {
        is_reconciled(event, &contested, ClassOutcome::Conflict)
    })
    .await;
    wait_finalizer(&classes, "contested", &finalizer, true).await;
    let totals = wait_until("the executor counted its write", || async {
        let now = running.executor_totals().await;
        (now.writes >= 1).then_some(now)
    })
    .await;

    let class = classes.get("contested").await.expect("reading contested");
    assert_eq!(
        class
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(OTHER_WRITER_ANNOTATION))
            .map(String::as_str),
        Some("was-here"),
        "the other writer's change is kept: {:?}",
        class.metadata
    );
    let attempts = writer.attempts();
    println!(
        "conflict: attempts {attempts:?}; {totals:?} in {:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            attempts.first(),
            Some(Attempt {
                key,
                interfered: Ok(true),
                result: Written::Conflict,
            }) if *key == contested
        ),
        "the first patch went out after the other writer and conflicted: {attempts:?}"
    );
    assert!(
        matches!(
            attempts.last(),
            Some(Attempt { key, interfered: Ok(false), result: Written::Ok }) if *key == contested
        ),
        "a retry succeeded: {attempts:?}"
    );
    assert!(totals.conflicts >= 1, "{totals:?}");
    assert_eq!(totals.writes, 1, "{totals:?}");
    assert_eq!(totals.errors, 0, "{totals:?}");
    running.stop().await;
}

/// The value of one series of the OpenMetrics text (`name` or
/// `name{labels}`), if present.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Started before the CRDs exist, the controller is alive but not ready
/// until its watchers can list; then `/metrics` and `/debug/events` show
/// the reconciliation that follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_the_index_and_admin_endpoints_report() {
    let started = Instant::now();
    let cluster = Cluster::start_without_crds().await;
    let (classes, machines, finalizer) =
        (cluster.classes(), cluster.machines(), cluster.finalizer());
    let mut running = Running::start(&cluster.config, &cluster.env).await;

    let failed = next_event(
        &mut running.events,
        "WatchFailed while the CRDs are missing",
        |event| {
            matches!(
                event,
                Event::WatchFailed {
                    kind: ResourceKind::MachineClass | ResourceKind::Machine,
                    ..
                }
            )
        },
    )
    .await;
    println!("without CRDs: {:?}", failed.event);
    let (status, body) = running.get("/readyz").await;
    assert_eq!(status, 503, "/readyz without CRDs: {body}");
    assert!(body.contains("[-]index failed"), "/readyz: {body}");
    let (status, body) = running.get("/readyz/index").await;
    assert_eq!(status, 503, "/readyz/index without CRDs: {body}");
    assert!(body.contains("[-]index failed"), "/readyz/index: {body}");
    let (status, body) = running.get("/healthz").await;
    assert_eq!(status, 200, "/healthz without CRDs: {body}");

    cluster
        .env
        .install_crds(poolkeeper_api::crds())
        .await
        .expect("installing the CRDs");
    let installed = Instant::now();
    let deadline = installed + TIMEOUT;
    loop {
        let (status, body) = running.get("/readyz?verbose").await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            Instant::now() < deadline,
            "not ready {TIMEOUT:?} after the CRDs were installed: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "ready {:?} after the CRDs were installed",
        installed.elapsed()
    );
    // Everything published until the first 200 is waiting in `events`.
    let mut synchronized = false;
    while let Some(delivery) = running.events.try_recv() {
        match delivery {
            Delivery::Event(envelope) => {
                synchronized |= matches!(envelope.event, Event::IndexSynchronized);
            }
            Delivery::Lagged(missed) => panic!("the observer lagged by {missed}"),
        }
    }
    assert!(synchronized, "IndexSynchronized published before ready");
    let (status, body) = running.get("/readyz/index").await;
    assert_eq!(status, 200, "/readyz/index: {body}");
    let (status, body) = running.get("/healthz").await;
    assert_eq!(status, 200, "/healthz: {body}");

    // One reconciliation that writes, then the admin endpoints.
    create_class(&classes, "observed").await;
    create_machine(&machines, "m1", "observed").await;
    wait_finalizer(&classes, "observed", &finalizer, true).await;
    wait_until("the executor counted its write", || async {
        (running.executor_totals().await.writes >= 1).then_some(())
    })
    .await;

    let (status, text) = running.get("/metrics").await;
    assert_eq!(status, 200, "/metrics: {text}");
    for series in [
        "poolkeeper_executor_passes_total",
        "poolkeeper_executor_api_writes_total{result=\"ok\"}",
        "poolkeeper_executor_requeues_total{requeue=\"long\"}",
        "poolkeeper_executor_reconciliations_total{outcome=\"finalizer_added\"}",
        "poolkeeper_executor_machines_enqueued_total{reason=\"finalizer_added\"}",
        "poolkeeper_executor_reconciliation_duration_seconds_count",
        "poolkeeper_index_objects{kind=\"MachineClass\"}",
        "poolkeeper_index_synchronized",
        "poolkeeper_watch_changes_total{kind=\"Machine\",change=\"created\"}",
        "poolkeeper_reconciler_triggers_total{reason=\"leadership_gained\"}",
        "poolkeeper_bus_events_published_total{event=\"MachineClassReconciled\"}",
    ] {
        let value = metric(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"));
        assert!(value > 0.0, "{series} is {value}");
    }
    assert_eq!(
        metric(
            &text,
            "poolkeeper_executor_api_writes_total{result=\"error\"}"
        ),
        Some(0.0),
        "{text}"
    );

    let (status, body) = running.get("/debug/events").await;
    assert_eq!(status, 200, "/debug/events: {body}");
    let entries: Vec<Value> = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("/debug/events is a JSON array ({e}): {body}"));
    let reconciled = entries.iter().any(|entry| {
        let event = &entry["event"];
        event["type"] == "MachineClassReconciled"
            && event["key"]["name"] == "observed"
            && event["outcome"] == "FinalizerAdded"
    });
    assert!(
        reconciled,
        "no MachineClassReconciled of observed in /debug/events: {body}"
    );
    assert!(
        entries
            .iter()
            .any(|entry| entry["event"]["type"] == "IndexSynchronized"),
        "IndexSynchronized in /debug/events: {body}"
    );
    println!("readiness and admin endpoints: {:?}", started.elapsed());
    running.stop().await;
}

/// The Kubernetes Events poolkeeper reported about MachineClass `name`:
/// (reason, type, series count) of each, oldest first.
async fn class_events(client: &Client, name: &str) -> Vec<(String, String, i32)> {
    let mut listed: Vec<_> = poolkeeper_events(client, MACHINE_NAMESPACE)
        .await
        .into_iter()
        .filter(|event| {
            event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && event
                    .regarding
                    .as_ref()
                    .and_then(|r| r.uid.as_deref())
                    .is_some()
        })
        .collect();
    listed.sort_by_key(|event| event.event_time.as_ref().map(|t| t.0));
    listed
        .into_iter()
        .map(|event| {
            let count = event.series.as_ref().map_or(1, |series| series.count);
            (
                event.reason.unwrap_or_default(),
                event.type_.unwrap_or_default(),
                count,
            )
        })
        .collect()
}

/// Adding and removing the finalizer is reported on the MachineClass
/// (`kubectl describe machineclass` shows it), once each; a steady state
/// of periodic passes adds no Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_changes_are_reported_as_kubernetes_events_once() {
    let cluster = Cluster::start().await;
    let (classes, machines, finalizer) =
        (cluster.classes(), cluster.machines(), cluster.finalizer());
    let mut config = cluster.config.clone();
    // Periodic passes every second: a steady state is many passes.
    config.executor.short_retry = Duration::from_millis(500);
    config.executor.long_retry = Duration::from_secs(1);
    let running = Running::start(&config, &cluster.env).await;
    running.wait_ready().await;

    create_class(&classes, "reported").await;
    create_machine(&machines, "m1", "reported").await;
    wait_finalizer(&classes, "reported", &finalizer, true).await;
    delete_machine(&machines, "m1").await;
    wait_finalizer(&classes, "reported", &finalizer, false).await;
    let client = cluster.client();
    let expected = vec![
        ("FinalizerAdded".to_owned(), "Normal".to_owned(), 1),
        ("FinalizerRemoved".to_owned(), "Normal".to_owned(), 1),
    ];
    wait_until("both Events are written", || async {
        (class_events(&client, "reported").await == expected).then_some(())
    })
    .await;

    let before = running.executor_totals().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = running.executor_totals().await;
    assert!(
        after.reconciliations >= before.reconciliations + 30,
        "periodic passes ran meanwhile: {before:?} -> {after:?}"
    );
    assert_eq!(
        class_events(&client, "reported").await,
        expected,
        "60 s of steady state add no Event"
    );
    running.stop().await;
}
