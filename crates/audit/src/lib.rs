//! The audit of Pods that already exist: which of them run, or may land,
//! outside their NodePool.
//!
//! - [`Audit`]: the leader-only [`poolkeeper_supervisor::Component`]
//!   `audit`. Every `audit.interval` it runs a round ([`audit_round`]):
//!   a paginated LIST of the Pods of each bound namespace (less those on
//!   the Nodes of its pools, which cannot be violations, and those with the
//!   pool label) and of the Pods carrying the pool label ([`KubePods`]),
//!   each projected
//!   ([`poolkeeper_placement::PodPlacement`]) and judged at once against
//!   the index by [`poolkeeper_placement::audit`]; nothing is kept between
//!   rounds and nothing is watched. At most `audit.concurrency` LISTs are
//!   in flight, each one's pages read in turn, the result in LIST order. It publishes
//!   [`poolkeeper_bus::Event::AuditCompleted`] and queues one Warning Event
//!   per violating Pod and reason, the first time it is found.
//! - [`cluster_index`], [`cluster_pod`]: the placement state of a cluster
//!   (and one Pod) read once, for
//!   `poolkeeper audit` and `poolkeeper explain`.

mod component;
mod error;
mod lister;
mod page;
mod round;
mod settings;
mod snapshot;

pub use component::Audit;
pub use error::AuditError;
pub use lister::KubePods;
pub use round::{ReportKey, Round, audit_round};
pub use settings::AuditSettings;
pub use snapshot::{cluster_index, cluster_pod};

/// Not part of the API: the lister seam a round reads Pods through and the
/// decoding of a LIST's pages, for the round bench (`benches/round.rs`), the
/// fuzz targets and the end-to-end test of [`KubePods`] against an API server.
#[doc(hidden)]
pub mod testing {
    pub use crate::lister::{PageStart, PodLister, PodQuery, RUNNING_OR_PENDING, WorkloadPage};
    pub use crate::page::{PodPage, decode_page, join_chunks, protobuf};
}

#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
