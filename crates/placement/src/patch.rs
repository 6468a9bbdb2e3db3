//! The JSON patch operations of the mutating decision: the pool's node
//! affinity (added, or ANDed into the Pod's own terms), the edge
//! tolerations' values and the placement record.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use poolkeeper_config::Constraints;
use serde_json::{Value, json};

use crate::affinity::NodeConstraints;
use crate::decision::PoolBinding;
use crate::pod::{PLACEMENT_ANNOTATION, PodPlacement};
use crate::pools::PoolSet;

/// The affinity operation the Pod needs, if any: the pool requirement for an
/// unconstrained Pod, or (narrowing) ANDed into each required term that
/// lacks it. `nodeName` is never rewritten, so a Pod naming its node is
/// judged as written.
pub(crate) fn pool_affinity_op(
    pod: &PodPlacement,
    pool_label: &str,
    pools: &PoolSet,
    constraints: Constraints,
) -> Option<PatchOperation> {
    let own = NodeConstraints::from_pod(pod);
    if own.is_unconstrained() {
        return Some(add_pool_affinity(pod, pool_label, pools));
    }
    if constraints == Constraints::Judge || own.node_name.is_some() {
        return None;
    }
    let Some(required) = pod.required_node_affinity() else {
        return Some(add_pool_affinity(pod, pool_label, pools));
    };
    let requirement = pool_requirement(pool_label, pools);
    let has_it = |term: &NodeSelectorTerm| {
        term.match_expressions
            .as_ref()
            .is_some_and(|expressions| expressions.contains(&requirement))
    };
    if required.node_selector_terms.iter().all(has_it) {
        return None;
    }
    let mut narrowed = required.clone();
    for term in narrowed
        .node_selector_terms
        .iter_mut()
        .filter(|t| !has_it(t))
    {
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .push(requirement.clone());
    }
    Some(add(
        &[
            "spec",
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
        ],
        to_value(&narrowed),
    ))
}

fn pool_requirement(pool_label: &str, pools: &PoolSet) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: pool_label.to_owned(),
        operator: "In".to_owned(),
        values: Some(pools.names().to_vec()),
    }
}

/// Records pool, binding, mode and constraints in [`PLACEMENT_ANNOTATION`].
pub(crate) fn annotation_op(
    pod: &PodPlacement,
    binding: &PoolBinding<'_>,
    constraints: Constraints,
) -> PatchOperation {
    let value = placement_record(binding, constraints);
    match pod.annotations {
        None => add(
            &["metadata", "annotations"],
            json!({PLACEMENT_ANNOTATION: value}),
        ),
        Some(_) => add(
            &["metadata", "annotations", PLACEMENT_ANNOTATION],
            Value::String(value),
        ),
    }
}

/// The text of [`PLACEMENT_ANNOTATION`]: a JSON object with its keys in a
/// fixed order (pool, binding, mode, constraints); several pools are joined
/// by commas.
pub fn placement_record(binding: &PoolBinding<'_>, constraints: Constraints) -> String {
    let quoted = |text: &str| Value::String(text.to_owned()).to_string();
    let exceptions = if binding.exceptions.is_empty() {
        String::new()
    } else {
        format!(",\"exceptions\":{}", quoted(&binding.exceptions.joined()))
    };
    format!(
        "{{\"pool\":{},\"binding\":{},\"mode\":{},\"constraints\":{}{exceptions}}}",
        quoted(&binding.pools.joined()),
        quoted(binding.source.as_str()),
        quoted(binding.mode.as_str()),
        quoted(constraints.as_str())
    )
}

pub(crate) fn rebase(op: PatchOperation, base: &[&str]) -> PatchOperation {
    if base.is_empty() {
        return op;
    }
    match op {
        PatchOperation::Add(AddOperation { path, value }) => {
            let mut tokens: Vec<String> = base.iter().map(|t| (*t).to_owned()).collect();
            tokens.extend(path.tokens().map(|t| t.decoded().into_owned()));
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(tokens),
                value,
            })
        }
        other => other,
    }
}

pub(crate) fn add(path: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().copied()),
        value,
    })
}

/// The `add` operation that creates the required node affinity at the
/// deepest level missing, leaving sibling fields alone.
fn add_pool_affinity(pod: &PodPlacement, pool_label: &str, pools: &PoolSet) -> PatchOperation {
    // Built as JSON directly: the `k8s_openapi` types through `to_value`
    // cost a mutation several times as much.
    let required = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": pool_label, "operator": "In", "values": pools.names()}
    ]}]});
    let affinity = pod.spec.as_ref().and_then(|spec| spec.affinity.as_ref());
    match affinity.map(|affinity| affinity.node_affinity.is_some()) {
        None => add(
            &["spec", "affinity"],
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}),
        ),
        Some(false) => add(
            &["spec", "affinity", "nodeAffinity"],
            json!({"requiredDuringSchedulingIgnoredDuringExecution": required}),
        ),
        Some(true) => add(
            &[
                "spec",
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
            ],
            required,
        ),
    }
}

pub(crate) fn to_value<T: serde::Serialize>(value: &T) -> Value {
    // Serializing k8s-openapi structs into a Value cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}
