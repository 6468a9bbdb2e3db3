use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use poolkeeper_bus::{ClassOutcome, EnqueueReason};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::settings::Retry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    result: &'static str,
}

/// How an API write ended, as the `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteResult {
    Success,
    Conflict,
    NotFound,
    Error,
}

impl WriteResult {
    const ALL: [WriteResult; 4] = [
        WriteResult::Success,
        WriteResult::Conflict,
        WriteResult::NotFound,
        WriteResult::Error,
    ];

    fn as_str(self) -> &'static str {
        match self {
            WriteResult::Success => "success",
            WriteResult::Conflict => "conflict",
            WriteResult::NotFound => "not_found",
            WriteResult::Error => "error",
        }
    }
}

/// The executor's Prometheus metrics.
#[derive(Clone)]
pub(crate) struct Metrics {
    passes: Counter,
    reconciliations: Counter,
    errors: Counter,
    duration: Histogram,
    outcomes: Family<OutcomeLabels, Counter>,
    requeues: Family<ReasonLabels, Counter>,
    writes: Family<ResultLabels, Counter>,
    enqueued: Family<ReasonLabels, Counter>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let metrics = Self {
            passes: Counter::default(),
            reconciliations: Counter::default(),
            errors: Counter::default(),
            // 1 ms .. ~16 s
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            outcomes: Family::default(),
            requeues: Family::default(),
            writes: Family::default(),
            enqueued: Family::default(),
        };
        // Every label value shows up from the start, at zero.
        for outcome in [
            ClassOutcome::FinalizerAdded,
            ClassOutcome::FinalizerRemoved,
            ClassOutcome::Unchanged,
            ClassOutcome::Unused,
            ClassOutcome::Gone,
            ClassOutcome::Conflict,
            ClassOutcome::Error,
        ] {
            let _ = metrics.outcomes.get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            });
        }
        for retry in [Retry::Short, Retry::Long, Retry::Conflict] {
            let _ = metrics.requeues.get_or_create(&ReasonLabels {
                reason: retry.as_str(),
            });
        }
        for result in WriteResult::ALL {
            let _ = metrics.writes.get_or_create(&ResultLabels {
                result: result.as_str(),
            });
        }
        for reason in [
            EnqueueReason::FinalizerAdded,
            EnqueueReason::ClassSpecChanged,
            EnqueueReason::ClassDeleting,
        ] {
            let _ = metrics.enqueued.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        metrics
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "poolkeeper_executor_passes",
            "Reconciliation passes run by the executor",
            self.passes.clone(),
        );
        registry.register(
            "poolkeeper_reconciliations",
            "MachineClass reconciliations",
            self.reconciliations.clone(),
        );
        registry.register(
            "poolkeeper_reconciliation_errors",
            "MachineClass reconciliations that failed on an API error",
            self.errors.clone(),
        );
        registry.register(
            "poolkeeper_reconciliation_duration_seconds",
            "Duration of one MachineClass reconciliation",
            self.duration.clone(),
        );
        registry.register(
            "poolkeeper_machineclass_outcomes",
            "MachineClass reconciliations by outcome",
            self.outcomes.clone(),
        );
        registry.register(
            "poolkeeper_requeues",
            "MachineClass requeues by retry period",
            self.requeues.clone(),
        );
        registry.register(
            "poolkeeper_api_writes",
            "Finalizer patches sent to the API server, by result",
            self.writes.clone(),
        );
        registry.register(
            "poolkeeper_machines_enqueued",
            "Machines handed on for reconciliation, by reason",
            self.enqueued.clone(),
        );
    }

    pub(crate) fn pass(&self) {
        self.passes.inc();
    }

    pub(crate) fn reconciled(&self, outcome: ClassOutcome, seconds: f64) {
        self.reconciliations.inc();
        if outcome == ClassOutcome::Error {
            self.errors.inc();
        }
        self.duration.observe(seconds);
        self.outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub(crate) fn requeued(&self, retry: Retry) {
        self.requeues
            .get_or_create(&ReasonLabels {
                reason: retry.as_str(),
            })
            .inc();
    }

    pub(crate) fn wrote(&self, result: WriteResult) {
        self.writes
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }

    pub(crate) fn enqueued(&self, reason: EnqueueReason, machines: u64) {
        self.enqueued
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc_by(machines);
    }
}

/// The executor's metrics and running totals. Clones share their values,
/// so successive executors (one per leadership term) count into one
/// registration.
#[derive(Clone)]
pub struct ExecutorMetrics {
    pub(crate) metrics: Metrics,
    pub(crate) stats: ExecutorStats,
}

impl Default for ExecutorMetrics {
    fn default() -> Self {
        Self {
            metrics: Metrics::new(),
            stats: ExecutorStats::default(),
        }
    }
}

impl ExecutorMetrics {
    /// Registers the metrics listed in the crate documentation.
    pub fn register(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    pub fn stats(&self) -> ExecutorStats {
        self.stats.clone()
    }
}

/// Running totals of the executor, readable while it runs.
#[derive(Clone, Debug, Default)]
pub struct ExecutorStats {
    inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    passes: AtomicU64,
    reconciliations: AtomicU64,
    writes: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    machines_enqueued: AtomicU64,
}

/// A copy of [`ExecutorStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Passes started.
    pub passes: u64,
    /// Keys reconciled.
    pub reconciliations: u64,
    /// Patches the API server accepted.
    pub writes: u64,
    /// Patches rejected as conflicts.
    pub conflicts: u64,
    /// Patches that failed otherwise.
    pub errors: u64,
    pub machines_enqueued: u64,
}

impl ExecutorStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let i = &self.inner;
        StatsSnapshot {
            passes: i.passes.load(Ordering::Relaxed),
            reconciliations: i.reconciliations.load(Ordering::Relaxed),
            writes: i.writes.load(Ordering::Relaxed),
            conflicts: i.conflicts.load(Ordering::Relaxed),
            errors: i.errors.load(Ordering::Relaxed),
            machines_enqueued: i.machines_enqueued.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn pass(&self) {
        self.inner.passes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn reconciled(&self) {
        self.inner.reconciliations.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn wrote(&self, result: WriteResult) {
        let counter = match result {
            WriteResult::Success => &self.inner.writes,
            WriteResult::Conflict => &self.inner.conflicts,
            WriteResult::NotFound | WriteResult::Error => &self.inner.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn enqueued(&self, machines: u64) {
        self.inner
            .machines_enqueued
            .fetch_add(machines, Ordering::Relaxed);
    }
}
