//! Node selection with the semantics of
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`: the Pod's
//! `nodeName`, `nodeSelector` and required node affinity.
//!
//! Required node affinity:
//! - `nodeSelectorTerms` are ORed; an empty list matches nothing;
//! - within a term, `matchExpressions` (node labels) and `matchFields`
//!   (node fields) are ANDed; a term with neither matches nothing;
//! - a term with an invalid requirement (unknown operator, wrong number of
//!   values, a non-integer `Gt`/`Lt` value, a key or value that is not a valid
//!   label key or value) matches nothing, while the other terms still count —
//!   the scheduler's `LazyErrorNodeSelector` does the same;
//! - `matchFields` supports only `metadata.name` with `In` or `NotIn` and
//!   exactly one value. The API server rejects any other field key; here such
//!   a term is invalid, so it matches nothing.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use poolkeeper_index::{Labels, Node};

use crate::names::{label_value_errors, qualified_name_errors};
use crate::pod::PodPlacement;

/// The only node field a `matchFields` requirement may select on.
pub(crate) const NODE_NAME_FIELD: &str = "metadata.name";

/// Where a Pod's required node affinity lives, for error paths.
pub(crate) const REQUIRED_AFFINITY_PATH: &str =
    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";

/// `{parent}.{field}[{index}]`, written only when a problem is reported:
/// a valid selector is read without building its paths.
struct Item<'a> {
    parent: &'a dyn fmt::Display,
    field: &'static str,
    index: usize,
}

impl fmt::Display for Item<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}[{}]", self.parent, self.field, self.index)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LabelOp {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

/// One valid `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LabelRequirement {
    pub(crate) key: String,
    pub(crate) op: LabelOp,
}

impl LabelRequirement {
    /// `labels.Requirement.Matches`.
    pub(crate) fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match &self.op {
            LabelOp::In(values) => value.is_some_and(|v| values.contains(v)),
            LabelOp::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            // A label value that is not an int64 never matches.
            LabelOp::Gt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *bound),
            LabelOp::Lt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *bound),
        }
    }
}

/// One valid `matchFields` entry: `metadata.name In [x]` or `NotIn [x]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FieldRequirement {
    NameIs(String),
    NameIsNot(String),
}

impl FieldRequirement {
    fn matches(&self, node_name: &str) -> bool {
        match self {
            FieldRequirement::NameIs(name) => node_name == name,
            FieldRequirement::NameIsNot(name) => node_name != name,
        }
    }
}

/// A valid, non-empty node selector term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    pub(crate) labels: Vec<LabelRequirement>,
    pub(crate) fields: Vec<FieldRequirement>,
}

impl Term {
    pub(crate) fn matches(&self, node: &Node) -> bool {
        self.labels.iter().all(|r| r.matches(&node.labels))
            && self.fields.iter().all(|r| r.matches(&node.name))
    }
}

/// A parsed `NodeSelector` (the required part of node affinity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RequiredNodeAffinity {
    /// The valid, non-empty terms, in order.
    pub(crate) terms: Vec<Term>,
    /// Why the invalid terms match nothing, as `path: problem`.
    errors: Vec<String>,
}

impl RequiredNodeAffinity {
    /// Parses `selector`, naming problems under `path`
    /// (e.g. [`REQUIRED_AFFINITY_PATH`]).
    pub(crate) fn parse(selector: &NodeSelector, path: &str) -> Self {
        let mut terms = Vec::new();
        let mut errors = Vec::new();
        for (index, term) in selector.node_selector_terms.iter().enumerate() {
            let term_path = Item {
                parent: &path,
                field: "nodeSelectorTerms",
                index,
            };
            match parse_term(term, &term_path) {
                Ok(Some(term)) => terms.push(term),
                // No requirement at all: matches nothing, and is no error.
                Ok(None) => {}
                Err(term_errors) => errors.extend(term_errors),
            }
        }
        Self { terms, errors }
    }

    /// Whether some term selects `node`.
    pub(crate) fn matches(&self, node: &Node) -> bool {
        self.terms.iter().any(|term| term.matches(node))
    }

    /// Problems that made terms invalid (each matches nothing).
    pub(crate) fn errors(&self) -> &[String] {
        &self.errors
    }

