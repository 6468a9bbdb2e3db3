//! The nodes a Pod's constraints select, computed from the index without
//! scanning every node when a constraint narrows the search: the cheapest
//! of `nodeName` (one node), a `nodeSelector` pair (one label index entry)
//! and the node affinity terms (`metadata.name In`, a label `In`, or a label
//! key required by `Exists`/`Gt`/`Lt`) gives the candidates, which are then
//! filtered by every constraint.

use poolkeeper_index::{Node, PlacementView};

use crate::affinity::{FieldRequirement, LabelOp, NodeConstraints, RequiredNodeAffinity, Term};

/// A superset of the nodes that satisfy a constraint, answerable by the index.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source<'a> {
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

/// The nodes in the intersection of the Pod's node sets (each absent
/// constraint selects every node), sorted by name.
pub(crate) fn matching_nodes<'v>(
    view: &'v PlacementView<'_>,
    constraints: &NodeConstraints<'_>,
) -> Vec<&'v Node> {
    let source = if let Some(name) = constraints.node_name {
        Source::Named(name)
    } else {
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
    };

    let mut candidates = Vec::new();
    source.collect(view, &mut candidates);
    candidates.retain(|node| constraints.matches(node));
    candidates.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    candidates.dedup_by(|a, b| a.name == b.name);
    candidates
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
