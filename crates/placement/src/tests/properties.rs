//! Property tests on random inputs: the node-affinity matcher against a
//! brute-force reference of Kubernetes' rules, and mutation followed by
//! validation.

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use poolkeeper_index::{Labels, Node};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{POOL, cluster, node, pod_json, policy, to_pod};
use crate::affinity::RequiredNodeAffinity;
use crate::{mutate, validate};

const KEYS: &[&str] = &["zone", "rank", POOL, "bad key!"];
const VALUES: &[&str] = &["a", "b", "1", "10", "-3", "x.y", "not valid!"];
const OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Near"];
const NODE_NAMES: &[&str] = &["n0", "n1", "n2"];
const FIELD_KEYS: &[&str] = &["metadata.name", "metadata.uid"];

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(list).prop_map(str::to_owned)
}

fn values() -> impl Strategy<Value = Option<Vec<String>>> {
    prop_oneof![
        Just(None),
        prop::collection::vec(pick(VALUES), 0..3).prop_map(Some),
    ]
}

fn requirement(keys: &'static [&'static str]) -> impl Strategy<Value = NodeSelectorRequirement> {
    (pick(keys), pick(OPERATORS), values()).prop_map(|(key, operator, values)| {
        NodeSelectorRequirement {
            key,
            operator,
            values,
        }
    })
}

fn term() -> impl Strategy<Value = NodeSelectorTerm> {
    (
        prop::option::of(prop::collection::vec(requirement(KEYS), 0..4)),
        prop::option::of(prop::collection::vec(requirement(FIELD_KEYS), 0..2)),
    )
        .prop_map(|(match_expressions, match_fields)| NodeSelectorTerm {
            match_expressions,
            match_fields,
        })
}

fn selector() -> impl Strategy<Value = NodeSelector> {
    prop::collection::vec(term(), 0..4).prop_map(|node_selector_terms| NodeSelector {
        node_selector_terms,
    })
}

fn random_node() -> impl Strategy<Value = Node> {
    let labels =
        prop::collection::btree_map(pick(&KEYS[..3]), pick(&VALUES[..VALUES.len() - 1]), 0..4);
    (pick(NODE_NAMES), labels).prop_map(|(name, labels)| {
        let pairs: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        node(&name, &pairs)
    })
}

/// Kubernetes' rules written out plainly over the API types: a valid term
/// with at least one requirement, every requirement of which holds.
fn reference_matches(selector: &NodeSelector, node: &Node) -> bool {
    selector.node_selector_terms.iter().any(|term| {
        let expressions = term.match_expressions.clone().unwrap_or_default();
        let fields = term.match_fields.clone().unwrap_or_default();
        if expressions.is_empty() && fields.is_empty() {
            return false;
        }
        let valid = expressions.iter().all(expression_valid) && fields.iter().all(field_valid);
        valid
            && expressions
                .iter()
                .all(|e| expression_holds(e, &node.labels))
            && fields.iter().all(|f| field_holds(f, &node.name))
    })
}

fn expression_valid(e: &NodeSelectorRequirement) -> bool {
    let values = e.values.clone().unwrap_or_default();
    let key_ok = !e.key.contains(' ');
    let values_ok = values.iter().all(|v| label_value_ok(v));
    let shape_ok = match e.operator.as_str() {
        "In" | "NotIn" => !values.is_empty(),
        "Exists" | "DoesNotExist" => values.is_empty(),
        "Gt" | "Lt" => values.len() == 1 && values[0].parse::<i64>().is_ok(),
        _ => false,
    };
    key_ok && values_ok && shape_ok
}

/// A label value: at most 63 characters, alphanumeric at both ends, and
/// `-`, `_`, `.` or alphanumeric between; or empty.
fn label_value_ok(value: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.is_empty()
        || (value.len() <= 63
            && ends(value.chars().next())
            && ends(value.chars().last())
            && value.chars().all(inner))
}

fn expression_holds(e: &NodeSelectorRequirement, labels: &Labels) -> bool {
    let values = e.values.clone().unwrap_or_default();
    let label = labels.get(&e.key);
    let number = label.and_then(|v| v.parse::<i64>().ok());
    let bound = values.first().and_then(|v| v.parse::<i64>().ok());
    match e.operator.as_str() {
        "In" => label.is_some_and(|v| values.contains(v)),
        "NotIn" => !label.is_some_and(|v| values.contains(v)),
        "Exists" => label.is_some(),
        "DoesNotExist" => label.is_none(),
        "Gt" => matches!((number, bound), (Some(n), Some(b)) if n > b),
        "Lt" => matches!((number, bound), (Some(n), Some(b)) if n < b),
        _ => false,
    }
}

