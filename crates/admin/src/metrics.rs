//! Every Prometheus metric of poolkeeper but the bus's own counters and the
//! watchdog's component gauges: derived from bus events by one observer, so
//! each thing that happens is recorded once (as an event) and counted here.
//!
//! Names are registered under the binary's `poolkeeper` prefix; counters get
//! `_total` and durations `_seconds` from prometheus-client.
//!
//! | metric | labels | from |
//! |---|---|---|
//! | `index_objects` | `kind` | the index, read at scrape time |
//! | `index_synchronized` | | `IndexSynchronized` |
//! | `watch_changes_total` | `kind`, `change` | `ResourceChanged` |
//! | `watch_failures_total` | `kind` | `WatchFailed` |
//! | `watch_failing` | `kind` | `WatchFailed` sets it to 1, `WatchRecovered` back to 0 |
//! | `watch_synced` | `kind` | `ResourceSynced` (1 once the kind's first list is applied) |
//! | `reconciler_triggers_total` | `reason` | `ReconciliationTriggered` |
//! | `executor_passes_total` | | `ReconciliationStarted` |
//! | `executor_pass_duration_seconds` | | `ReconciliationCompleted` |
//! | `executor_failed_passes_total` | | `ReconciliationCompleted` with failures |
//! | `executor_reconciliations_total` | `outcome` | `MachineClassReconciled` |
//! | `executor_reconciliation_duration_seconds` | | `MachineClassReconciled` |
//! | `executor_requeues_total` | `requeue` | `MachineClassReconciled` |
//! | `executor_api_writes_total` | `result` | `MachineClassReconciled` (outcomes that wrote or failed to) |
//! | `executor_machines_enqueued_total` | `reason` | `MachinesEnqueued` (its `machines`) |
//! | `executor_secret_reconciliations_total` | `outcome` | `SecretReconciled` |
//! | `webhook_admissions_total` | `webhook`, `result`, `mode` | `AdmissionDecided` |
//! | `webhook_admission_duration_seconds` | `webhook` | `AdmissionDecided` |
//! | `audit_violations` | `namespace`, `pool`, `reason` | `AuditCompleted` (the last round's; a violation that is gone disappears) |
//! | `audit_pods` | | `AuditCompleted` (Pods read and judged in the last round) |
//! | `audit_rounds_total` | | `AuditCompleted` |
//! | `audit_duration_seconds` | | `AuditCompleted` |
//! | `placement_rejected_bindings` | `reason` | `BindingsRejected` (Namespace label bindings that take no effect) |
//! | `placement_exceptions_applied_total` | `webhook`, `exception` (`namespace/name`) | `ExceptionsApplied` |
//! | `leader_election_leading` | | `LeadershipChanged` |
//! | `certificate_expiry_timestamp_seconds` | `certificate` (`leaf`, `ca`) | `CertificateServed` (the served certificate's notAfter, and its CA's) |

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use poolkeeper_bus::{
    AdmissionResult, AuditCount, BindingRejection, Bus, Change, ClassOutcome, Delivery,
    EnqueueReason, Event, IntoEnumIterator, Mode, RejectedBinding, Requeue, ResourceKind,
    Subscription, TriggerReason, WebhookKind,
};
use poolkeeper_supervisor::{BoxError, Component, Context};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Name of the observer's bus subscription (and of its lag metric label).
pub const METRICS_SUBSCRIBER: &str = "metrics";

/// Admission latency buckets: the decision takes microseconds, the request
/// around a millisecond; the API server's own timeout is 10 s at most.
const ADMISSION_BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 1.0, 10.0,
];
/// Reconciliation buckets: one class is a finalizer patch at most.
const RECONCILE_BUCKETS: [f64; 10] = [0.000_1, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0];

