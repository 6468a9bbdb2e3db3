//! The texts of decisions: denials, warnings and how a binding is
//! described, built from what the rules found.

use k8s_openapi::api::core::v1::Toleration;
use poolkeeper_index::{Node, NodePool, PlacementView, PoolType};

use crate::affinity::NodeConstraints;
use crate::decision::{BindingSource, PoolBinding};
use crate::pools::PoolSet;
use crate::tolerations::describe_toleration;

/// How many offending nodes a denial names.
const MAX_NAMED_NODES: usize = 5;

pub(crate) fn describe_binding(
    binding: &PoolBinding<'_>,
    namespace: &str,
    pool_label: &str,
) -> String {
    match binding.source {
        BindingSource::PodLabel => {
            format!("by its label {pool_label}={}", binding.pools.joined())
        }
        BindingSource::Namespace => format!("through namespace {namespace:?}"),
        BindingSource::NamespaceLabel => format!("through the labels of namespace {namespace:?}"),
    }
}

/// Names the Edge pools among `pools`.
pub(crate) fn missing_tolerations_message(missing: &[&Toleration], pools: &[&NodePool]) -> String {
    let list: Vec<String> = missing.iter().map(|t| describe_toleration(t)).collect();
    let edge = PoolSet::new(
        pools
            .iter()
            .filter(|pool| pool.pool_type == PoolType::Edge)
            .map(|pool| pool.name.clone()),
    );
    let edge = edge.map_or_else(String::new, |edge| edge.to_string());
    format!(
        "pod must tolerate {} to run on edge {edge}",
        list.join(", ")
    )
}

pub(crate) fn outside_message(
    outside: &[&Node],
    constraints: &NodeConstraints<'_>,
    pools: &PoolSet,
) -> String {
    let count = outside.len();
    let names = name_nodes(outside);
    let the_pools = if pools.len() == 1 {
        "the pool"
    } else {
        "the pools"
    };
    if constraints.is_unconstrained() {
        format!(
            "pod is bound to {pools} but has no node constraints, so it may be scheduled onto {} outside {the_pools}: {names}",
            count_nodes(count)
        )
    } else {
        format!(
            "pod is bound to {pools} but {} outside {the_pools} {} its {}: {names}",
            count_nodes(count),
            if count == 1 { "matches" } else { "match" },
            constraints.describe()
        )
    }
}

pub(crate) fn runs_outside_message(node: &Node, pool_label: &str, pools: &PoolSet) -> String {
    let node_pool = match node.labels.get(pool_label) {
        Some(other) => format!("in node pool {other:?}"),
        None => "in no node pool".to_owned(),
    };
    format!(
        "pod is bound to {pools} but runs on node {:?}, which is {node_pool}",
        node.name
    )
}

pub(crate) fn no_match_message(
    view: &PlacementView<'_>,
    constraints: &NodeConstraints<'_>,
    pools: &PoolSet,
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
    let pool_nodes: usize = pools
        .names()
        .iter()
        .map(|pool| view.nodes_in_pool(pool).count())
        .sum();
    let has = if pools.len() == 1 { "has" } else { "have" };
    if pool_nodes == 0 {
        message.push_str(&format!("; {pools} {has} no nodes"));
    } else {
        message.push_str(&format!("; {pools} {has} {}", count_nodes(pool_nodes)));
    }
    message
}

pub fn count_nodes(n: usize) -> String {
    if n == 1 {
        "1 node".to_owned()
    } else {
        format!("{n} nodes")
    }
}

pub(crate) fn name_nodes(nodes: &[&Node]) -> String {
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

/// The admission warning for a Pod whose bound pools none exists.
pub(crate) fn pools_missing_warning(
    binding: &PoolBinding<'_>,
    namespace: &str,
    pool_label: &str,
) -> String {
    format!(
        "{} (bound {}) {} not exist; the pod is not restricted to a node pool",
        binding.pools,
        describe_binding(binding, namespace, pool_label),
        if binding.pools.len() == 1 {
            "does"
        } else {
            "do"
        }
    )
}

/// The admission warning for the `missing` pools of a binding of which
/// other pools exist.
pub(crate) fn some_pools_missing_warning(
    missing: &PoolSet,
    binding: &PoolBinding<'_>,
    namespace: &str,
    pool_label: &str,
) -> String {
    format!(
        "{missing} (bound {}) {} not exist; nodes labelled with {} still count",
        describe_binding(binding, namespace, pool_label),
        if missing.len() == 1 { "does" } else { "do" },
        if missing.len() == 1 { "it" } else { "them" }
    )
}

/// The refusal of a Pod whose pool label names `label`, a pool outside its
/// namespace's binding: both are named.
pub(crate) fn label_outside_message(
    label: &str,
    binding: &PoolBinding<'_>,
    namespace: &str,
    pool_label: &str,
) -> String {
    let by_labels = match binding.source {
        BindingSource::NamespaceLabel => " by its labels",
        BindingSource::PodLabel | BindingSource::Namespace => "",
    };
    format!(
        "pod's label {pool_label}={label} names node pool {label:?}, but namespace {namespace:?} \
         is bound{by_labels} to {}: a pod's pool label may only name pools of its namespace's binding",
        binding.pools
    )
}

/// What a denial adds when PlacementExceptions select the Pod but its
/// namespace's binding does not let them apply.
pub(crate) fn ignored_exceptions_note(names: &[&str], namespace: &str) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("{name:?}")).collect();
    let (noun, verb) = if names.len() == 1 {
        ("PlacementException", "selects")
    } else {
        ("PlacementExceptions", "select")
    };
    format!(
        " ({noun} {} {verb} this pod, but namespace {namespace:?}'s binding does not allow exceptions)",
        quoted.join(", ")
    )
}
