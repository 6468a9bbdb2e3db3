//! NodePool placement for Pods, as pure logic: no I/O, no async.
//!
//! - [`pool_binding`]: which pool a Pod belongs to (its pool label, else its
//!   namespace's binding in the [`PlacementPolicy`]).
//! - [`mutate`] / [`validate`]: the admission [`Decision`]s, over a
//!   [`PlacementView`](poolkeeper_index::PlacementView) of the index.
//! - Kubernetes-exact matching: [`NodeConstraints`] and
//!   [`RequiredNodeAffinity`] (nodeName, nodeSelector, required node
//!   affinity), [`tolerates`] and [`tolerations_cover`] (tolerations against
//!   taints).
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

pub use affinity::{
    NODE_NAME_FIELD, NodeConstraints, REQUIRED_AFFINITY_PATH, RequiredNodeAffinity,
    node_selector_map_matches, node_selector_matches, required_node_selector,
};
pub use candidates::{matching_nodes, matching_nodes_by_scan};
pub use decision::{
    BindingSource, Decision, MAX_NAMED_NODES, PoolBinding, Reason, mutate, pool_binding, validate,
};
pub use error::PlacementError;
pub use objects::{
    NODE_POOL_GROUP, OfflineObjects, build_index_from_objects, node_pool_projection,
};
pub use policy::{
    DEFAULT_POLICY_KEY, DEFAULT_POLICY_NAME, DEFAULT_POLICY_NAMESPACE, DEFAULT_POOL_LABEL,
    PlacementPolicy, PlacementSettings, PolicySource,
};
pub use tolerations::{
    TAINT_EFFECTS, describe_toleration, tolerates, toleration_tolerates_taint, tolerations_cover,
};

#[cfg(test)]
mod tests;
