//! The nodes a Pod's constraints select, computed from the index without
//! scanning every node when a constraint narrows the search: the cheapest
//! of `nodeName` (one node), a `nodeSelector` pair (one label index entry)
//! and the node affinity terms (`metadata.name In`, a label `In`, or a label
//! key required by `Exists`/`Gt`/`Lt`) gives the candidates, which are then
//! filtered by every constraint.

use poolkeeper_index::{Node, PlacementView};

use crate::affinity::{FieldRequirement, LabelOp, NodeConstraints, RequiredNodeAffinity, Term};
use crate::pools::PoolSet;

/// A superset of the nodes that satisfy a constraint, answerable by the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source<'a> {
    Named(&'a str),
    Label(&'a str, &'a str),
    LabelKey(&'a str),
    Union(Vec<Source<'a>>),
    All,
}

impl Source<'_> {
    /// How many nodes iterating this source visits; answered from the
    /// index's set sizes, so choosing a source costs nothing like using one.
    fn cost(&self, view: &PlacementView<'_>) -> usize {
        match self {
            Source::Named(name) => usize::from(view.node(name).is_some()),
            Source::Label(key, value) => view.label_count(key, value),
            Source::LabelKey(key) => view.label_key_count(key),
            Source::Union(parts) => parts.iter().map(|part| part.cost(view)).sum(),
            Source::All => view.node_count(),
        }
    }

    /// Every node this source yields is in `pools` (the empty union
    /// yields none).
    pub(crate) fn within(&self, pool_label: &str, pools: &PoolSet) -> bool {
        match self {
            Source::Label(key, value) => *key == pool_label && pools.contains(value),
            Source::Union(parts) => parts.iter().all(|part| part.within(pool_label, pools)),
            Source::Named(_) | Source::LabelKey(_) | Source::All => false,
        }
    }

    /// Whether a node of this source satisfies `predicate`, stopping at the first.
    fn any(&self, view: &PlacementView<'_>, predicate: &mut impl FnMut(&Node) -> bool) -> bool {
        match self {
            Source::Named(name) => view.node(name).is_some_and(predicate),
            Source::Label(key, value) => view.nodes_with_label(key, value).any(predicate),
            Source::LabelKey(key) => view.nodes_with_label_key(key).any(predicate),
            Source::Union(parts) => parts.iter().any(|part| part.any(view, predicate)),
            Source::All => view.nodes().any(predicate),
        }
    }

    fn collect<'v>(&self, view: &'v PlacementView<'_>, out: &mut Vec<&'v Node>) {
        match self {
            Source::Named(name) => out.extend(view.node(name)),
            Source::Label(key, value) => out.extend(view.nodes_with_label(key, value)),
            Source::LabelKey(key) => out.extend(view.nodes_with_label_key(key)),
            Source::Union(parts) => {
                for part in parts {
                    part.collect(view, out);
                }
            }
            Source::All => out.extend(view.nodes()),
        }
    }
}

/// The cheapest of `options`, `All` when there is none.
fn cheapest<'a>(view: &PlacementView<'_>, options: Vec<Source<'a>>) -> Source<'a> {
    options
        .into_iter()
        .map(|source| (source.cost(view), source))
        .min_by_key(|(cost, _)| *cost)
        .map_or(Source::All, |(_, source)| source)
}

fn term_source<'a>(view: &PlacementView<'_>, term: &'a Term) -> Source<'a> {
    if let Some(name) = term.fields.iter().find_map(|field| match field {
        FieldRequirement::NameIs(name) => Some(name.as_str()),
        FieldRequirement::NameIsNot(_) => None,
    }) {
        return Source::Named(name);
    }
    let options = term
        .labels
        .iter()
        .filter_map(|requirement| match &requirement.op {
            LabelOp::In(values) => Some(Source::Union(
                values
                    .iter()
                    .map(|value| Source::Label(&requirement.key, value))
                    .collect(),
            )),
            LabelOp::Exists | LabelOp::Gt(_) | LabelOp::Lt(_) => {
                Some(Source::LabelKey(&requirement.key))
            }
            LabelOp::NotIn(_) | LabelOp::DoesNotExist => None,
        })
        .collect();
    cheapest(view, options)
}

