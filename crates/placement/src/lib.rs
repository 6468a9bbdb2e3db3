//! NodePool placement for Pods, as pure logic: no I/O, no async.
//!
//! - [`mutate`] / [`validate`]: the admission [`Decision`]s for a Pod, over a
//!   [`PlacementView`](poolkeeper_index::PlacementView) of the index (which
//!   also says which label puts a Node into a pool) and the
//!   [`PlacementPolicy`] loaded from the ConfigMap a [`PolicySource`] names.
//!   A Pod's pool is its namespace's binding, which its own pool label may
//!   only narrow (a label naming a pool outside the binding is refused);
//!   in a namespace without binding, its pool label.
//!   Matching follows Kubernetes exactly: `nodeName`, `nodeSelector` and
//!   required node affinity for the nodes, `Toleration.ToleratesTaint` for
//!   the edge tolerations.
//!   A binding's [`Mode`] (`enforce`, `warn`, `dryrun`) decides what a
//!   decision does; the rules are the same in every mode.
//! - [`audit`]: whether a Pod that already exists runs (or may land)
//!   outside its pool.
//! - [`explain`]: the facts behind both decisions for one Pod (binding,
//!   node set of each constraint, intersection, nodes outside the pool,
//!   missing tolerations) and the decisions themselves.
//! - [`validate_workload`] / [`mutate_workload`]: the Pod template of a
//!   Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob or
//!   ReplicationController ([`Workload`]) decided as the Pods it becomes; a
//!   DaemonSet's template is narrowed into its pool.
//! - [`PodPlacement`]: the Pod fields all of these read, deserialized
//!   straight from a Pod's JSON or built from a `k8s_openapi` Pod.
//! - [`build_index_from_objects`]: an index from an objects file, for the
//!   offline `poolkeeper admit`.

mod affinity;
mod cache;
mod candidates;
mod decision;
mod error;
mod exceptions;
mod explain;
mod messages;
mod names;
mod objects;
mod patch;
mod pod;
mod policy;
mod pools;
mod tolerations;
mod workload;

pub use cache::{LoadedPolicy, PolicyCache, ReportedRejections};
pub use decision::{BindingSource, Decision, PoolBinding, Reason, audit, mutate, validate};
pub use error::PlacementError;
pub use exceptions::{
    AppliedExceptions, SelectingExceptions, applied_exceptions, selecting_exceptions,
};
pub use explain::{BindingReport, Explanation, NodeSet, Verdict, explain};
pub use messages::count_nodes;
pub use objects::{OfflineObjects, build_index_from_objects};
pub use pod::{Annotations, PlacementAffinity, PlacementNodeAffinity, PlacementSpec, PodPlacement};
pub use policy::{Binding, BindingOrigin, Exceptions, PlacementPolicy, PolicySource};
pub use poolkeeper_config::{Constraints, Mode};
pub use pools::PoolSet;
pub use workload::{
    Manifest, Workload, WorkloadKind, explain_manifest, mutate_workload, validate_workload,
};

#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
