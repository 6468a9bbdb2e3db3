//! The executor: reconciliation passes over MachineClasses.
//!
//! It keeps machine-controller-manager's finalizer on every MachineClass
//! that Machines still reference, removes it once none do, and hands the
//! affected Machines on (`MachinesEnqueued`, one event per class and pass).
//! Beside the classes, on the same passes and requeues, it keeps
//! machine-controller-manager's Secret finalizer on every Secret a class
//! references (the pure `decide_secret` and its guarded `secret_patch`).
//!
//! - `decide` is the pure per-class decision; `finalizer_patch` turns it
//!   into a guarded JSON patch (both table-tested here, and measured by
//!   `benches/decision.rs` through [`bench`]).
//! - [`Executor`] is the [`poolkeeper_supervisor::Component`]: it collects
//!   dirty keys from `ResourceChanged`, runs a pass per
//!   `ReconciliationTriggered` (triggers during a pass coalesce into one next
//!   pass), reconciles keys with bounded concurrency, and requeues each key
//!   after the period its reconciliation returned.
//! - [`ClassWriter`] is the write side; [`KubeClassWriter`] implements it
//!   against the API server.
//!
//! Everything it does is reported as bus events (`ReconciliationStarted`,
//! `ReconciliationCompleted`, `MachineClassReconciled`, `MachinesEnqueued`);
//! the metrics are derived from them outside this crate.

mod decision;
mod enqueue;
mod executor;
mod patch;
mod requeues;
mod secret_decision;
mod settings;
mod target;
mod writer;

pub use executor::Executor;

pub use settings::{ExecutorSettings, Retries};
pub use writer::{ClassWriter, KubeClassWriter, WriteError};

/// Not part of the API: the pure class decision and its patch, for
/// `benches/decision.rs`.
#[doc(hidden)]
pub mod bench {
    pub use crate::decision::{ClassDecision, FinalizerPatch, decide};
    pub use crate::patch::finalizer_patch;
}

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
