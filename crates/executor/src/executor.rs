//! The executor component: dirty keys, passes, per-key requeues.

mod passes;
mod secrets;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use json_patch::Patch as JsonPatch;
use poolkeeper_bus::{
    Bus, ClassOutcome, Delivery, Event, ObjectKey, Requeue, ResourceKind, Subscription,
};
use poolkeeper_index::{Index, MachineClass};
use poolkeeper_supervisor::{BoxError, Component, Context, LeaderTerm};
use tokio::time::Instant;

use self::passes::Passes;
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
    worker: Worker<W>,
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
            worker: Worker {
                bus: bus.clone(),
                index,
                writer,
                settings,
                term: None,
            },
        }
    }

    /// Every write first asks `term` for leave (see [`LeaderTerm`]): none is
    /// sent past the leader's term, and none takes longer than what is left
    /// of it. Without it the executor writes as a replica that leads
    /// unconditionally.
    pub fn guarded_by(mut self, term: LeaderTerm) -> Self {
        self.worker.term = Some(term);
        self
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let worker = Arc::new(self.worker);
        let mut state = State {
            secret_finalizer: worker.settings.secret_finalizer.clone(),
            ..State::default()
        };
        let mut passes = Passes::new(ctx.activity().clone());
        let mut reconciled = 0_usize;
        loop {
            passes.fill(&worker);
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Ok(()),
                // Reading the bus first keeps this subscription drained while
                // passes publish, so the executor never lags on its own events.
                delivery = self.subscription.next_delivery() => {
                    let _busy = ctx.busy("handling an event");
                    if state.on_delivery(&delivery) == Effect::StopWriting {
                        passes.clear();
                    }
                }
                // A pass opens once the bus is drained: its first event must
                // not push unread ones out of this subscription.
                () = std::future::ready(()), if state.wants_pass() => {
                    if let Some((number, keys)) = state.next_pass(&worker.index) {
                        passes.open(&worker.bus, number, keys);
                    }
                }
                key = state.requeues.next() => {
                    state.mark_dirty(key);
                    state.pass_requested = true;
                }
                (pass, result) = passes.next() => {
                    passes.finished(&worker.bus, pass, &result);
                    state.apply(result);
                    reconciled += 1;
                    if reconciled.is_multiple_of(PUBLISH_BURST) {
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    None,
    /// Leadership was lost: the open passes must be dropped.
    StopWriting,
}

/// Everything the event loop owns.
#[derive(Default)]
struct State {
    /// Classes and Secrets to look at in the next pass.
    dirty: BTreeSet<Target>,
    /// Keys of the open passes, queued or being reconciled: no other pass
    /// takes them until their reconciliation is done.
    taken: HashSet<Target>,
    /// Taken keys a pass asked for; they go back to `dirty`, with a pass
    /// of their own, when their reconciliation is done.
    deferred: BTreeSet<Target>,
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
        self.pass_requested
            && !self.follower
            && !self.stopping
            && (self.full || !self.dirty.is_empty() || self.taken.is_empty())
    }

    /// The number and keys of the pass to open now, if any. A requested
    /// pass with nothing to do but keys still being reconciled waits for
    /// them: triggers while passes are open coalesce into one next pass.
    fn next_pass(&mut self, index: &Index) -> Option<(u64, Vec<(Target, Seen)>)> {
        if !self.wants_pass() {
            return None;
        }
        let keys = self.take_pass_keys(index);
        if keys.is_empty() && !self.taken.is_empty() {
            self.pass_requested = true;
            return None;
        }
        self.passes += 1;
        Some((self.passes, keys))
    }

    /// A key that changes while it is being reconciled stays dirty until a
    /// trigger asks for it, like any other: changes never bypass the
    /// debouncer.
    fn mark_dirty(&mut self, target: Target) {
        self.dirty.insert(target);
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
        self.taken.clear();
        self.deferred.clear();
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
                self.mark_dirty(Target::Class(key.clone()));
                if self.secret_finalizer.is_some() {
                    for secret in related {
                        self.mark_dirty(Target::Secret(secret.clone()));
                    }
                }
            }
            ResourceKind::Machine => {
                for class in related {
                    self.mark_dirty(Target::Class(class.clone()));
                }
            }
            ResourceKind::Secret if self.secret_finalizer.is_some() => {
                self.mark_dirty(Target::Secret(key.clone()));
            }
            _ => {}
        }
    }

    /// The keys of the next pass with what was last seen of each class;
    /// resets the dirty set and marks the keys taken. A full pass takes
    /// every class, and every Secret a class references or that carries the
    /// Secret finalizer; of those, the ones still taken are deferred.
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
        let (deferred, keys): (Vec<_>, Vec<_>) =
            keys.into_iter().partition(|key| self.taken.contains(key));
        self.deferred.extend(deferred);
        self.taken.extend(keys.iter().cloned());
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

    /// Takes in one key's reconciliation; a key a pass asked for while it
    /// ran gets a pass of its own now.
    fn apply(&mut self, result: Reconciled) {
        self.taken.remove(&result.key);
        if self.deferred.remove(&result.key) {
            self.dirty.insert(result.key.clone());
            self.pass_requested = true;
        }
        if result.requeue == Requeue::Never {
            self.requeues.cancel(&result.key);
            if let Target::Class(key) = &result.key {
                self.seen.remove(key);
            }
            return;
        }
        self.requeues
            .schedule(result.key.clone(), result.requeue_after);
        // Nothing is remembered of a Secret between passes.
        let Target::Class(key) = result.key else {
            return;
        };
        let seen = self.seen.entry(key).or_default();
        if let Some(hash) = result.seen.spec_hash {
            seen.spec_hash = Some(hash);
        }
        seen.deletion_enqueued = result.seen.deletion_enqueued;
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
    /// The leader's term every write asks first; `None` when this replica
    /// leads unconditionally.
    term: Option<LeaderTerm>,
}

impl<W: ClassWriter> Worker<W> {
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

    /// `write`, sent only within the leader's term and given up as failed
    /// after `executor.writeTimeout` or at the term's end, whichever is first.
    async fn within_write_timeout(
        &self,
        write: impl Future<Output = Result<(), WriteError>>,
    ) -> Result<(), WriteError> {
        let mut timeout = self.settings.write_timeout;
        if let Some(term) = &self.term {
            timeout = term.permit()?.bound(timeout);
        }
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