fn field_valid(f: &NodeSelectorRequirement) -> bool {
    let values = f.values.clone().unwrap_or_default();
    f.key == "metadata.name" && matches!(f.operator.as_str(), "In" | "NotIn") && values.len() == 1
}

fn field_holds(f: &NodeSelectorRequirement, name: &str) -> bool {
    let values = f.values.clone().unwrap_or_default();
    match f.operator.as_str() {
        "In" => values.first().is_some_and(|v| v == name),
        _ => values.first().is_some_and(|v| v != name),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn the_affinity_matcher_agrees_with_the_reference(
        selector in selector(),
        nodes in prop::collection::vec(random_node(), 1..4),
    ) {
        let parsed = RequiredNodeAffinity::parse(&selector, "spec");
        for node in &nodes {
            prop_assert_eq!(
                parsed.matches(node),
                reference_matches(&selector, node),
                "selector {:?} on node {} {:?}", selector, node.name, node.labels
            );
        }
    }
}

/// Tolerations a Pod may already carry: each edge toleration, near misses
/// of them, a catch-all and an unrelated one.
const TOLERATIONS: &[&str] = &[
    r#"{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}"#,
    r#"{"key": "edge.example.com/link", "operator": "Equal", "value": "flaky", "effect": "NoExecute"}"#,
    r#"{"key": "edge.example.com/link", "operator": "Equal", "value": "solid", "effect": "NoExecute"}"#,
    r#"{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoExecute"}"#,
    r#"{"operator": "Exists"}"#,
    r#"{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}"#,
];

/// Node constraints, some inside the pool of the Pod's namespace and some
/// reaching outside it.
fn constraints() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        json!({}),
        json!({"nodeSelector": {"zone": "a"}}),
        json!({"nodeSelector": {"disk": "ssd"}}),
        json!({"nodeSelector": {POOL: "hangzhou"}}),
        json!({"nodeSelector": {POOL: "beijing"}}),
        json!({"nodeName": "hz-1"}),
        json!({"nodeName": "free-1"}),
        super::required(
            json!([{"matchExpressions": [{"key": POOL, "operator": "In", "values": ["hangzhou"]}]}]),
        ),
        super::required(
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
        ),
        super::required(
            json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]),
        ),
    ])
}

fn random_pod() -> impl Strategy<Value = (String, Value)> {
    let namespace = prop::sample::select(vec!["shop-hangzhou", "shop-beijing"]);
    let tolerations = prop::option::of(prop::collection::vec(
        prop::sample::select(TOLERATIONS),
        0..4,
    ));
    (namespace, tolerations, constraints()).prop_map(|(namespace, tolerations, constraints)| {
        let mut spec = constraints;
        if let Some(list) = tolerations {
            let list: Vec<Value> = list
                .iter()
                .map(|t| serde_json::from_str(t).unwrap())
                .collect();
            spec["tolerations"] = Value::Array(list);
        }
        (namespace.to_owned(), pod_json(json!({}), spec))
    })
}

fn unconstrained(pod: &Value) -> bool {
    let spec = &pod["spec"];
    spec["nodeName"].is_null() && spec["nodeSelector"].is_null() && spec["affinity"].is_null()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// A Pod of a pool with nodes, mutated: allowed when it had no node
    /// constraint of its own, never denied when the original was allowed,
    /// and mutating it again changes nothing.
    #[test]
    fn a_mutated_pod_is_allowed_and_stays_as_it_is((namespace, pod) in random_pod()) {
        let index = cluster();
        let view = index.placement();
        let policy = policy();
        let mutation = mutate(&to_pod(&pod), &namespace, &view, &policy);
        prop_assert!(mutation.allowed, "{:?}", mutation.message);
        let mut mutated = pod.clone();
        let patch = mutation.patch.clone().unwrap_or_default();
        json_patch::patch(&mut mutated, &patch.0).expect("the patch applies");

        let after = validate(&to_pod(&mutated), &namespace, &view, &policy);
        let before = validate(&to_pod(&pod), &namespace, &view, &policy);
        if unconstrained(&pod) {
            prop_assert!(after.allowed, "{pod} mutated to {mutated}: {:?}", after.message);
        }
        if before.allowed {
            prop_assert!(after.allowed, "{pod} mutated to {mutated}: {:?}", after.message);
        }
        let again = mutate(&to_pod(&mutated), &namespace, &view, &policy);
        prop_assert!(again.patch.is_none(), "{mutated} patched again: {:?}", again.patch);
    }
}
