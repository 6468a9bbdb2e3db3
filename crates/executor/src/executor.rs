//! The executor component: dirty keys, passes, per-key requeues.

mod secrets;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use json_patch::Patch as JsonPatch;
use poolkeeper_bus::{
    Bus, ClassOutcome, Delivery, Event, ObjectKey, Requeue, ResourceKind, Subscription,
};
use poolkeeper_index::{Index, MachineClass};
use poolkeeper_supervisor::{Activity, BoxError, Component, Context};
use tokio::time::Instant;

use crate::decision::{ClassDecision, after_write_error, decide};
use crate::enqueue::{MachineUse, deletion_announced, machines_to_enqueue};
use crate::patch::finalizer_patch;
use crate::requeues::Requeues;
use crate::settings::ExecutorSettings;
use crate::target::Target;
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
    pub fn new(settings: ExecutorSettings, bus: &Bus, index: Arc<Index>, writer: W) -> Self {
        debug_assert!(
            settings.concurrency > 0,
            "config validation requires executor.concurrency >= 1"
        );
        Self {
            subscription: bus.subscribe(Self::NAME),
            worker: Arc::new(Worker {
                bus: bus.clone(),
                index,
                writer,
                settings,
            }),
        }
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let mut state = State {
            secret_finalizer: self.worker.settings.secret_finalizer.clone(),
            ..State::default()
        };
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
                delivery = self.subscription.next_delivery() => {
                    let _busy = ctx.busy("handling an event");
                    if state.on_delivery(&delivery) == Effect::StopWriting {
                        pass = None;
                    }
                }
                key = state.requeues.next() => {
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
    /// Classes and Secrets to look at in the next pass.
    dirty: BTreeSet<Target>,
    /// The next pass looks at every class (and Secret) in the index.
    full: bool,
    pass_requested: bool,
    requeues: Requeues<Target>,
    /// The Secret finalizer when Secrets are reconciled too
    /// (`machineClasses.protectSecrets`).
    secret_finalizer: Option<String>,
    /// What this executor remembers of each class between passes.
    seen: HashMap<ObjectKey, Seen>,
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

    fn on_delivery(&mut self, delivery: &Delivery) -> Effect {
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
                kind, key, related, ..
            } => self.on_resource_changed(*kind, key, related),
            Event::ReconciliationTriggered { reason } => self.request_pass(reason.is_full()),
            Event::LeadershipChanged { leader: true } => self.follower = false,
            Event::LeadershipChanged { leader: false } => {
                self.lose_leadership();
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

    fn lose_leadership(&mut self) {
        tracing::info!("leadership lost, writes stop");
        self.follower = true;
        self.pass_requested = false;
        self.dirty.clear();
        self.requeues.clear();
        // Whatever happens until leadership comes back is caught up by one
        // full pass.
        self.full = true;
    }

    /// A class is dirty when it changed, or when a Machine that referenced
    /// it before or after the change did (`related`, as the index knew it).
    /// A Secret is dirty when it changed, or when a class that referenced it
    /// before or after the change did.
    fn on_resource_changed(&mut self, kind: ResourceKind, key: &ObjectKey, related: &[ObjectKey]) {
        match kind {
            ResourceKind::MachineClass => {
                self.dirty.insert(Target::Class(key.clone()));
                if self.secret_finalizer.is_some() {
                    self.dirty
                        .extend(related.iter().cloned().map(Target::Secret));
                }
            }
            ResourceKind::Machine => self
                .dirty
                .extend(related.iter().cloned().map(Target::Class)),
            ResourceKind::Secret if self.secret_finalizer.is_some() => {
                self.dirty.insert(Target::Secret(key.clone()));
            }
            _ => {}
        }
    }

    /// The keys of the next pass with what was last seen of each class;
    /// resets the dirty set. A full pass takes every class, and every Secret
    /// a class references or that carries the Secret finalizer.
    fn take_pass_keys(&mut self, index: &Index) -> Vec<(Target, Seen)> {
        let mut keys = std::mem::take(&mut self.dirty);
        if std::mem::take(&mut self.full) {
            keys.extend(
                index
                    .machines()
                    .machine_classes()
                    .map(|class| Target::Class(class.key.clone())),
            );
            if let Some(finalizer) = &self.secret_finalizer {
                keys.extend(secrets::secrets_to_check(index, finalizer).map(Target::Secret));
            }
        }
        self.pass_requested = false;
        keys.into_iter()
            .map(|target| {
                let seen = match &target {
                    Target::Class(key) => self.seen.get(key).copied().unwrap_or_default(),
                    Target::Secret(_) => Seen::default(),
                };
                (target, seen)
            })
            .collect()
    }

    fn apply(&mut self, results: Vec<Reconciled>) {
        for result in results {
            if result.requeue == Requeue::Never {
                self.requeues.cancel(&result.key);
                if let Target::Class(key) = &result.key {
                    self.seen.remove(key);
                }
                continue;
            }
            self.requeues
                .schedule(result.key.clone(), result.requeue_after);
            // Nothing is remembered of a Secret between passes.
            let Target::Class(key) = result.key else {
                continue;
            };
            let seen = self.seen.entry(key).or_default();
            if let Some(hash) = result.seen.spec_hash {
                seen.spec_hash = Some(hash);
            }
            seen.deletion_enqueued = result.seen.deletion_enqueued;
        }
    }
}

/// What this executor remembers of a class between passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    /// The spec hash the last reconciliation that took effect acted upon.
    spec_hash: Option<u64>,
    /// The class's Machines were enqueued for its deletion.
    deletion_enqueued: bool,
}

/// What reconciling one key produced.
#[derive(Debug)]
struct Reconciled {
    key: Target,
    /// The object's UID, from the index snapshot; `None` when it is gone.
    uid: Option<String>,
    outcome: ClassOutcome,
    requeue: Requeue,
    /// When to look again; zero with [`Requeue::Never`].
    requeue_after: Duration,
    /// What to remember of the class: the spec hash when the reconciliation
    /// took effect, and whether its deletion was announced to its Machines.
    seen: Seen,
    /// The write failure behind [`ClassOutcome::Error`].
    error: Option<WriteError>,
}

impl Reconciled {
    /// The object is gone from the index: it is forgotten, not requeued.
    fn gone(key: Target) -> Self {
        Self {
            key,
            uid: None,
            outcome: ClassOutcome::Gone,
            requeue: Requeue::Never,
            requeue_after: Duration::ZERO,
            seen: Seen::default(),
            error: None,
        }
    }
}

/// A class as one reconciliation sees it, copied out of the index so that
/// no index lock is held across the write.
struct Snapshot {
    class: MachineClass,
    machines: MachineUse,
}

/// The shared, read-only part of the executor that passes run on.
struct Worker<W> {
    bus: Bus,
    index: Arc<Index>,
    writer: W,
    settings: ExecutorSettings,
}

impl<W: ClassWriter> Worker<W> {
    async fn run_pass(
        self: Arc<Self>,
        pass: u64,
        keys: Vec<(Target, Seen)>,
        activity: Activity,
    ) -> Vec<Reconciled> {
        let started = Instant::now();
        let total = keys.len();
        self.bus
            .publish(Event::ReconciliationStarted { pass, keys: total });
        tracing::debug!(pass, keys = total, "reconciliation pass started");
        let results = self.clone().reconcile_all(keys, activity).await;
        self.report_pass(pass, &results, started.elapsed());
        results
    }

    /// Reconciles `keys` with bounded concurrency, each key once.
    async fn reconcile_all(
        self: Arc<Self>,
        keys: Vec<(Target, Seen)>,
        activity: Activity,
    ) -> Vec<Reconciled> {
        // Re-armed after every key: a pass stalls only when no key completes.
        let mut busy = Some(activity.busy("reconciliation pass"));
        let mut results = Vec::with_capacity(keys.len());
        let concurrency = self.settings.concurrency;
        let mut reconciles = futures::stream::iter(keys)
            .map(move |(key, seen)| {
                let worker = self.clone();
                async move { worker.reconcile(key, seen).await }
            })
            .buffer_unordered(concurrency);
        while let Some(result) = reconciles.next().await {
            drop(busy.take());
            busy = Some(activity.busy("reconciliation pass"));
            results.push(result);
            if results.len() % PUBLISH_BURST == 0 {
                tokio::task::yield_now().await;
            }
        }
        results
    }

    fn report_pass(&self, pass: u64, results: &[Reconciled], duration: Duration) {
        let keys = results.len();
        let writes = results.iter().filter(|r| r.outcome.wrote()).count();
        let mut failures = results
            .iter()
            .filter_map(|r| r.error.as_ref().map(|error| (&r.key, error)));
        let first_failure = failures.next();
        let failed = first_failure.map_or(0, |_| 1 + failures.count());
        match first_failure {
            None => tracing::debug!(
                pass,
                keys,
                writes,
                duration_ms = duration.as_millis() as u64,
                "reconciliation pass completed"
            ),
            Some((target, error)) => tracing::warn!(
                pass,
                keys,
                writes,
                failed,
                first_failed = %target,
                %error,
                duration_ms = duration.as_millis() as u64,
                "reconciliation pass completed with failed writes"
            ),
        }
        self.bus.publish(Event::ReconciliationCompleted {
            pass,
            duration,
            writes,
            failed,
        });
    }

    /// Reconciles one MachineClass (snapshot, decision, write, enqueues,
    /// and the event that reports it), or one Secret.
    async fn reconcile(&self, target: Target, seen: Seen) -> Reconciled {
        let key = match target {
            Target::Class(key) => key,
            Target::Secret(key) => return self.reconcile_secret(key).await,
        };
        let started = Instant::now();
        let reconciled = match self.snapshot(&key) {
            Some(snapshot) => self.reconcile_class(key.clone(), snapshot, seen).await,
            None => Reconciled::gone(Target::Class(key.clone())),
        };
        self.report(&key, &reconciled, started.elapsed());
        reconciled
    }

    fn snapshot(&self, key: &ObjectKey) -> Option<Snapshot> {
        let view = self.index.machines();
        let class = view.machine_class(key)?.clone();
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let machines = MachineUse::of(
            view.machines_of_class(namespace, &key.name)
                .map(|machine| machine.deleting),
        );
        Some(Snapshot { class, machines })
    }

    async fn reconcile_class(&self, key: ObjectKey, snapshot: Snapshot, seen: Seen) -> Reconciled {
        let Snapshot { class, machines } = snapshot;
        let spec_changed = seen.spec_hash.is_some_and(|hash| hash != class.spec_hash);
        let decision = decide(
            &class,
            machines.in_use,
            &self.settings.finalizer,
            (spec_changed, seen.deletion_enqueued),
            &self.settings.retries,
        );
        let (decision, error) = self.apply_decision(&key, &class, decision).await;
        if let Some((reason, count)) = machines_to_enqueue(&decision, machines) {
            // One event per class and pass, whatever the number of Machines:
            // the bus holds a bounded number of events.
            self.bus.publish(Event::MachinesEnqueued {
                class: key.clone(),
                reason,
                machines: count,
            });
        }
        let deletion_enqueued =
            deletion_announced(class.deleting, seen.deletion_enqueued, &decision);
        // A failed write leaves the hash unrecorded, so that a spec change
        // still counts as one on the retry.
        let took_effect = !matches!(
            decision.outcome,
            ClassOutcome::Conflict | ClassOutcome::Error | ClassOutcome::Gone
        );
        Reconciled {
            key: Target::Class(key),
            uid: Some(class.uid.clone()).filter(|uid| !uid.is_empty()),
            outcome: decision.outcome,
            requeue: decision.requeue,
            requeue_after: decision.requeue_after,
            seen: Seen {
                spec_hash: took_effect.then_some(class.spec_hash),
                deletion_enqueued,
            },
            error,
        }
    }

    /// Writes the decision's patch, if it has one. A failed write turns the
    /// decision into its retry, with the error when it is a failure rather
    /// than a lost race.
    async fn apply_decision(
        &self,
        key: &ObjectKey,
        class: &MachineClass,
        decision: ClassDecision,
    ) -> (ClassDecision, Option<WriteError>) {
        let finalizer = &self.settings.finalizer;
        let Some(patch) = decision
            .patch
            .and_then(|change| finalizer_patch(class, change, finalizer))
        else {
            return (decision, None);
        };
        let error = match self.write(key, &patch).await {
            Ok(()) => {
                tracing::info!(class = %key, outcome = %decision.outcome, "MachineClass finalizers updated");
                return (decision, None);
            }
            Err(error) => error,
        };
        let retry = after_write_error(&error, &self.settings.retries);
        if retry.outcome == ClassOutcome::Error {
            tracing::warn!(class = %key, %error, "finalizer patch failed");
            (retry, Some(error))
        } else {
            tracing::debug!(class = %key, outcome = %retry.outcome, %error, "finalizer patch lost a race, retrying");
            (retry, None)
        }
    }

    async fn write(&self, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        self.within_write_timeout(self.writer.patch_finalizers(key, patch))
            .await
    }

    /// `write`, given up as failed after `executor.writeTimeout`.
    async fn within_write_timeout(
        &self,
        write: impl Future<Output = Result<(), WriteError>>,
    ) -> Result<(), WriteError> {
        let timeout = self.settings.write_timeout;
        tokio::time::timeout(timeout, write)
            .await
            .unwrap_or(Err(WriteError::Timeout(timeout)))
    }

    fn report(&self, key: &ObjectKey, reconciled: &Reconciled, duration: Duration) {
        self.bus.publish(Event::MachineClassReconciled {
            key: key.clone(),
            uid: reconciled.uid.clone(),
            outcome: reconciled.outcome,
            requeue: reconciled.requeue,
            requeue_after: reconciled.requeue_after,
            duration,
        });
    }
}
