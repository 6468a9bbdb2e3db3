//! The mutating and validating admission decisions for a Pod.

use std::fmt;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    Toleration,
};
use poolkeeper_index::{Node, NodePool, PlacementView, PoolType};
use serde_json::Value;

use crate::affinity::NodeConstraints;
use crate::candidates::matching_nodes;
use crate::policy::PlacementPolicy;
use crate::tolerations::{describe_toleration, tolerations_cover};

/// How many offending nodes a denial names.
const MAX_NAMED_NODES: usize = 5;

/// Why a decision came out the way it did; a short, stable string for
/// metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The request is not about a Pod (or is about a Pod subresource).
    NotPod,
    /// Only `CREATE` is decided; other operations pass unchanged.
    OperationIgnored,
    /// The index is not synchronized yet.
    NotReady,
    /// The placement policy ConfigMap does not parse.
    PolicyInvalid,
    /// The Pod is bound to no pool.
    Unbound,
    /// The Pod is bound to a pool that does not exist.
    PoolMissing,
    /// Mutate: nothing to add.
    Unchanged,
    /// Mutate: affinity and/or tolerations added.
    Patched,
    /// Validate: every node the Pod may land on is in its pool.
    InPool,
    /// Validate: an Edge pool's tolerations are missing.
    MissingEdgeTolerations,
    /// Validate: the Pod's constraints select no node.
    NoMatchingNode,
    /// Validate: the Pod's constraints select nodes outside its pool.
    OutsidePool,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotPod => "not_pod",
            Reason::OperationIgnored => "operation_ignored",
            Reason::NotReady => "not_ready",
            Reason::PolicyInvalid => "policy_invalid",
            Reason::Unbound => "unbound",
            Reason::PoolMissing => "pool_missing",
            Reason::Unchanged => "unchanged",
            Reason::Patched => "patched",
            Reason::InPool => "in_pool",
            Reason::MissingEdgeTolerations => "missing_edge_tolerations",
            Reason::NoMatchingNode => "no_matching_node",
            Reason::OutsidePool => "outside_pool",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one admission decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    /// Why the Pod was denied (shown to the user by the API server).
    pub message: Option<String>,
    /// Mutate only: the RFC 6902 patch to apply, never an empty one.
    pub patch: Option<Patch>,
    /// Admission warnings returned to the client.
    pub warnings: Vec<String>,
    pub reason: Reason,
    /// The pool the Pod is bound to, when it is.
    pub pool: Option<String>,
}

impl Decision {
    pub fn allow(reason: Reason) -> Self {
        Self {
            allowed: true,
            message: None,
            patch: None,
            warnings: Vec::new(),
            reason,
            pool: None,
        }
    }

    pub fn deny(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            patch: None,
            warnings: Vec::new(),
            reason,
            pool: None,
        }
    }

    #[must_use]
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    #[must_use]
    fn for_pool(mut self, pool: &str) -> Self {
        self.pool = Some(pool.to_owned());
        self
    }

    pub fn is_patched(&self) -> bool {
        self.patch.as_ref().is_some_and(|p| !p.0.is_empty())
    }
}

/// How a Pod got its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BindingSource {
    /// The Pod carries the pool label.
    PodLabel,
    /// The policy binds the Pod's namespace.
    Namespace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolBinding<'a> {
    pub(crate) pool: &'a str,
    pub(crate) source: BindingSource,
}

/// The pool a Pod belongs to: its own `pool_label` label (when not empty),
/// else its namespace's binding in the policy.
///
/// `namespace` comes from the AdmissionRequest: on CREATE the Pod's
/// `metadata.namespace` may still be empty.
pub(crate) fn pool_binding<'a>(
    pod: &'a Pod,
    namespace: &str,
    policy: &'a PlacementPolicy,
    pool_label: &str,
) -> Option<PoolBinding<'a>> {
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(pool_label))
        .filter(|pool| !pool.is_empty());
    if let Some(pool) = labelled {
        return Some(PoolBinding {
            pool,
            source: BindingSource::PodLabel,
        });
    }
    policy
        .pool_for_namespace(namespace)
        .map(|pool| PoolBinding {
            pool,
            source: BindingSource::Namespace,
        })
}

