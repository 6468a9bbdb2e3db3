//! "Where may this Pod land, and why not there?": the facts behind both
//! admission decisions for one Pod, computed with the functions the
//! decisions use, plus the decisions themselves.

use json_patch::Patch;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use poolkeeper_config::Mode;
use poolkeeper_index::{Node, NodePool, PlacementView, PoolType};
use serde::Serialize;

use crate::affinity::{
    NodeConstraints, REQUIRED_AFFINITY_PATH, node_selector_map_matches, parse_term,
};
use crate::candidates::{in_pools, matching_nodes};
use crate::decision::{
    BindingSource, Decision, PoolBinding, missing_edge_tolerations, mutate, pool_binding, validate,
};
use crate::exceptions::selecting_exceptions;
use crate::pod::PodPlacement;
use crate::policy::PlacementPolicy;
use crate::tolerations::describe_toleration;

/// How many node names a node set lists.
pub const EXPLAIN_NAMES: usize = 5;

/// Everything `poolkeeper explain` reports about one Pod.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `namespace/name` (`namespace/generateName*` for an unnamed Pod).
    pub pod: String,
    pub namespace: String,
    /// The pool the Pod is bound to and by what; `None` when unbound.
    pub binding: Option<BindingReport>,
    /// Nodes in the cluster (as the index holds them).
    pub nodes: usize,
    /// The node set of each constraint: `nodeName`, `nodeSelector`, each
    /// required node affinity term. Empty when the Pod has none.
    pub node_sets: Vec<NodeSet>,
    /// The nodes every constraint selects (every node without constraints).
    pub intersection: NodeSet,
    /// The nodes of the intersection outside the pool; `None` when the Pod
    /// is not bound to an existing pool.
    pub outside_pool: Option<NodeSet>,
    /// The edge tolerations the Pod lacks for its (Edge) pool.
    pub missing_tolerations: Vec<String>,
    /// The mutating webhook's answer (mode applied).
    pub mutate: Verdict,
    /// The validating webhook's answer (mode applied).
    pub validate: Verdict,
}

/// The Pod's binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingReport {
    /// The pool, or the pools joined by commas.
    pub pool: String,
    pub source: BindingSource,
    /// The label that bound it (`source: podLabel`) or the namespace
    /// whose binding did (`source: namespace`, `namespaceLabel`).
    pub by: String,
    pub mode: Mode,
    /// Some bound pool exists.
    pub pool_exists: bool,
    /// `Edge` when an existing bound pool is an Edge pool, else `Cloud`;
    /// absent when none exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_type: Option<&'static str>,
    /// Bound pools that do not exist.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_pools: Vec<String>,
    /// The pools of the namespace's binding, joined by commas, when the
    /// Pod's label narrows it to one of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub narrows: Option<String>,
    /// The Pod's pool label (`label=pool`) when it names a pool outside
    /// its namespace's binding: refused, the binding applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_label: Option<String>,
    /// Nodes carrying the pool label with a bound pool's name.
    pub pool_nodes: usize,
    /// The PlacementExceptions that apply, as `name: what it allows
    /// (reason)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<String>,
    /// The PlacementExceptions that select the Pod but take no effect,
    /// because the namespace's binding does not allow exceptions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored_exceptions: Vec<String>,
}

/// The nodes one constraint (or their intersection) selects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSet {
    /// What selects them, e.g. `nodeSelector zone=a` or `required node
    /// affinity term 0: zone In (a)`.
    pub constraint: String,
    pub count: usize,
    /// The first [`EXPLAIN_NAMES`] of them, by name.
    pub names: Vec<String>,
    /// Why the constraint selects nothing, when it is invalid or empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl NodeSet {
    fn of(constraint: impl Into<String>, nodes: &[&Node]) -> Self {
        Self {
            constraint: constraint.into(),
            count: nodes.len(),
            names: nodes
                .iter()
                .take(EXPLAIN_NAMES)
                .map(|node| node.name.to_string())
                .collect(),
            problems: Vec::new(),
        }
    }
}

