//! NodePool placement for Pods, as pure logic: no I/O, no async.
//!
//! - [`mutate`] / [`validate`]: the admission [`Decision`]s for a Pod, over a
//!   [`PlacementView`](poolkeeper_index::PlacementView) of the index (which
//!   also says which label puts a Node into a pool) and the
//!   [`PlacementPolicy`] loaded from the ConfigMap a [`PolicySource`] names.
//!   A Pod's pool is its own pool label, else its namespace's binding.
//!   Matching follows Kubernetes exactly: `nodeName`, `nodeSelector` and
//!   required node affinity for the nodes, `Toleration.ToleratesTaint` for
//!   the edge tolerations.
//! - [`build_index_from_objects`]: an index from an objects file, for the
//!   offline `poolkeeper admit`.

mod affinity;
mod candidates;
mod decision;
mod error;
mod names;
mod objects;
mod policy;
mod tolerations;

pub use decision::{Decision, Reason, mutate, validate};
pub use error::PlacementError;
pub use objects::{OfflineObjects, build_index_from_objects};
pub use policy::{PlacementPolicy, PolicySource};

#[cfg(test)]
mod tests;
