//! The CEL placement engine (`placement.engine: cel`): the placement policy
//! compiled into flat data that a MutatingAdmissionPolicy and
//! ValidatingAdmissionPolicies read inside the API server, so that the Pods
//! whose placement needs no live Node labels are placed and checked while no
//! replica of poolkeeper answers.
//!
//! - [`compile`]: the loaded policy and the NodePools → flat string data
//!   (pure).
//! - [`Placement::objects`]: the policies embedded in the binary
//!   (`policies/`), the compiled data as their first variable, and their
//!   bindings (pure).
//! - [`EngineResolver`]: the component `placement-engine`, the one owner of
//!   the engine this process runs (`placement.engine`, `auto` resolved from
//!   discovery), shared through [`EngineState`].
//! - [`CelPolicies`]: the leader-only component `cel-policies` that writes
//!   the objects (engine `cel`) or removes them (engine `webhook`), and
//!   reports the evaluation errors the API server counts for them
//!   (`evaluations`, a pure reading of its `/metrics`).

mod component;
mod engine;
mod evaluations;
mod params;
mod policies;

pub use component::{CelPolicies, CelSettings};
pub use engine::{EngineResolver, EngineState, serves_mutating_admission_policies};

pub use params::{BINDING_PREFIX, PREVIOUS_PREFIX, compile, previous_bindings};
pub use policies::{
    EmbeddedPolicyError, MANAGED_BY, MUTATING_POLICY, Objects, Placement, PolicyTexts,
    WARNINGS_POLICY, validating_policy_name, validation_actions,
};

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