/// One webhook's answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub allowed: bool,
    /// The rules' reason (`outside_pool`, `patched`, ...).
    pub reason: &'static str,
    pub mode: Mode,
    /// The denial message, when denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<Patch>,
    /// What `enforce` would have answered instead (warn, dryrun).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld_denial: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld_patch: Option<Patch>,
}

impl From<Decision> for Verdict {
    fn from(decision: Decision) -> Self {
        Self {
            allowed: decision.allowed,
            reason: decision.reason.as_str(),
            mode: decision.mode,
            message: decision.message,
            warnings: decision.warnings,
            patch: decision.patch,
            withheld_denial: decision.withheld_denial,
            withheld_patch: decision.withheld_patch,
        }
    }
}

/// Explains `pod` in `namespace` (the Pod's own when it names one) over
/// `view` and `policy`: its binding, the node set of each constraint and
/// their intersection (by the matching code of [`validate`]), the nodes of
/// it outside the pool, the edge tolerations it lacks, and what [`mutate`]
/// and [`validate`] answer.
pub fn explain(
    pod: &PodPlacement,
    namespace: &str,
    view: &PlacementView<'_>,
    policy: &PlacementPolicy,
) -> Explanation {
    let pool_label = view.pool_label();
    let binding = pool_binding(pod, namespace, policy, view);
    let pools: Vec<&NodePool> = binding
        .iter()
        .flat_map(|binding| binding.pools.names())
        .filter_map(|name| view.node_pool(name))
        .collect();
    let constraints = NodeConstraints::from_pod(pod);
    let matched = matching_nodes(view, &constraints);
    let intersection = if constraints.is_unconstrained() {
        NodeSet::of("no node constraints: every node", &matched)
    } else {
        NodeSet::of(
            format!("intersection of {}", constraints.describe()),
            &matched,
        )
    };
    let outside_pool = binding
        .as_ref()
        .filter(|_| !pools.is_empty())
        .map(|binding| {
            let outside: Vec<&Node> = matched
                .iter()
                .copied()
                .filter(|node| !in_pools(node, pool_label, &binding.pools))
                .collect();
            NodeSet::of(format!("outside {}", binding.pools), &outside)
        });
    let missing_tolerations = missing_edge_tolerations(pod, &pools, policy)
        .into_iter()
        .map(describe_toleration)
        .collect();
    Explanation {
        pod: pod.display_name(namespace),
        namespace: namespace.to_owned(),
        binding: binding.as_ref().map(|binding| {
            let (exceptions, ignored_exceptions) = exception_reports(pod, namespace, binding, view);
            BindingReport {
                exceptions,
                ignored_exceptions,
                ..binding_report(binding, &pools, view, namespace)
            }
        }),
        nodes: view.node_count(),
        node_sets: node_sets(pod, view),
        intersection,
        outside_pool,
        missing_tolerations,
        mutate: mutate(pod, namespace, view, policy).into(),
        validate: validate(pod, namespace, view, policy).into(),
    }
}

/// What bound the Pod, to which pools, and how many of them exist.
fn binding_report(
    binding: &PoolBinding<'_>,
    existing: &[&NodePool],
    view: &PlacementView<'_>,
    namespace: &str,
) -> BindingReport {
    let pool_type = (!existing.is_empty()).then(|| {
        let edge = existing.iter().any(|pool| pool.pool_type == PoolType::Edge);
        if edge {
            PoolType::Edge
        } else {
            PoolType::Cloud
        }
        .as_str()
    });
    let names = binding.pools.names();
    BindingReport {
        pool: binding.pools.joined(),
        source: binding.source,
        by: match binding.source {
            BindingSource::PodLabel => format!("{}={}", view.pool_label(), binding.pools.joined()),
            BindingSource::Namespace | BindingSource::NamespaceLabel => namespace.to_owned(),
        },
        mode: binding.mode,
        pool_exists: !existing.is_empty(),
        pool_type,
        missing_pools: names
            .iter()
            .filter(|name| view.node_pool(name).is_none())
            .cloned()
            .collect(),
        pool_nodes: names
            .iter()
            .map(|name| view.nodes_in_pool(name).count())
            .sum(),
        narrows: binding
            .namespace_binding
            .filter(|_| binding.source == BindingSource::PodLabel)
            .map(|namespace_binding| namespace_binding.pools.joined()),
        refused_label: binding
            .label_outside
            .map(|label| format!("{}={label}", view.pool_label())),
        exceptions: Vec::new(),
        ignored_exceptions: Vec::new(),
    }
}