/// Object counts of the index by kind, read at every scrape.
pub type ObjectCounts = Arc<dyn Fn() -> Vec<(ResourceKind, usize)> + Send + Sync>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindChange {
    kind: &'static str,
    change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

impl From<ResourceKind> for Kind {
    fn from(kind: ResourceKind) -> Self {
        Self {
            kind: kind.as_str(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequeueLabel {
    requeue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteResult {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Admission {
    webhook: &'static str,
    result: &'static str,
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppliedException {
    webhook: &'static str,
    /// `namespace/name`.
    exception: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Violation {
    namespace: String,
    pool: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabel {
    certificate: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Webhook {
    webhook: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn admission_histogram() -> Histogram {
    Histogram::new(ADMISSION_BUCKETS)
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// The metric values, shared by the observer and the registry.
#[derive(Debug)]
struct Metrics {
    index_synchronized: Gauge,
    watch_changes: Family<KindChange, Counter>,
    watch_failures: Family<Kind, Counter>,
    watch_failing: Family<Kind, Gauge>,
    watch_synced: Family<Kind, Gauge>,
    triggers: Family<Reason, Counter>,
    passes: Counter,
    pass_duration: Histogram,
    failed_passes: Counter,
    reconciliations: Family<Outcome, Counter>,
    reconciliation_duration: Histogram,
    requeues: Family<RequeueLabel, Counter>,
    api_writes: Family<WriteResult, Counter>,
    enqueued: Family<Reason, Counter>,
    secret_reconciliations: Family<Outcome, Counter>,
    admissions: Family<Admission, Counter>,
    exceptions_applied: Family<AppliedException, Counter>,
    admission_duration: Histograms<Webhook>,
    audit_violations: Family<Violation, Gauge>,
    audit_pods: Gauge,
    audit_rounds: Counter,
    audit_duration: Histogram,
    rejected_bindings: Family<Reason, Gauge>,
    leading: Gauge,
    certificate_expiry: Family<CertificateLabel, Gauge>,
}

impl Metrics {
    fn new() -> Self {
        Self {
            index_synchronized: Gauge::default(),
            watch_changes: Family::default(),
            watch_failures: Family::default(),
            watch_failing: Family::default(),
            watch_synced: Family::default(),
            triggers: Family::default(),
            passes: Counter::default(),
            pass_duration: reconcile_histogram(),
            failed_passes: Counter::default(),
            reconciliations: Family::default(),
            reconciliation_duration: reconcile_histogram(),
            requeues: Family::default(),
            api_writes: Family::default(),
            enqueued: Family::default(),
            secret_reconciliations: Family::default(),
            admissions: Family::default(),
            exceptions_applied: Family::default(),
            admission_duration: Family::new_with_constructor(admission_histogram),
            audit_violations: Family::default(),
            audit_pods: Gauge::default(),
            audit_rounds: Counter::default(),
            audit_duration: reconcile_histogram(),
            rejected_bindings: Family::default(),
            leading: Gauge::default(),
            certificate_expiry: Family::default(),
        }
        .with_every_label()
    }

    /// Every label value shows up from the start, at zero, so a rate() over
    /// a series that has not happened yet is 0 rather than absent.
    fn with_every_label(self) -> Self {
        for kind in ResourceKind::iter() {
            let _ = self.watch_failures.get_or_create(&Kind::from(kind));
            let _ = self.watch_failing.get_or_create(&Kind::from(kind));
            let _ = self.watch_synced.get_or_create(&Kind::from(kind));
        }
        for reason in TriggerReason::iter() {
            let _ = self.triggers.get_or_create(&Reason {
                reason: reason.as_str(),
            });
        }
        for outcome in ClassOutcome::iter() {
            let _ = self.reconciliations.get_or_create(&Outcome {
                outcome: outcome.as_str(),
            });
            let _ = self.secret_reconciliations.get_or_create(&Outcome {
                outcome: outcome.as_str(),
            });
        }
        for requeue in Requeue::iter() {
            let _ = self.requeues.get_or_create(&RequeueLabel {
                requeue: requeue.as_str(),
            });
        }
        for result in WRITE_RESULTS {
            let _ = self.api_writes.get_or_create(&WriteResult { result });
        }
        for reason in EnqueueReason::iter() {
            let _ = self.enqueued.get_or_create(&Reason {
                reason: reason.as_str(),
            });
        }
        for reason in BindingRejection::iter() {
            let _ = self.rejected_bindings.get_or_create(&Reason {
                reason: reason.as_str(),
            });
        }
        for webhook in WebhookKind::iter() {
            for result in AdmissionResult::iter() {
                let _ = self.admissions.get_or_create(&Admission {
                    webhook: webhook.as_str(),
                    result: result.as_str(),
                    mode: Mode::Enforce.as_str(),
                });
            }
        }
        self
    }

    fn register(self: &Arc<Self>, registry: &mut Registry, objects: ObjectCounts) {
        let index = registry.sub_registry_with_prefix("index");
        index.register_collector(Box::new(IndexObjects(objects)));
        index.register(
            "synchronized",
            "Whether every watched kind has been listed (1) or not yet (0)",
            self.index_synchronized.clone(),
        );
        let watch = registry.sub_registry_with_prefix("watch");
        watch.register(
            "changes",
            "Changes of watched objects applied to the index, by kind and change",
            self.watch_changes.clone(),
        );
        watch.register(
            "failures",
            "Watch failures (each is retried), by kind",
            self.watch_failures.clone(),
        );
        watch.register(
            "failing",
            "Whether the kind's watch is failing and being retried (1) or works (0), by kind",
            self.watch_failing.clone(),
        );
        watch.register(
            "synced",
            "Whether the kind's first list has been applied (1) or not yet (0), by kind",
            self.watch_synced.clone(),
        );
        registry.sub_registry_with_prefix("reconciler").register(
            "triggers",
            "Reconciliation passes asked for, by reason",
            self.triggers.clone(),
        );
        self.register_executor(registry.sub_registry_with_prefix("executor"));
        let webhook = registry.sub_registry_with_prefix("webhook");
        webhook.register(
            "admissions",
            "Admission requests answered, by webhook and result",
            self.admissions.clone(),
        );
        webhook.register_with_unit(
            "admission_duration",
            "Time to answer an admission request once its body was read, by webhook",
            Unit::Seconds,
            self.admission_duration.clone(),
        );
        self.register_audit(registry.sub_registry_with_prefix("audit"));
        let placement = registry.sub_registry_with_prefix("placement");
        placement.register(
            "rejected_bindings",
            "Namespace label bindings that take no effect, by reason",
            self.rejected_bindings.clone(),
        );
        placement.register(
            "exceptions_applied",
            "Admissions a PlacementException changed, by webhook and exception",
            self.exceptions_applied.clone(),
        );
        registry
            .sub_registry_with_prefix("leader_election")
            .register(
                "leading",
                "Whether this replica is the leader (1) or not (0)",
                self.leading.clone(),
            );
        registry.sub_registry_with_prefix("certificate").register_with_unit(
            "expiry_timestamp",
            "When the webhook's serving certificate (leaf) and the CA that signed it (ca) expire, in seconds since the Unix epoch",
            Unit::Seconds,
            self.certificate_expiry.clone(),
        );
    }

    fn register_audit(&self, audit: &mut Registry) {
        audit.register(
            "violations",
            "Pods outside their pool found by the last audit round, by namespace, pool and reason",
            self.audit_violations.clone(),
        );
        audit.register(
            "pods",
            "Pods the last audit round read and judged (those on their namespace's pools' Nodes are left out)",
            self.audit_pods.clone(),
        );
        audit.register(
            "rounds",
            "Audit rounds completed",
            self.audit_rounds.clone(),
        );
        audit.register_with_unit(
            "duration",
            "Time an audit round took, its LIST included",
            Unit::Seconds,
            self.audit_duration.clone(),
        );
    }

    fn register_executor(&self, executor: &mut Registry) {
        executor.register(
            "passes",
            "Reconciliation passes started",
            self.passes.clone(),
        );
        executor.register_with_unit(
            "pass_duration",
            "Time a reconciliation pass took",
            Unit::Seconds,
            self.pass_duration.clone(),
        );
        executor.register(
            "failed_passes",
            "Reconciliation passes in which at least one MachineClass hit an API error",
            self.failed_passes.clone(),
        );
        executor.register(
            "reconciliations",
            "MachineClass reconciliations, by outcome",
            self.reconciliations.clone(),
        );
        executor.register_with_unit(
            "reconciliation_duration",
            "Time one MachineClass reconciliation took, its write included",
            Unit::Seconds,
            self.reconciliation_duration.clone(),
        );
        executor.register(
            "requeues",
            "MachineClass requeues, by retry period",
            self.requeues.clone(),
        );
        executor.register(
            "api_writes",
            "Finalizer patches sent to the API server, by result",
            self.api_writes.clone(),
        );
        executor.register(
            "machines_enqueued",
            "Machines handed on for reconciliation, by reason",
            self.enqueued.clone(),
        );
        executor.register(
            "secret_reconciliations",
            "Reconciliations of Secrets MachineClasses may reference, by outcome",
            self.secret_reconciliations.clone(),
        );
    }

    fn observe(&self, event: &Event) {
        match event {
            // The watches and the index.
            Event::ResourceChanged { kind, change, .. } => self.changed(*kind, *change),
            Event::ResourceSynced { kind } => self.flag(&self.watch_synced, *kind, true),
            Event::IndexSynchronized => {
                self.index_synchronized.set(1);
            }
            Event::WatchFailed { kind, .. } => {
                self.watch_failures.get_or_create(&Kind::from(*kind)).inc();
                self.flag(&self.watch_failing, *kind, true);
            }
            Event::WatchRecovered { kind } => self.flag(&self.watch_failing, *kind, false),
            // Reconciliation.
            Event::ReconciliationTriggered { reason } => self.triggered(*reason),
            Event::ReconciliationStarted { .. } => {
                self.passes.inc();
            }
            Event::ReconciliationCompleted {
                duration, failed, ..
            } => self.completed(*duration, *failed),
            Event::MachineClassReconciled {
                outcome,
                requeue,
                duration,
                ..
            } => self.reconciled(*outcome, *requeue, *duration),
            Event::SecretReconciled { outcome, .. } => self.secret_reconciled(*outcome),
            Event::MachinesEnqueued {
                reason, machines, ..
            } => self.machines_enqueued(*reason, *machines),
            // Placement: admission, audit, the policy's rejected bindings.
            Event::AdmissionDecided {
                webhook,
                result,
                mode,
                duration,
                ..
            } => self.admitted(*webhook, *result, *mode, *duration),
            Event::AuditCompleted {
                pods,
                duration,
                counts,
                ..
            } => self.audited(*pods, *duration, counts),
            Event::BindingsRejected { rejected } => self.rejected(rejected),
            Event::ExceptionsApplied {
                webhook,
                exceptions,
            } => self.exceptions_applied(*webhook, exceptions),
            // The replica.
            Event::LeadershipChanged { leader } => {
                self.leading.set(i64::from(*leader));
            }
            Event::CertificateServed {
                leaf_not_after,
                ca_not_after,
            } => self.certificate_served(*leaf_not_after, *ca_not_after),
            // Counted by `placement_engine_problem` and `cel_policy_errors_total`, which its
            // publisher keeps.
            Event::AdmissionPolicyProblem { .. } | Event::ShutdownRequested => {}
        }
    }

    fn certificate_served(&self, leaf: i64, ca: Option<i64>) {
        let label = |certificate| CertificateLabel { certificate };
        self.certificate_expiry
            .get_or_create(&label("leaf"))
            .set(leaf);
        match ca {
            Some(ca) => {
                self.certificate_expiry.get_or_create(&label("ca")).set(ca);
            }
            None => {
                self.certificate_expiry.remove(&label("ca"));
            }
        }
    }

    /// Sets the 0/1 gauge of `family` for `kind`.
    fn flag(&self, family: &Family<Kind, Gauge>, kind: ResourceKind, on: bool) {
        family.get_or_create(&Kind::from(kind)).set(i64::from(on));
    }

    fn triggered(&self, reason: TriggerReason) {
        self.triggers
            .get_or_create(&Reason {
                reason: reason.as_str(),
            })
            .inc();
    }

    fn completed(&self, duration: Duration, failed: usize) {
        self.pass_duration.observe(duration.as_secs_f64());
        if failed > 0 {
            self.failed_passes.inc();
        }
    }

    fn secret_reconciled(&self, outcome: ClassOutcome) {
        self.secret_reconciliations
            .get_or_create(&Outcome {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    fn machines_enqueued(&self, reason: EnqueueReason, machines: usize) {
        self.enqueued
            .get_or_create(&Reason {
                reason: reason.as_str(),
            })
            .inc_by(machines as u64);
    }

    fn rejected(&self, rejected: &[RejectedBinding]) {
        for reason in BindingRejection::iter() {
            let count = rejected.iter().filter(|r| r.reason == reason).count();
            self.rejected_bindings
                .get_or_create(&Reason {
                    reason: reason.as_str(),
                })
                .set(count as i64);
        }
    }

    fn changed(&self, kind: ResourceKind, change: Change) {
        self.watch_changes
            .get_or_create(&KindChange {
                kind: kind.as_str(),
                change: change.as_str(),
            })
            .inc();
    }

    fn reconciled(&self, outcome: ClassOutcome, requeue: Requeue, duration: Duration) {
        self.reconciliations
            .get_or_create(&Outcome {
                outcome: outcome.as_str(),
            })
            .inc();
        self.reconciliation_duration.observe(duration.as_secs_f64());
        self.requeues
            .get_or_create(&RequeueLabel {
                requeue: requeue.as_str(),
            })
            .inc();
        if let Some(result) = write_result(outcome) {
            self.api_writes.get_or_create(&WriteResult { result }).inc();
        }
    }

    fn exceptions_applied(&self, webhook: WebhookKind, exceptions: &[String]) {
        for exception in exceptions {
            self.exceptions_applied
                .get_or_create(&AppliedException {
                    webhook: webhook.as_str(),
                    exception: exception.clone(),
                })
                .inc();
        }
    }

    fn admitted(
        &self,
        webhook: WebhookKind,
        result: AdmissionResult,
        mode: Mode,
        duration: Duration,
    ) {
        let webhook = webhook.as_str();
        self.admissions
            .get_or_create(&Admission {
                webhook,
                result: result.as_str(),
                mode: mode.as_str(),
            })
            .inc();
        self.admission_duration
            .get_or_create(&Webhook { webhook })
            .observe(duration.as_secs_f64());
    }
}

impl Metrics {
    /// Replaces the violation gauges with the last round's: a violation
    /// that is gone disappears.
    fn audited(&self, pods: usize, duration: Duration, counts: &[AuditCount]) {
        self.audit_rounds.inc();
        self.audit_duration.observe(duration.as_secs_f64());
        self.audit_pods.set(i64::try_from(pods).unwrap_or(i64::MAX));
        self.audit_violations.clear();
        for count in counts {
            let labels = Violation {
                namespace: count.namespace.clone(),
                pool: count.pool.clone(),
                reason: count.reason,
            };
            self.audit_violations
                .get_or_create(&labels)
                .set(i64::try_from(count.pods).unwrap_or(i64::MAX));
        }
    }
}

const WRITE_RESULTS: [&str; 3] = ["ok", "conflict", "error"];

/// What an outcome says about the finalizer patch it sent, if it sent one.
fn write_result(outcome: ClassOutcome) -> Option<&'static str> {
    match outcome {
        ClassOutcome::FinalizerAdded | ClassOutcome::FinalizerRemoved => Some(WRITE_RESULTS[0]),
        ClassOutcome::Conflict => Some(WRITE_RESULTS[1]),
        ClassOutcome::Error => Some(WRITE_RESULTS[2]),
        ClassOutcome::Unchanged | ClassOutcome::Unused | ClassOutcome::Gone => None,
    }
}

/// `index_objects{kind}`, read from the index at scrape time.
struct IndexObjects(ObjectCounts);

impl std::fmt::Debug for IndexObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IndexObjects")
    }
}

impl Collector for IndexObjects {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "objects",
            "Objects held in the index, by kind",
            None,
            MetricType::Gauge,
        )?;
        for (kind, count) in (self.0)() {
            let gauge = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
            gauge.encode(family.encode_family(&Kind::from(kind))?)?;
        }
        Ok(())
    }
}

/// The observer component: subscribes to every event and counts it.
pub struct EventMetrics {
    metrics: Arc<Metrics>,
    subscription: Subscription,
}

impl std::fmt::Debug for EventMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventMetrics").finish_non_exhaustive()
    }
}

impl EventMetrics {
    pub const NAME: &'static str = "metrics";

    /// Registers every metric of the table above in `registry` (the
    /// binary's `poolkeeper`-prefixed one) and subscribes to `bus`; call
    /// before the bus starts.
    pub fn new(bus: &Bus, registry: &mut Registry, objects: ObjectCounts) -> Self {
        let metrics = Arc::new(Metrics::new());
        metrics.register(registry, objects);
        Self {
            metrics,
            subscription: bus.subscribe(METRICS_SUBSCRIBER),
        }
    }

    async fn observe(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        loop {
            let delivery = tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                delivery = self.subscription.next_delivery() => delivery,
            };
            match delivery {
                Delivery::Event(envelope) => self.metrics.observe(&envelope.event),
                // Counted by the bus as this subscriber's lag; the counts
                // here are short by that much.
                Delivery::Lagged(_) => {}
            }
        }
    }
}

impl Component for EventMetrics {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.observe(ctx))
    }
}

#[cfg(test)]
mod tests {
    use poolkeeper_bus::ObjectKey;
    use prometheus_client::encoding::text::encode;

    use super::*;

    fn rendered(metrics: &Arc<Metrics>, objects: ObjectCounts) -> String {
        let mut registry = Registry::with_prefix("poolkeeper");
        metrics.register(&mut registry, objects);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    fn has(text: &str, line: &str) {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }

    #[test]
    fn each_event_is_counted_under_its_name() {
        let metrics = Arc::new(Metrics::new());
        let class = ObjectKey::namespaced("ns", "c");
        for event in [
            Event::ResourceChanged {
                kind: ResourceKind::Machine,
                key: ObjectKey::namespaced("ns", "m"),
                change: Change::Created,
                initial: false,
                related: vec![class.clone()],
            },
            Event::ResourceSynced {
                kind: ResourceKind::Machine,
            },
            Event::IndexSynchronized,
            Event::WatchFailed {
                kind: ResourceKind::Node,
                error: "410".into(),
            },
            Event::ReconciliationTriggered {
                reason: TriggerReason::Debounced,
            },
            Event::ReconciliationStarted { pass: 1, keys: 1 },
            Event::ReconciliationCompleted {
                pass: 1,
                duration: Duration::from_millis(3),
                writes: 1,
                failed: 1,
            },
            Event::MachineClassReconciled {
                key: class.clone(),
                uid: None,
                outcome: ClassOutcome::FinalizerAdded,
                requeue: Requeue::Long,
                requeue_after: Duration::from_secs(600),
                duration: Duration::from_millis(2),
            },
            Event::MachineClassReconciled {
                key: class.clone(),
                uid: None,
                outcome: ClassOutcome::Conflict,
                requeue: Requeue::Conflict,
                requeue_after: Duration::from_millis(200),
                duration: Duration::from_millis(1),
            },
            Event::MachinesEnqueued {
                class: ObjectKey::namespaced("ns", "c"),
                reason: EnqueueReason::FinalizerAdded,
                machines: 1,
            },
            Event::SecretReconciled {
                key: ObjectKey::namespaced("ns", "cloud"),
                uid: None,
                classes: 1,
                named: vec!["c".into()],
                outcome: ClassOutcome::FinalizerAdded,
                requeue: Requeue::Long,
                requeue_after: Duration::from_secs(600),
                duration: Duration::from_millis(1),
            },
            Event::AdmissionDecided {
                webhook: WebhookKind::Mutate,
                result: AdmissionResult::Patched,
                mode: Mode::Warn,
                reason: "placed",
                duration: Duration::from_micros(80),
            },
            Event::BindingsRejected {
                rejected: vec![RejectedBinding {
                    namespace: "shop".into(),
                    uid: "uid-shop".into(),
                    reason: BindingRejection::Conflict,
                    message: "two pools".into(),
                    first_found: true,
                }],
            },
            Event::LeadershipChanged { leader: true },
            Event::CertificateServed {
                leaf_not_after: 1_800_000_000,
                ca_not_after: Some(1_900_000_000),
            },
        ] {
            metrics.observe(&event);
        }
        let objects: ObjectCounts = Arc::new(|| vec![(ResourceKind::Node, 7)]);
        let text = rendered(&metrics, objects);
        for line in [
            r#"poolkeeper_index_objects{kind="Node"} 7"#,
            "poolkeeper_index_synchronized 1",
            r#"poolkeeper_watch_changes_total{kind="Machine",change="created"} 1"#,
            r#"poolkeeper_watch_failures_total{kind="Node"} 1"#,
            r#"poolkeeper_watch_failures_total{kind="Machine"} 0"#,
            r#"poolkeeper_watch_failing{kind="Node"} 1"#,
            r#"poolkeeper_watch_synced{kind="Machine"} 1"#,
            r#"poolkeeper_watch_synced{kind="Node"} 0"#,
            r#"poolkeeper_reconciler_triggers_total{reason="debounced"} 1"#,
            r#"poolkeeper_reconciler_triggers_total{reason="lagged"} 0"#,
            "poolkeeper_executor_passes_total 1",
            "poolkeeper_executor_pass_duration_seconds_count 1",
            "poolkeeper_executor_failed_passes_total 1",
            r#"poolkeeper_executor_reconciliations_total{outcome="finalizer_added"} 1"#,
            r#"poolkeeper_executor_reconciliations_total{outcome="conflict"} 1"#,
            "poolkeeper_executor_reconciliation_duration_seconds_count 2",
            r#"poolkeeper_executor_requeues_total{requeue="long"} 1"#,
            r#"poolkeeper_executor_api_writes_total{result="ok"} 1"#,
            r#"poolkeeper_executor_api_writes_total{result="conflict"} 1"#,
            r#"poolkeeper_executor_api_writes_total{result="error"} 0"#,
            r#"poolkeeper_executor_machines_enqueued_total{reason="finalizer_added"} 1"#,
            r#"poolkeeper_executor_secret_reconciliations_total{outcome="finalizer_added"} 1"#,
            r#"poolkeeper_executor_secret_reconciliations_total{outcome="unused"} 0"#,
            r#"poolkeeper_webhook_admissions_total{webhook="mutate",result="patched",mode="warn"} 1"#,
            r#"poolkeeper_webhook_admissions_total{webhook="validate",result="invalid",mode="enforce"} 0"#,
            r#"poolkeeper_webhook_admission_duration_seconds_count{webhook="mutate"} 1"#,
            r#"poolkeeper_placement_rejected_bindings{reason="conflict"} 1"#,
            r#"poolkeeper_placement_rejected_bindings{reason="invalid"} 0"#,
            "poolkeeper_leader_election_leading 1",
            r#"poolkeeper_certificate_expiry_timestamp_seconds{certificate="leaf"} 1800000000"#,
            r#"poolkeeper_certificate_expiry_timestamp_seconds{certificate="ca"} 1900000000"#,
        ] {
            has(&text, line);
        }
    }

    #[test]
    fn a_failing_watch_is_flagged_until_it_recovers() {
        let metrics = Arc::new(Metrics::new());
        let failed = |kind| Event::WatchFailed {
            kind,
            error: "connection refused".into(),
        };
        // (event, then the `watch_failing` series of Node and Machine)
        let steps = [
            (failed(ResourceKind::Node), [1, 0]),
            (failed(ResourceKind::Machine), [1, 1]),
            (
                Event::WatchRecovered {
                    kind: ResourceKind::Node,
                },
                [0, 1],
            ),
            (
                Event::WatchRecovered {
                    kind: ResourceKind::Machine,
                },
                [0, 0],
            ),
            (failed(ResourceKind::Node), [1, 0]),
        ];
        for (event, [node, machine]) in steps {
            metrics.observe(&event);
            let text = rendered(&metrics, Arc::new(Vec::new));
            has(
                &text,
                &format!(r#"poolkeeper_watch_failing{{kind="Node"}} {node}"#),
            );
            has(
                &text,
                &format!(r#"poolkeeper_watch_failing{{kind="Machine"}} {machine}"#),
            );
            has(&text, r#"poolkeeper_watch_failing{kind="Secret"} 0"#);
        }
        let text = rendered(&metrics, Arc::new(Vec::new));
        has(&text, r#"poolkeeper_watch_failures_total{kind="Node"} 2"#);
    }

    #[test]
    fn audit_gauges_hold_the_last_round_only() {
        let metrics = Arc::new(Metrics::new());
        let count = |namespace: &str, pods| AuditCount {
            namespace: namespace.into(),
            pool: "hangzhou".into(),
            reason: "node_selector_outside_pool",
            pods,
        };
        let round = |counts: Vec<AuditCount>| Event::AuditCompleted {
            pods: 10,
            duration: Duration::from_millis(5),
            counts,
            violations: Vec::new(),
            truncated: false,
            results: Default::default(),
        };
        metrics.observe(&round(vec![count("a", 2), count("b", 1)]));
        metrics.observe(&round(vec![count("a", 1)]));
        let objects: ObjectCounts = Arc::new(Vec::new);
        let text = rendered(&metrics, objects);
        has(
            &text,
            r#"poolkeeper_audit_violations{namespace="a",pool="hangzhou",reason="node_selector_outside_pool"} 1"#,
        );
        assert!(
            !text.contains(r#"namespace="b""#),
            "gone violations disappear:\n{text}"
        );
        has(&text, "poolkeeper_audit_pods 10");
        has(&text, "poolkeeper_audit_rounds_total 2");
    }

    #[test]
    fn outcomes_without_a_write_count_no_write() {
        assert_eq!(write_result(ClassOutcome::Unchanged), None);
        assert_eq!(write_result(ClassOutcome::Unused), None);
        assert_eq!(write_result(ClassOutcome::Gone), None);
        assert_eq!(write_result(ClassOutcome::FinalizerRemoved), Some("ok"));
        assert_eq!(write_result(ClassOutcome::Error), Some("error"));
    }
}
