//! The executor component: dirty keys, passes, per-key requeues.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use json_patch::Patch as JsonPatch;
use poolkeeper_bus::{
    Bus, Change, ClassOutcome, Delivery, EnqueueReason, Event, ObjectKey, ResourceKind,
    Subscription,
};
use poolkeeper_index::Index;
use poolkeeper_supervisor::{Activity, BoxError, Component, Context};
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

use crate::decision::{after_write_error, decide};
use crate::metrics::{ExecutorMetrics, ExecutorStats, Metrics, WriteResult};
use crate::patch::finalizer_patch;
use crate::settings::ExecutorSettings;
use crate::writer::{ClassWriter, WriteError};

/// Bus events one unit of work may publish before it lets the rest of the
/// process (and the executor's own subscription) catch up.
const PUBLISH_BURST: usize = 64;

/// The executor component. See the crate documentation.
pub struct Executor<W: ClassWriter> {
    subscription: Subscription,
    worker: Arc<Worker<W>>,
}

impl<W: ClassWriter> std::fmt::Debug for Executor<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("settings", &self.worker.settings)
            .finish_non_exhaustive()
    }
}

impl<W: ClassWriter> Executor<W> {
    pub const NAME: &'static str = "executor";

    /// Subscribes to `bus` right away, so construct it before `bus.start()`.
    /// A `concurrency` of 0 is taken as 1.
    pub fn new(bus: &Bus, index: Arc<Index>, writer: W, settings: ExecutorSettings) -> Self {
        Self::with_metrics(bus, index, writer, settings, ExecutorMetrics::default())
    }

    /// [`Executor::new`] counting into `metrics`, registered once with
    /// [`ExecutorMetrics::register`].
    pub fn with_metrics(
        bus: &Bus,
        index: Arc<Index>,
        writer: W,
        mut settings: ExecutorSettings,
        metrics: ExecutorMetrics,
    ) -> Self {
        settings.concurrency = settings.concurrency.max(1);
        Self {
            subscription: bus.subscribe(Self::NAME),
            worker: Arc::new(Worker {
                bus: bus.clone(),
                index,
                writer,
                settings,
                metrics: metrics.metrics,
                stats: metrics.stats,
            }),
        }
    }

    /// Registers the executor's metrics (see the crate documentation).
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.worker.metrics.register(registry);
    }

    /// A handle on the running totals; it stays valid while the executor runs.
    pub fn stats(&self) -> ExecutorStats {
        self.worker.stats.clone()
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let mut state = State::default();
        let mut pass: Option<PassFuture> = None;
        loop {
            if pass.is_none() && state.wants_pass() {
                pass = Some(self.start_pass(&mut state, ctx.activity().clone()));
            }
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Ok(()),
                // Reading the bus first keeps this subscription drained while
                // a pass publishes, so the executor never lags on its own events.
                delivery = self.subscription.recv() => {
                    let Some(delivery) = delivery else {
                        // Every bus handle is gone: nothing can arrive any more.
                        ctx.cancelled().await;
                        return Ok(());
                    };
                    let _busy = ctx.busy("handling an event");
                    if state.on_delivery(&delivery, &self.worker.index) == Effect::StopWriting {
                        pass = None;
                    }
                }
                Some(expired) = state.requeues.next(), if !state.requeues.is_empty() => {
                    let key = expired.into_inner();
                    state.scheduled.remove(&key);
                    state.dirty.insert(key);
                    state.pass_requested = true;
                }
                results = finish(&mut pass) => {
                    pass = None;
                    state.apply(results);
                }
            }
        }
    }

    fn start_pass(&self, state: &mut State, activity: Activity) -> PassFuture {
        state.passes += 1;
        let number = state.passes;
        let keys = state.take_pass_keys(&self.worker.index);
        self.worker.metrics.pass();
        self.worker.stats.pass();
        Box::pin(self.worker.clone().run_pass(number, keys, activity))
    }
}

impl<W: ClassWriter> Component for Executor<W> {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_loop(ctx))
    }
}

type PassFuture = Pin<Box<dyn Future<Output = Vec<Reconciled>> + Send>>;