    /// `true` when no term can match any node: no terms, or only empty or
    /// invalid ones.
    pub(crate) fn matches_nothing(&self) -> bool {
        self.terms.is_empty()
    }
}

/// `Ok(None)` for a term without requirements; `Err` lists every problem.
pub(crate) fn parse_term(
    term: &NodeSelectorTerm,
    path: &dyn fmt::Display,
) -> Result<Option<Term>, Vec<String>> {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return Ok(None);
    }
    let mut errors = Vec::new();
    let mut parsed = Term {
        labels: Vec::with_capacity(expressions.len()),
        fields: Vec::with_capacity(fields.len()),
    };
    for (index, requirement) in expressions.iter().enumerate() {
        let item = Item {
            parent: path,
            field: "matchExpressions",
            index,
        };
        match parse_label_requirement(requirement, &item) {
            Ok(r) => parsed.labels.push(r),
            Err(e) => errors.extend(e),
        }
    }
    for (index, requirement) in fields.iter().enumerate() {
        let item = Item {
            parent: path,
            field: "matchFields",
            index,
        };
        match parse_field_requirement(requirement, &item) {
            Ok(r) => parsed.fields.push(r),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(Some(parsed))
    } else {
        Err(errors)
    }
}

/// `labels.NewRequirement` after the operator mapping of
/// `nodeSelectorRequirementsAsSelector`.
fn parse_label_requirement(
    requirement: &NodeSelectorRequirement,
    path: &dyn fmt::Display,
) -> Result<LabelRequirement, Vec<String>> {
    let key = requirement.key.as_str();
    let values = requirement.values.as_deref().unwrap_or_default();
    let mut errors = Vec::new();

    let key_errors = qualified_name_errors(key);
    if !key_errors.is_empty() {
        errors.push(format!(
            "{path}.key: Invalid value: {key:?}: {}",
            key_errors.join("; ")
        ));
    }

    let op = parse_operator(&requirement.operator, values, path, &mut errors);

    for (i, value) in values.iter().enumerate() {
        let value_errors = label_value_errors(value);
        if !value_errors.is_empty() {
            errors.push(format!(
                "{path}.values[{i}]: Invalid value: {value:?}: {}",
                value_errors.join("; ")
            ));
        }
    }

    match op {
        Some(op) if errors.is_empty() => Ok(LabelRequirement {
            key: key.to_owned(),
            op,
        }),
        _ => Err(errors),
    }
}

