//! Kubernetes Events (`events.k8s.io/v1`, reporting controller
//! `poolkeeper`) for what poolkeeper does, derived from bus events.
//!
//! - [`notice_for`] / [`class_notice`] are the pure mapping: a
//!   `MachineClassReconciled` whose finalizer was added or removed calls for
//!   a Normal Event, one that failed for a Warning; every other outcome
//!   (settled, unused, gone, conflict) for none, so periodic passes write
//!   nothing.
//! - [`EventRecorder`] is the leader-only
//!   [`poolkeeper_supervisor::Component`] `event-recorder`: it reads the bus,
//!   queues the Events it calls for, and writes them one at a time through
//!   kube's `Recorder`, which aggregates repetitions into the `series` of
//!   one Event object. The bus is never kept waiting by the API server.
//! - [`EventSink`] lets other components ask for Events on any object (e.g.
//!   Pods the audit finds outside their pool).

mod error;
mod notice;
mod queue;
mod recorder;
mod settings;
mod writer;

pub use kube::runtime::events::EventType;
pub use notice::{MAX_NOTE_BYTES, Notice, class_notice, class_reference, notice_for};
pub use recorder::{EventRecorder, EventSink, REPORTING_CONTROLLER};
pub use settings::RecorderSettings;