fn describe_binding(binding: &PoolBinding<'_>, namespace: &str, pool_label: &str) -> String {
    match binding.source {
        BindingSource::PodLabel => format!("by its label {pool_label}={}", binding.pool),
        BindingSource::Namespace => format!("through namespace {namespace:?}"),
    }
}

/// The bound, existing pool, or the decision to return instead.
fn bound_pool<'v>(
    pod: &Pod,
    namespace: &str,
    view: &'v PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Result<&'v NodePool, Decision> {
    let pool_label = view.pool_label();
    let Some(binding) = pool_binding(pod, namespace, policy, pool_label) else {
        return Err(Decision::allow(Reason::Unbound));
    };
    view.node_pool(binding.pool).ok_or_else(|| {
        Decision::allow(Reason::PoolMissing)
            .with_warning(format!(
                "node pool {:?} (bound {}) does not exist; the pod is not restricted to a node pool",
                binding.pool,
                describe_binding(&binding, namespace, pool_label)
            ))
            .for_pool(binding.pool)
    })
}

/// The edge tolerations the Pod lacks, in policy order, each checked against
/// the Pod's tolerations plus the ones already found missing.
fn missing_edge_tolerations<'p>(
    pod: &Pod,
    pool: &NodePool,
    policy: &'p PlacementPolicy,
) -> Vec<&'p Toleration> {
    if pool.pool_type != PoolType::Edge {
        return Vec::new();
    }
    let mut have: Vec<Toleration> = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.tolerations.clone())
        .unwrap_or_default();
    let mut missing = Vec::new();
    for required in policy.edge_tolerations() {
        if !tolerations_cover(&have, required) {
            have.push(required.clone());
            missing.push(required);
        }
    }
    missing
}

/// The mutating decision.
///
/// - Unbound Pod -> allowed, unchanged. Missing pool -> allowed, unchanged,
///   with a warning.
/// - `nodeName`, `nodeSelector` and required node affinity all empty -> adds
///   the required node affinity `poolLabel In [pool]` (the index's pool
///   label, [`PlacementView::pool_label`]). Only the required
///   part counts: a Pod with nothing but *preferred* node affinity terms is
///   unconstrained for the scheduler's filtering, so it gets the required
///   affinity too (its preferred terms are kept). podAffinity and
///   podAntiAffinity are never touched.
/// - Edge pool -> adds each edge toleration the Pod does not already
///   tolerate, appending to `spec.tolerations`.
///
/// Applying the returned patch and deciding again adds nothing.
pub fn mutate(
    pod: &Pod,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Decision {
    let pool = match bound_pool(pod, namespace, view, policy) {
        Ok(pool) => pool,
        Err(decision) => return decision,
    };
    let Some(spec) = pod.spec.as_ref() else {
        return Decision::allow(Reason::Unchanged).for_pool(&pool.name);
    };

    let mut ops = Vec::new();
    if NodeConstraints::from_pod(pod).is_unconstrained() {
        ops.push(add_pool_affinity(pod, view.pool_label(), &pool.name));
    }

    let missing = missing_edge_tolerations(pod, pool, policy);
    if !missing.is_empty() {
        match spec.tolerations {
            None => ops.push(add(&["spec", "tolerations"], to_value(&missing))),
            Some(_) => {
                for toleration in missing {
                    ops.push(add(&["spec", "tolerations", "-"], to_value(&toleration)));
                }
            }
        }
    }

    if ops.is_empty() {
        Decision::allow(Reason::Unchanged).for_pool(&pool.name)
    } else {
        let mut decision = Decision::allow(Reason::Patched).for_pool(&pool.name);
        decision.patch = Some(Patch(ops));
        decision
    }
}

fn add(path: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().copied()),
        value,
    })
}