/// The results of the running pass, or never if none runs.
async fn finish(pass: &mut Option<PassFuture>) -> Vec<Reconciled> {
    match pass {
        Some(pass) => pass.await,
        None => std::future::pending().await,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    None,
    /// Leadership was lost: the running pass must be dropped.
    StopWriting,
}

/// Everything the event loop owns.
#[derive(Default)]
struct State {
    /// Classes to look at in the next pass.
    dirty: BTreeSet<ObjectKey>,
    /// The next pass looks at every class in the index.
    full: bool,
    pass_requested: bool,
    requeues: DelayQueue<ObjectKey>,
    scheduled: HashMap<ObjectKey, delay_queue::Key>,
    /// The spec hash of each class when this executor last acted on it.
    spec_hashes: HashMap<ObjectKey, u64>,
    /// The class each Machine referenced when last seen, to dirty the old
    /// class when a Machine moves or goes away.
    machine_classes: HashMap<ObjectKey, ObjectKey>,
    /// Only a leader writes. The supervisor runs the executor on the leader,
    /// so it starts out as one.
    follower: bool,
    stopping: bool,
    passes: u64,
}

impl State {
    fn wants_pass(&self) -> bool {
        self.pass_requested && !self.follower && !self.stopping
    }

    fn on_delivery(&mut self, delivery: &Delivery, index: &Index) -> Effect {
        let envelope = match delivery {
            Delivery::Lagged(missed) => {
                tracing::warn!(
                    missed,
                    "event bus subscription lagged, next pass is a full one"
                );
                self.request_pass(true);
                return Effect::None;
            }
            Delivery::Event(envelope) => envelope,
        };
        match &envelope.event {
            Event::ResourceChanged {
                kind, key, change, ..
            } => self.on_resource_changed(*kind, key, *change, index),
            Event::ReconciliationTriggered { reason } => self.request_pass(reason.is_full()),
            Event::LeadershipChanged { leader: true } => self.follower = false,
            Event::LeadershipChanged { leader: false } => {
                tracing::info!("leadership lost, writes stop");
                self.follower = true;
                self.pass_requested = false;
                self.dirty.clear();
                self.requeues.clear();
                self.scheduled.clear();
                // Whatever happens until leadership comes back is caught up
                // by one full pass.
                self.full = true;
                return Effect::StopWriting;
            }
            Event::ShutdownRequested => self.stopping = true,
            _ => {}
        }
        Effect::None
    }

    fn request_pass(&mut self, full: bool) {
        // A follower's triggers are moot: regaining leadership brings its own
        // full trigger.
        if self.follower {
            return;
        }
        self.pass_requested = true;
        self.full |= full;
    }

    fn on_resource_changed(
        &mut self,
        kind: ResourceKind,
        key: &ObjectKey,
        change: Change,
        index: &Index,
    ) {
        match kind {
            ResourceKind::MachineClass => {
                self.dirty.insert(key.clone());
            }
            ResourceKind::Machine => {
                let current = match change {
                    Change::Deleted => None,
                    Change::Created | Change::Updated => index
                        .machines()
                        .machine(key)
                        .map(|machine| class_key(key, &machine.class_name)),
                };
                let previous = match &current {
                    Some(class) => self.machine_classes.insert(key.clone(), class.clone()),
                    None => self.machine_classes.remove(key),
                };
                self.dirty.extend(previous);
                self.dirty.extend(current);
            }
            _ => {}
        }
    }

    /// The keys of the next pass with the spec hash last seen for each;
    /// resets the dirty set.
    fn take_pass_keys(&mut self, index: &Index) -> Vec<(ObjectKey, Option<u64>)> {
        let mut keys = std::mem::take(&mut self.dirty);
        if std::mem::take(&mut self.full) {
            let view = index.machines();
            keys.extend(view.machine_classes().map(|class| class.key.clone()));
            // Events may have been missed: rebuild what they maintain.
            self.machine_classes = view
                .machines()
                .map(|machine| {
                    (
                        machine.key.clone(),
                        class_key(&machine.key, &machine.class_name),
                    )
                })
                .collect();
        }
        self.pass_requested = false;
        keys.into_iter()
            .map(|key| {
                let seen = self.spec_hashes.get(&key).copied();
                (key, seen)
            })
            .collect()
    }

    fn apply(&mut self, results: Vec<Reconciled>) {
        for result in results {
            match result.requeue_after {
                Some(after) => self.schedule(result.key.clone(), after),
                None => {
                    if let Some(scheduled) = self.scheduled.remove(&result.key) {
                        self.requeues.remove(&scheduled);
                    }
                    self.spec_hashes.remove(&result.key);
                }
            }
            if let Some(hash) = result.seen_spec_hash {
                self.spec_hashes.insert(result.key, hash);
            }
        }
    }

    /// Schedules `key` after `after`, replacing an earlier schedule.
    fn schedule(&mut self, key: ObjectKey, after: Duration) {
        match self.scheduled.get(&key) {
            Some(scheduled) => self.requeues.reset(scheduled, after),
            None => {
                let scheduled = self.requeues.insert(key.clone(), after);
                self.scheduled.insert(key, scheduled);
            }
        }
    }
}

/// A Machine's class lives in the Machine's namespace.
fn class_key(machine: &ObjectKey, class_name: &str) -> ObjectKey {
    ObjectKey {
        namespace: machine.namespace.clone(),
        name: class_name.to_owned(),
    }
}

/// What reconciling one key produced.
#[derive(Debug)]
struct Reconciled {
    key: ObjectKey,
    /// When to look again; `None` when the class is gone and forgotten.
    requeue_after: Option<Duration>,
    /// The spec hash the reconciliation acted upon, when it took effect.
    seen_spec_hash: Option<u64>,
    wrote: bool,
    /// An API failure (conflicts are not failures).
    error: Option<String>,
}

/// The shared, read-only part of the executor that passes run on.
struct Worker<W> {
    bus: Bus,
    index: Arc<Index>,
    writer: W,
    settings: ExecutorSettings,
    metrics: Metrics,
    stats: ExecutorStats,
}

impl<W: ClassWriter> Worker<W> {
    async fn run_pass(
        self: Arc<Self>,
        pass: u64,
        keys: Vec<(ObjectKey, Option<u64>)>,
        activity: Activity,
    ) -> Vec<Reconciled> {
        let started = Instant::now();
        let total = keys.len();
        self.bus
            .publish(Event::ReconciliationStarted { pass, keys: total });
        tracing::debug!(pass, keys = total, "reconciliation pass started");
        // Re-armed after every key: a pass stalls only when no key completes.
        let mut busy = Some(activity.busy("reconciliation pass"));
        let mut results = Vec::with_capacity(total);
        let worker = self.clone();
        let mut reconciles = futures::stream::iter(keys)
            .map(move |(key, seen)| {
                let worker = worker.clone();
                async move { worker.reconcile(key, seen).await }
            })
            .buffer_unordered(self.settings.concurrency);
        while let Some(result) = reconciles.next().await {
            drop(busy.take());
            busy = Some(activity.busy("reconciliation pass"));
            results.push(result);
            if results.len() % PUBLISH_BURST == 0 {
                tokio::task::yield_now().await;
            }
        }
        drop(busy);
        let duration = started.elapsed();
        let writes = results.iter().filter(|r| r.wrote).count();
        let errors: Vec<(&ObjectKey, &str)> = results
            .iter()
            .filter_map(|r| r.error.as_deref().map(|e| (&r.key, e)))
            .collect();
        match errors.first() {
            None => {
                tracing::debug!(
                    pass,
                    keys = total,
                    writes,
                    ?duration,
                    "reconciliation pass completed"
                );
                self.bus.publish(Event::ReconciliationCompleted {
                    pass,
                    duration,
                    writes,
                });
            }
            Some((key, error)) => {
                let error = format!(
                    "{} of {total} MachineClasses failed, first {key}: {error}",
                    errors.len()
                );
                tracing::warn!(pass, writes, %error, "reconciliation pass failed");
                self.bus
                    .publish(Event::ReconciliationFailed { pass, error });
            }
        }
        results
    }

    /// Reconciles one MachineClass and returns when to look at it again.
    async fn reconcile(&self, key: ObjectKey, seen_spec_hash: Option<u64>) -> Reconciled {
        let started = Instant::now();
        let namespace = key.namespace.clone().unwrap_or_default();
        // Copied out so that no index lock is held across the write.
        let snapshot = {
            let view = self.index.machines();
            view.machine_class(&key).map(|class| {
                (
                    class.clone(),
                    view.machine_count_of_class(&namespace, &key.name),
                )
            })
        };
        let Some((class, machines_in_use)) = snapshot else {
            self.record(&key, ClassOutcome::Gone, None, started);
            return Reconciled {
                key,
                requeue_after: None,
                seen_spec_hash: None,
                wrote: false,
                error: None,
            };
        };
        let finalizer = &self.settings.finalizer;
        let spec_changed = seen_spec_hash.is_some_and(|seen| seen != class.spec_hash);
        let mut decision = decide(
            &class,
            machines_in_use,
            finalizer,
            spec_changed,
            &self.settings.retries,
        );
        let patch = decision
            .patch
            .and_then(|change| finalizer_patch(&class, change, finalizer));
        let mut wrote = false;
        let mut error = None;
        if let Some(patch) = patch {
            match self.write(&key, &patch).await {
                Ok(()) => {
                    wrote = true;
                    tracing::info!(class = %key, outcome = decision.outcome.as_str(), "MachineClass finalizer updated");
                }
                Err(write_error) => {
                    match &write_error {
                        WriteError::Conflict(_) => {
                            tracing::debug!(class = %key, error = %write_error, "finalizer patch conflicted, retrying");
                        }
                        _ => {
                            tracing::warn!(class = %key, error = %write_error, "finalizer patch failed");
                            error = Some(write_error.to_string());
                        }
                    }
                    decision = after_write_error(&write_error, &self.settings.retries);
                }
            }
        }
        // A failed write leaves the hash unrecorded, so that a spec change
        // still counts as one on the retry.
        let took_effect = !matches!(
            decision.outcome,
            ClassOutcome::Conflict | ClassOutcome::Error | ClassOutcome::Gone
        );
        if let Some(reason) = decision.enqueue {
            self.enqueue_machines(&namespace, &key.name, reason).await;
        }
        self.metrics.requeued(decision.requeue);
        self.record(
            &key,
            decision.outcome,
            Some(decision.requeue_after),
            started,
        );
        Reconciled {
            key,
            requeue_after: Some(decision.requeue_after),
            seen_spec_hash: took_effect.then_some(class.spec_hash),
            wrote,
            error,
        }
    }

    async fn write(&self, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        let timeout = self.settings.write_timeout;
        let result = tokio::time::timeout(timeout, self.writer.patch_finalizers(key, patch))
            .await
            .unwrap_or_else(|_| Err(WriteError::Api(format!("no answer within {timeout:?}"))));
        let kind = match &result {
            Ok(()) => WriteResult::Success,
            Err(WriteError::Conflict(_)) => WriteResult::Conflict,
            Err(WriteError::NotFound) => WriteResult::NotFound,
            Err(WriteError::Api(_)) => WriteResult::Error,
        };
        self.metrics.wrote(kind);
        self.stats.wrote(kind);
        result
    }

    async fn enqueue_machines(&self, namespace: &str, class_name: &str, reason: EnqueueReason) {
        let machines: Vec<ObjectKey> = self
            .index
            .machines()
            .machines_of_class(namespace, class_name)
            .map(|machine| machine.key.clone())
            .collect();
        let count = machines.len() as u64;
        for (i, key) in machines.into_iter().enumerate() {
            if i > 0 && i % PUBLISH_BURST == 0 {
                tokio::task::yield_now().await;
            }
            self.bus.publish(Event::MachineEnqueued { key, reason });
        }
        self.metrics.enqueued(reason, count);
        self.stats.enqueued(count);
    }

    fn record(
        &self,
        key: &ObjectKey,
        outcome: ClassOutcome,
        requeue_after: Option<Duration>,
        started: Instant,
    ) {
        self.metrics
            .reconciled(outcome, started.elapsed().as_secs_f64());
        self.stats.reconciled();
        self.bus.publish(Event::MachineClassReconciled {
            key: key.clone(),
            outcome,
            // A forgotten key is not requeued at all.
            requeue_after: requeue_after.unwrap_or_default(),
        });
    }
}
