//! The CEL placement engine (`placement.engine: cel`): the placement policy
//! compiled into params that a MutatingAdmissionPolicy and
//! ValidatingAdmissionPolicies read inside the API server, so that the Pods
//! whose placement needs no live Node labels are placed and checked while no
//! replica of poolkeeper answers.
//!
//! - [`compile`]: the loaded policy and the NodePools → the params
//!   ConfigMap's `data` (pure).
//! - [`Placement::objects`]: the params ConfigMap, the policies embedded in
//!   the binary (`policies/`) and their bindings (pure).

mod params;
mod policies;

pub use params::{BINDING_PREFIX, compile};
pub use policies::{
    EmbeddedPolicyError, MANAGED_BY, MUTATING_POLICY, Objects, PARAMS_NAME, Placement,
    WARNINGS_POLICY, validating_policy_name, validation_actions,
};