/// The operator with its values, as `labels.NewRequirement` checks them;
/// `None` for an unsupported operator or a `Gt`/`Lt` bound that is not an
/// integer. Problems go to `errors`.
fn parse_operator(
    operator: &str,
    values: &[String],
    path: &dyn fmt::Display,
    errors: &mut Vec<String>,
) -> Option<LabelOp> {
    match operator {
        "In" | "NotIn" => {
            if values.is_empty() {
                errors.push(format!(
                    "{path}.values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
                ));
            }
            if operator == "In" {
                Some(LabelOp::In(values.to_vec()))
            } else {
                Some(LabelOp::NotIn(values.to_vec()))
            }
        }
        "Exists" | "DoesNotExist" => {
            if !values.is_empty() {
                errors.push(format!(
                    "{path}.values: Invalid value: {values:?}: values set must be empty for exists and does not exist"
                ));
            }
            if operator == "Exists" {
                Some(LabelOp::Exists)
            } else {
                Some(LabelOp::DoesNotExist)
            }
        }
        "Gt" | "Lt" => {
            if values.len() != 1 {
                errors.push(format!(
                    "{path}.values: Invalid value: {values:?}: for 'Gt', 'Lt' operators, exactly one value is required"
                ));
            }
            let mut bound = None;
            for (i, value) in values.iter().enumerate() {
                match value.parse::<i64>() {
                    Ok(v) => bound = Some(v),
                    Err(_) => errors.push(format!(
                        "{path}.values[{i}]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    )),
                }
            }
            match (operator, bound) {
                (_, None) => None,
                ("Gt", Some(b)) => Some(LabelOp::Gt(b)),
                (_, Some(b)) => Some(LabelOp::Lt(b)),
            }
        }
        other => {
            errors.push(format!(
                "{path}.operator: Unsupported value: {other:?}: supported values: \"DoesNotExist\", \"Exists\", \"Gt\", \"In\", \"Lt\", \"NotIn\""
            ));
            None
        }
    }
}

/// `nodeSelectorRequirementsAsFieldSelector`, restricted to the one field
/// the API server accepts.
fn parse_field_requirement(
    requirement: &NodeSelectorRequirement,
    path: &dyn fmt::Display,
) -> Result<FieldRequirement, String> {
    if requirement.key != NODE_NAME_FIELD {
        return Err(format!(
            "{path}.key: Unsupported value: {:?}: supported values: \"{NODE_NAME_FIELD}\"",
            requirement.key
        ));
    }
    let values = requirement.values.as_deref().unwrap_or_default();
    let single = match values {
        [one] => Some(one.clone()),
        _ => None,
    };
    match (requirement.operator.as_str(), single) {
        ("In", Some(name)) => Ok(FieldRequirement::NameIs(name)),
        ("NotIn", Some(name)) => Ok(FieldRequirement::NameIsNot(name)),
        ("In" | "NotIn", None) => Err(format!(
            "{path}.values: Invalid value: {values:?}: must have one element"
        )),
        (other, _) => Err(format!(
            "{path}.operator: Unsupported value: {other:?}: supported values: \"In\", \"NotIn\""
        )),
    }
}

/// Whether `node` satisfies `selector` (required node affinity semantics).
#[cfg(test)]
pub(crate) fn node_selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    RequiredNodeAffinity::parse(selector, "nodeSelector").matches(node)
}

/// Whether `node` carries every `key=value` pair of a Pod's `nodeSelector`.
pub(crate) fn node_selector_map_matches(selector: &BTreeMap<String, String>, node: &Node) -> bool {
    selector
        .iter()
        .all(|(key, value)| node.labels.get(key) == Some(value))
}

/// The node constraints of a Pod, each `None` when absent (no constraint).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeConstraints<'p> {
    /// `spec.nodeName`, when not empty.
    pub(crate) node_name: Option<&'p str>,
    /// `spec.nodeSelector`, when it has at least one pair.
    pub(crate) node_selector: Option<&'p BTreeMap<String, String>>,
    /// `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`,
    /// when set (even with an empty term list, which matches nothing).
    pub(crate) required_affinity: Option<RequiredNodeAffinity>,
}

impl<'p> NodeConstraints<'p> {
    pub(crate) fn from_pod(pod: &'p PodPlacement) -> Self {
        let Some(spec) = pod.spec.as_ref() else {
            return Self::none();
        };
        Self {
            node_name: pod.node_name(),
            node_selector: spec.node_selector.as_ref().filter(|s| !s.is_empty()),
            required_affinity: pod
                .required_node_affinity()
                .map(|selector| RequiredNodeAffinity::parse(selector, REQUIRED_AFFINITY_PATH)),
        }
    }

    pub(crate) fn none() -> Self {
        Self {
            node_name: None,
            node_selector: None,
            required_affinity: None,
        }
    }

    /// No nodeName, no nodeSelector and no required node affinity.
    pub(crate) fn is_unconstrained(&self) -> bool {
        self.node_name.is_none() && self.node_selector.is_none() && self.required_affinity.is_none()
    }

    /// Whether `node` is in the intersection of the three node sets.
    pub(crate) fn matches(&self, node: &Node) -> bool {
        self.node_name.is_none_or(|name| node.name == name)
            && self
                .node_selector
                .is_none_or(|selector| node_selector_map_matches(selector, node))
            && self
                .required_affinity
                .as_ref()
                .is_none_or(|affinity| affinity.matches(node))
    }

    /// The constraints present, for messages: `nodeName`, `nodeSelector`,
    /// `required node affinity`.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(name) = self.node_name {
            parts.push(format!("nodeName {name:?}"));
        }
        if self.node_selector.is_some() {
            parts.push("nodeSelector".to_owned());
        }
        if self.required_affinity.is_some() {
            parts.push("required node affinity".to_owned());
        }
        if parts.is_empty() {
            "no node constraints".to_owned()
        } else {
            parts.join(", ")
        }
    }
}
