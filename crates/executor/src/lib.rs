//! The executor: reconciliation passes over MachineClasses.
//!
//! It keeps machine-controller-manager's finalizer on every MachineClass
//! that Machines still reference, removes it once none do, and hands the
//! affected Machines on (`MachineEnqueued`).
//!
//! - [`decide`] is the pure per-class decision; [`finalizer_patch`] turns it
//!   into a guarded JSON patch.
//! - [`Executor`] is the [`poolkeeper_supervisor::Component`]: it collects
//!   dirty keys from `ResourceChanged`, runs a pass per
//!   `ReconciliationTriggered` (triggers during a pass coalesce into one next
//!   pass), reconciles keys with bounded concurrency, and requeues each key
//!   after the period its reconciliation returned.
//! - [`ClassWriter`] is the write side; [`KubeClassWriter`] implements it
//!   against the API server.
//!
//! Metrics: `poolkeeper_executor_passes_total`,
//! `poolkeeper_reconciliations_total`, `poolkeeper_reconciliation_errors_total`,
//! `poolkeeper_reconciliation_duration_seconds`,
//! `poolkeeper_machineclass_outcomes_total{outcome}`,
//! `poolkeeper_requeues_total{reason}`, `poolkeeper_api_writes_total{result}`,
//! `poolkeeper_machines_enqueued_total{reason}`.

mod decision;
mod executor;
mod metrics;
mod patch;
mod settings;
mod writer;

pub use decision::{Decision, FinalizerPatch, after_write_error, decide};
pub use executor::Executor;
pub use metrics::{ExecutorMetrics, ExecutorStats, StatsSnapshot};
pub use patch::finalizer_patch;
pub use settings::{DEFAULT_FINALIZER, ExecutorSettings, Retries, Retry};
pub use writer::{ClassWriter, FIELD_MANAGER, KubeClassWriter, WriteError, classify_status};

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