/// `name: what it allows (reason)` of each exception selecting `pod`,
/// split into those that apply and those the binding ignores.
fn exception_reports(
    pod: &PodPlacement,
    namespace: &str,
    binding: &PoolBinding<'_>,
    view: &PlacementView<'_>,
) -> (Vec<String>, Vec<String>) {
    let found = selecting_exceptions(&pod.labels, namespace, binding.namespace_binding, view);
    let described: Vec<String> = found
        .selecting
        .iter()
        .map(|exception| {
            let mut allows = Vec::new();
            if exception.skip_mutation {
                allows.push("skips the mutation".to_owned());
            }
            if exception.skip_validation {
                allows.push("skips the validation".to_owned());
            }
            if !exception.pools.is_empty() {
                allows.push(format!("adds pools {}", exception.pools.join(",")));
            }
            format!(
                "{}: {} ({})",
                exception.name,
                allows.join(", "),
                exception.reason
            )
        })
        .collect();
    if found.allowed {
        (described, Vec::new())
    } else {
        (Vec::new(), described)
    }
}

/// The node set of each constraint the Pod has, one by one.
fn node_sets(pod: &PodPlacement, view: &PlacementView<'_>) -> Vec<NodeSet> {
    let mut sets = Vec::new();
    if let Some(name) = pod.node_name() {
        let nodes: Vec<&Node> = view.node(name).into_iter().collect();
        sets.push(NodeSet::of(format!("nodeName {name:?}"), &nodes));
    }
    let selector = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_selector.as_ref())
        .filter(|selector| !selector.is_empty());
    if let Some(selector) = selector {
        let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let nodes: Vec<&Node> = view
            .nodes()
            .filter(|node| node_selector_map_matches(selector, node))
            .collect();
        sets.push(NodeSet::of(
            format!("nodeSelector {}", pairs.join(",")),
            &nodes,
        ));
    }
    if let Some(required) = pod.required_node_affinity() {
        if required.node_selector_terms.is_empty() {
            let mut set = NodeSet::of("required node affinity", &[]);
            set.problems
                .push("no node selector terms: matches nothing".to_owned());
            sets.push(set);
        }
        for (i, term) in required.node_selector_terms.iter().enumerate() {
            sets.push(term_set(i, term, view));
        }
    }
    sets
}

fn term_set(i: usize, term: &NodeSelectorTerm, view: &PlacementView<'_>) -> NodeSet {
    let constraint = format!("required node affinity term {i}: {}", describe_term(term));
    let path = format!("{REQUIRED_AFFINITY_PATH}.nodeSelectorTerms[{i}]");
    match parse_term(term, &path) {
        Ok(Some(parsed)) => {
            let nodes: Vec<&Node> = view.nodes().filter(|node| parsed.matches(node)).collect();
            NodeSet::of(constraint, &nodes)
        }
        Ok(None) => {
            let mut set = NodeSet::of(constraint, &[]);
            set.problems
                .push("a term without requirements matches nothing".to_owned());
            set
        }
        Err(problems) => NodeSet {
            problems,
            ..NodeSet::of(constraint, &[])
        },
    }
}

/// `zone In (a, b), metadata.name NotIn (n1)`; `(empty)` for no requirement.
fn describe_term(term: &NodeSelectorTerm) -> String {
    let describe = |requirement: &NodeSelectorRequirement| {
        let values = requirement.values.as_deref().unwrap_or_default();
        if values.is_empty() {
            format!("{} {}", requirement.key, requirement.operator)
        } else {
            format!(
                "{} {} ({})",
                requirement.key,
                requirement.operator,
                values.join(", ")
            )
        }
    };
    let parts: Vec<String> = term
        .match_expressions
        .iter()
        .chain(term.match_fields.iter())
        .flatten()
        .map(describe)
        .collect();
    if parts.is_empty() {
        "(empty)".to_owned()
    } else {
        parts.join(", ")
    }
}