/// The `add` operation that creates the required node affinity at the
/// deepest level missing, leaving sibling fields alone.
fn add_pool_affinity(pod: &Pod, pool_label: &str, pool: &str) -> PatchOperation {
    let selector = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: pool_label.to_owned(),
                operator: "In".to_owned(),
                values: Some(vec![pool.to_owned()]),
            }]),
            match_fields: None,
        }],
    };
    let affinity = pod.spec.as_ref().and_then(|spec| spec.affinity.as_ref());
    let node_affinity = affinity.and_then(|a| a.node_affinity.as_ref());
    let (path, value): (&[&str], Value) = match (affinity, node_affinity) {
        (None, _) => (
            &["spec", "affinity"],
            to_value(&Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(selector),
                    preferred_during_scheduling_ignored_during_execution: None,
                }),
                ..Affinity::default()
            }),
        ),
        (Some(_), None) => (
            &["spec", "affinity", "nodeAffinity"],
            to_value(&NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(selector),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
        ),
        (Some(_), Some(_)) => (
            &[
                "spec",
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
            ],
            to_value(&selector),
        ),
    };
    add(path, value)
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    // Serializing k8s-openapi structs into a Value cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The validating decision.
///
/// - Unbound Pod -> allowed. Missing pool -> allowed with a warning.
/// - Edge pool whose edge tolerations the Pod does not all tolerate -> denied.
/// - The nodes selected by `nodeName`, `nodeSelector` and required node
///   affinity (each absent = every node), intersected over the index:
///   none -> denied; any outside the pool -> denied, naming up to
///   five of them; otherwise allowed.
///
/// Taints are deliberately not used to shrink the node set: they change
/// after admission, and a removed taint must not open a way out of the pool.
pub fn validate(
    pod: &Pod,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Decision {
    let pool = match bound_pool(pod, namespace, view, policy) {
        Ok(pool) => pool,
        Err(decision) => return decision,
    };
    let pool_name = pool.name.as_str();

    let missing = missing_edge_tolerations(pod, pool, policy);
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|t| describe_toleration(t)).collect();
        return Decision::deny(
            Reason::MissingEdgeTolerations,
            format!(
                "pod must tolerate {} to run on edge node pool {pool_name:?}",
                list.join(", ")
            ),
        )
        .for_pool(pool_name);
    }

    let constraints = NodeConstraints::from_pod(pod);
    let matched = matching_nodes(view, &constraints);
    if matched.is_empty() {
        return Decision::deny(
            Reason::NoMatchingNode,
            no_match_message(view, &constraints, pool_name),
        )
        .for_pool(pool_name);
    }

    let pool_label = view.pool_label();
    let outside: Vec<&Node> = matched
        .iter()
        .copied()
        .filter(|node| node.labels.get(pool_label).map(String::as_str) != Some(pool_name))
        .collect();
    if outside.is_empty() {
        return Decision::allow(Reason::InPool).for_pool(pool_name);
    }

    let count = outside.len();
    let names = name_nodes(&outside);
    let message = if constraints.is_unconstrained() {
        format!(
            "pod is bound to node pool {pool_name:?} but has no node constraints, so it may be scheduled onto {} outside the pool: {names}",
            count_nodes(count)
        )
    } else {
        format!(
            "pod is bound to node pool {pool_name:?} but {} outside the pool {} its {}: {names}",
            count_nodes(count),
            if count == 1 { "matches" } else { "match" },
            constraints.describe()
        )
    };
    Decision::deny(Reason::OutsidePool, message).for_pool(pool_name)
}

fn no_match_message(
    view: &PlacementView<'_>,
    constraints: &NodeConstraints<'_>,
    pool: &str,
) -> String {
    let mut message = format!("no node matches the pod's {}", constraints.describe());
    if let Some(affinity) = &constraints.required_affinity {
        if !affinity.errors().is_empty() {
            message.push_str(&format!(
                " (invalid node selector terms match nothing: {})",
                affinity.errors().join("; ")
            ));
        } else if affinity.matches_nothing() {
            message.push_str(
                " (the required node affinity has no node selector term with a requirement)",
            );
        }
    }
    let pool_nodes = view.nodes_in_pool(pool).count();
    if pool_nodes == 0 {
        message.push_str(&format!("; node pool {pool:?} has no nodes"));
    } else {
        message.push_str(&format!(
            "; node pool {pool:?} has {}",
            count_nodes(pool_nodes)
        ));
    }
    message
}

fn count_nodes(n: usize) -> String {
    if n == 1 {
        "1 node".to_owned()
    } else {
        format!("{n} nodes")
    }
}

fn name_nodes(nodes: &[&Node]) -> String {
    let mut names: Vec<&str> = nodes
        .iter()
        .take(MAX_NAMED_NODES)
        .map(|node| node.name.as_str())
        .collect();
    names.sort_unstable();
    let mut text = names.join(", ");
    if nodes.len() > MAX_NAMED_NODES {
        text.push_str(&format!(" and {} more", nodes.len() - MAX_NAMED_NODES));
    }
    text
}
