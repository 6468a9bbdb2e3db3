//! Keeps the selectors of poolkeeper's two webhook configurations in step
//! with the placement bindings, so that the admission webhooks (with
//! `failurePolicy: Fail`) match only the Pods poolkeeper can place: the
//! Pods of bound namespaces and the Pods carrying the pool label. Every
//! other Pod of the cluster is created normally even while no replica
//! answers.
//!
//! In each configuration (mutating and validating) two entries are managed,
//! by name:
//! - the *bound-namespaces* entry: `namespaceSelector`
//!   `kubernetes.io/metadata.name In [bound namespaces]` (a value no
//!   namespace can have when nothing is bound), `objectSelector` `{}`;
//! - the *pool-labelled* entry: `objectSelector` `poolLabel Exists`,
//!   `namespaceSelector` `kubernetes.io/metadata.name NotIn [bound
//!   namespaces, excluded namespaces]`, so no Pod is decided twice and no
//!   Pod of a namespace poolkeeper never places waits for it. The excluded
//!   namespaces are the placement policy's (`placement.excludedNamespaces`
//!   and poolkeeper's own, the policy ConfigMap's), from its one holder.
//!
//! - `desired_selectors` computes them from the bindings; `selector_patch`
//!   is the guarded JSON patch from a stored configuration to them (`None`
//!   in a steady state). Both are pure.
//! - [`WebhookSelectors`] is the leader-only
//!   [`poolkeeper_supervisor::Component`] `webhook-selectors`: on start, on
//!   every change of the placement ConfigMap, of a Namespace and of either
//!   configuration (a watch by name), it reads both configurations and
//!   patches only the selectors that differ. Failures are logged and
//!   retried with backoff.

mod component;
mod configuration;
mod desired;
mod error;
mod patch;
mod schedule;
mod settings;

pub use component::WebhookSelectors;
pub use settings::{ConfigurationKind, ManagedConfiguration, SelectorSettings};

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
