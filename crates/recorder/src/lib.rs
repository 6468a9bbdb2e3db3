//! Kubernetes Events (`events.k8s.io/v1`, reporting controller
//! `poolkeeper`) for what poolkeeper does, derived from bus events.
//!
//! - [`notices_for`] / [`class_notice`] / [`audit_notice`] are the pure
//!   mapping: each violation of an `AuditCompleted` found for the first time
//!   calls for a Warning on its Pod or workload; a
//!   `MachineClassReconciled` whose finalizer was added or removed calls for
//!   a Normal Event, one that failed for a Warning; every other outcome
//!   (settled, unused, gone, conflict) for none, so periodic passes write
//!   nothing. A `SecretReconciled` maps the same way onto an Event on the
//!   Secret ([`secret_notice`], naming the classes that reference it).
//! - [`EventRecorder`] is the leader-only
//!   [`poolkeeper_supervisor::Component`] `event-recorder`: it reads the bus,
//!   queues the Events it calls for, and writes them one at a time through
//!   kube's `Recorder`, which aggregates repetitions into the `series` of
//!   one Event object. The bus is never kept waiting by the API server.
//!
//! Every Kubernetes Event poolkeeper writes comes from the bus: no component
//! asks the recorder directly.

mod error;
mod notice;
mod queue;
mod recorder;
mod secret_notice;
mod settings;
mod writer;

pub use recorder::EventRecorder;
pub use secret_notice::secret_reference;
pub use settings::RecorderSettings;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