fn affinity_source<'a>(view: &PlacementView<'_>, affinity: &'a RequiredNodeAffinity) -> Source<'a> {
    let mut parts = Vec::with_capacity(affinity.terms.len());
    for term in &affinity.terms {
        match term_source(view, term) {
            Source::All => return Source::All,
            source => parts.push(source),
        }
    }
    // No valid term: nothing can match, and the empty union says so.
    Source::Union(parts)
}

/// The cheapest source of the nodes `constraints` select: every such node
/// is in it.
pub(crate) fn source_for<'c>(
    view: &PlacementView<'_>,
    constraints: &'c NodeConstraints<'_>,
) -> Source<'c> {
    if let Some(name) = constraints.node_name {
        return Source::Named(name);
    }
    let mut options: Vec<Source<'_>> = constraints
        .node_selector
        .into_iter()
        .flatten()
        .map(|(key, value)| Source::Label(key, value))
        .collect();
    if let Some(affinity) = &constraints.required_affinity {
        match affinity_source(view, affinity) {
            Source::All => {}
            source => options.push(source),
        }
    }
    cheapest(view, options)
}

/// The nodes in the intersection of the Pod's node sets (each absent
/// constraint selects every node), sorted by name.
pub(crate) fn matching_nodes<'v>(
    view: &'v PlacementView<'_>,
    constraints: &NodeConstraints<'_>,
) -> Vec<&'v Node> {
    let mut candidates = Vec::new();
    source_for(view, constraints).collect(view, &mut candidates);
    candidates.retain(|node| constraints.matches(node));
    sorted_unique(candidates)
}

fn sorted_unique(mut nodes: Vec<&Node>) -> Vec<&Node> {
    nodes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    nodes.dedup_by(|a, b| a.name == b.name);
    nodes
}

/// Where the nodes a Pod's constraints select lie against its pools.
#[derive(Debug)]
pub(crate) enum Reach<'v> {
    /// No node matches the constraints.
    NoNode,
    /// Some nodes match, every one of them in the pools.
    InPools,
    /// The matching nodes outside the pools, sorted by name.
    Outside(Vec<&'v Node>),
}

/// Where the nodes of [`matching_nodes`] lie against `pools`, for less than
/// computing them: a node in the pools is checked against the constraints
/// only until one matches, and when the source holds only nodes of the
/// pools (the required affinity a mutation adds), the first match answers
/// and nothing is collected.
pub(crate) fn reach<'v>(
    view: &'v PlacementView<'_>,
    constraints: &NodeConstraints<'_>,
    pools: &PoolSet,
) -> Reach<'v> {
    let pool_label = view.pool_label();
    let source = source_for(view, constraints);
    if source.within(pool_label, pools) {
        return if source.any(view, &mut |node| constraints.matches(node)) {
            Reach::InPools
        } else {
            Reach::NoNode
        };
    }
    let mut candidates = Vec::new();
    source.collect(view, &mut candidates);
    let mut matched_in_pools = false;
    candidates.retain(|node| {
        if in_pools(node, pool_label, pools) {
            matched_in_pools = matched_in_pools || constraints.matches(node);
            false
        } else {
            constraints.matches(node)
        }
    });
    match (candidates.is_empty(), matched_in_pools) {
        (false, _) => Reach::Outside(sorted_unique(candidates)),
        (true, true) => Reach::InPools,
        (true, false) => Reach::NoNode,
    }
}

/// Whether `node` carries the pool label with one of `pools`.
pub(crate) fn in_pools(node: &Node, pool_label: &str, pools: &PoolSet) -> bool {
    node.labels
        .get(pool_label)
        .is_some_and(|pool| pools.contains(pool))
}

/// The same set by a full scan; the reference the indexed path is tested against.
#[cfg(test)]
pub(crate) fn matching_nodes_by_scan<'v>(
    view: &'v PlacementView<'_>,
    constraints: &NodeConstraints<'_>,
) -> Vec<&'v Node> {
    let mut nodes: Vec<&Node> = view
        .nodes()
        .filter(|node| constraints.matches(node))
        .collect();
    nodes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    nodes
}
