//! Property tests on random inputs: the node-affinity matcher against a
//! brute-force reference of Kubernetes' rules, and mutation followed by
//! validation against the same reference over the whole cluster.

use std::cell::Cell;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use poolkeeper_index::{Labels, Node, PlacementView};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{Value, json};

use super::{POOL, cluster, node, pod_json, policy, to_pod};
use crate::affinity::RequiredNodeAffinity;
use crate::candidates::in_pools;
use crate::{Reason, mutate, validate};

type Words = &'static [&'static str];

const KEYS: Words = &["zone", "rank", POOL, "bad key!"];
const VALUES: Words = &["a", "b", "1", "10", "-3", "+7", "x.y", "not valid!"];
const OPERATORS: Words = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Near"];
const NODE_NAMES: Words = &["n0", "n1", "n2"];
const FIELD_KEYS: Words = &["metadata.name", "metadata.uid"];
const FIELD_VALUES: Words = &["n0", "n1", "n2", "a"];

fn pick(list: Words) -> impl Strategy<Value = String> {
    prop::sample::select(list).prop_map(str::to_owned)
}

fn values(list: Words) -> impl Strategy<Value = Option<Vec<String>>> {
    prop_oneof![
        1 => Just(None),
        3 => prop::collection::vec(pick(list), 0..3).prop_map(Some),
    ]
}

/// A requirement of the form its operator takes, with valid values.
fn well_formed(keys: Words, list: Words) -> impl Strategy<Value = NodeSelectorRequirement> {
    let valid: Vec<&'static str> = list.iter().copied().filter(|v| label_value_ok(v)).collect();
    let numbers: Vec<&'static str> = valid
        .iter()
        .copied()
        .filter(|v| v.parse::<i64>().is_ok())
        .collect();
    let set = prop::collection::vec(prop::sample::select(valid), 1..3);
    let shaped = prop_oneof![
        (
            prop::sample::select(vec!["In", "NotIn"]),
            set.prop_map(Some)
        ),
        (
            prop::sample::select(vec!["Exists", "DoesNotExist"]),
            prop_oneof![Just(None), Just(Some(Vec::new()))]
        ),
        (
            prop::sample::select(vec!["Gt", "Lt"]),
            prop::sample::select(numbers).prop_map(|n| Some(vec![n]))
        ),
    ];
    (pick(keys), shaped).prop_map(|(key, (operator, values))| NodeSelectorRequirement {
        key,
        operator: operator.to_owned(),
        values: values.map(|list| list.into_iter().map(str::to_owned).collect()),
    })
}

/// Mostly well-formed requirements, some of any shape (most of those
/// invalid: a bad key, operator, value or number of values).
fn requirement(keys: Words, list: Words) -> impl Strategy<Value = NodeSelectorRequirement> {
    let any = (pick(keys), pick(OPERATORS), values(list)).prop_map(|(key, operator, values)| {
        NodeSelectorRequirement {
            key,
            operator,
            values,
        }
    });
    prop_oneof![6 => well_formed(&keys[..keys.len() - 1], list), 1 => any]
}

/// Mostly `metadata.name` with one value, some of any shape.
fn field_requirement(list: Words) -> impl Strategy<Value = NodeSelectorRequirement> {
    let name =
        (prop::sample::select(vec!["In", "NotIn"]), pick(list)).prop_map(|(operator, value)| {
            NodeSelectorRequirement {
                key: "metadata.name".to_owned(),
                operator: operator.to_owned(),
                values: Some(vec![value]),
            }
        });
    let any =
        (pick(FIELD_KEYS), pick(OPERATORS), values(list)).prop_map(|(key, operator, values)| {
            NodeSelectorRequirement {
                key,
                operator,
                values,
            }
        });
    prop_oneof![3 => name, 1 => any]
}

/// Terms over label `keys` and `list` values, some with field requirements
/// on `field_values`.
fn term(keys: Words, list: Words, field_values: Words) -> impl Strategy<Value = NodeSelectorTerm> {
    (
        prop::option::weighted(0.9, prop::collection::vec(requirement(keys, list), 0..3)),
        prop::option::weighted(
            0.3,
            prop::collection::vec(field_requirement(field_values), 0..2),
        ),
    )
        .prop_map(|(match_expressions, match_fields)| NodeSelectorTerm {
            match_expressions,
            match_fields,
        })
}

fn selector(keys: Words, list: Words, field_values: Words) -> impl Strategy<Value = NodeSelector> {
    let terms = prop_oneof![
        1 => Just(Vec::new()),
        9 => prop::collection::vec(term(keys, list, field_values), 1..4),
    ];
    terms.prop_map(|node_selector_terms| NodeSelector {
        node_selector_terms,
    })
}

/// A node with a random label set; its values are valid label values
/// except `-3` and `+7`, which only the numeric operators read.
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

/// Kubernetes' rules written out plainly over the API types
/// (`nodeaffinity.LazyErrorNodeSelector`): some term that is valid, has at
/// least one requirement and whose requirements all hold. An invalid term
/// matches nothing but does not spoil the others.
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

/// `labels.NewRequirement`: a qualified key, valid label values, and the
/// number of values each operator takes (`Gt`/`Lt`: one integer).
fn expression_valid(e: &NodeSelectorRequirement) -> bool {
    let values = e.values.clone().unwrap_or_default();
    let key_ok = !e.key.contains([' ', '!']);
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

/// `Requirement.Matches`; `NotIn` holds for a missing label, `Gt`/`Lt` only
/// for a label that parses as an integer.
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

/// `matchFields` as the API server validates them: `metadata.name` only,
/// `In` or `NotIn`, exactly one value.
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

/// `cases` cases, replaying and keeping failures in `proptest-regressions/`
/// as the `proptest!` macro does.
fn runner_config(cases: u32) -> RunnerConfig {
    RunnerConfig {
        source_file: Some(file!()),
        ..RunnerConfig::with_cases(cases)
    }
}

/// The matcher and the reference agree on every node, and the inputs are
/// varied enough for that to mean something: a fair share of the pairs
/// match and a fair share do not.
#[test]
fn the_affinity_matcher_agrees_with_the_reference() {
    const CASES: u32 = 2048;
    let inputs = (
        selector(KEYS, VALUES, FIELD_VALUES),
        prop::collection::vec(random_node(), 1..4),
    );
    let (matched, missed) = (Cell::new(0u32), Cell::new(0u32));
    let mut runner = TestRunner::new(runner_config(CASES));
    let outcome = runner.run(&inputs, |(selector, nodes)| {
        let parsed = RequiredNodeAffinity::parse(&selector, "spec");
        for node in &nodes {
            let expected = reference_matches(&selector, node);
            let counter = if expected { &matched } else { &missed };
            counter.set(counter.get() + 1);
            prop_assert_eq!(
                parsed.matches(node),
                expected,
                "selector {:?} on node {} {:?}",
                selector,
                node.name,
                node.labels
            );
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    let (matched, missed) = (matched.get(), missed.get());
    println!("{matched} node/selector pairs matched, {missed} did not");
    assert!(
        matched > CASES / 8 && missed > CASES / 8,
        "{matched} matched, {missed} did not"
    );
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

/// Label keys and values of the test cluster, and some it lacks.
const CLUSTER_KEYS: Words = &["zone", "disk", POOL, "bad key!"];
const CLUSTER_VALUES: Words = &["a", "b", "ssd", "hangzhou", "beijing", "1", "not valid!"];
const CLUSTER_NODES: Words = &["hz-1", "hz-3", "bj-1", "free-1", "gone"];

/// Where a Pod may ask to go: `nodeName`, a `nodeSelector`, required node
/// affinity (random terms over the cluster's labels), each or none of them;
/// besides, affinity the placement does not read.
fn constraints() -> impl Strategy<Value = Value> {
    let pairs = prop::collection::btree_map(pick(&CLUSTER_KEYS[..3]), pick(CLUSTER_VALUES), 1..3);
    let unread = prop::sample::select(vec![
        json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b"]}]}}]}}),
        json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]}}),
        json!({"nodeAffinity": {}}),
    ]);
    (
        prop::option::weighted(0.2, pick(CLUSTER_NODES)),
        prop::option::weighted(0.3, pairs),
        prop::option::weighted(0.4, selector(CLUSTER_KEYS, CLUSTER_VALUES, CLUSTER_NODES)),
        prop::option::weighted(0.3, unread),
    )
        .prop_map(|(name, selector, required, unread)| {
            let mut spec = json!({});
            if let Some(name) = name {
                spec["nodeName"] = json!(name);
            }
            if let Some(selector) = selector {
                spec["nodeSelector"] = json!(selector);
            }
            let mut affinity = unread.unwrap_or_else(|| json!({}));
            if let Some(required) = required {
                affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
                    serde_json::to_value(required).expect("a selector serializes");
            }
            if affinity != json!({}) {
                spec["affinity"] = affinity;
            }
            spec
        })
}

/// A Pod bound to a pool with nodes, by its namespace, by its own pool
/// label, or by both (a label naming its namespace's pool): `(namespace,
/// pool, pod)`.
fn random_pod() -> impl Strategy<Value = (String, String, Value)> {
    let binding = prop::sample::select(vec![
        ("shop-hangzhou", None),
        ("shop-beijing", None),
        ("plain", Some("hangzhou")),
        ("plain", Some("beijing")),
        ("shop-hangzhou", Some("hangzhou")),
    ]);
    let tolerations = prop::option::of(prop::collection::vec(
        prop::sample::select(TOLERATIONS),
        0..4,
    ));
    (binding, tolerations, constraints()).prop_map(|((namespace, label), tolerations, spec)| {
        let mut spec = spec;
        if let Some(list) = tolerations {
            let list: Vec<Value> = list
                .iter()
                .map(|t| serde_json::from_str(t).expect("a toleration"))
                .collect();
            spec["tolerations"] = Value::Array(list);
        }
        let pool = label.unwrap_or(if namespace == "shop-beijing" {
            "beijing"
        } else {
            "hangzhou"
        });
        let labels = label.map_or_else(|| json!({}), |label| json!({POOL: label}));
        (
            namespace.to_owned(),
            pool.to_owned(),
            pod_json(labels, spec),
        )
    })
}

fn required_affinity(spec: &Value) -> Option<NodeSelector> {
    let required =
        &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    (!required.is_null())
        .then(|| serde_json::from_value(required.clone()).expect("a node selector"))
}

fn unconstrained(pod: &Value) -> bool {
    let spec = &pod["spec"];
    spec["nodeName"].is_null()
        && spec["nodeSelector"].is_null()
        && required_affinity(spec).is_none()
}

/// The nodes the Pod's constraints allow, by a scan of every node of the
/// cluster with the reference rules.
fn reference_nodes<'v>(pod: &Value, view: &'v PlacementView<'_>) -> Vec<&'v Node> {
    let spec = &pod["spec"];
    let required = required_affinity(spec);
    view.nodes()
        .filter(|node| {
            spec["nodeName"]
                .as_str()
                .is_none_or(|name| *node.name == *name)
        })
        .filter(|node| {
            spec["nodeSelector"].as_object().is_none_or(|selector| {
                selector
                    .iter()
                    .all(|(key, value)| node.labels.get(key).map(String::as_str) == value.as_str())
            })
        })
        .filter(|node| required.as_ref().is_none_or(|r| reference_matches(r, node)))
        .collect()
}

/// Mutates then validates `pod`; the verdict, once checked against the
/// reference: validation allows the patched Pod exactly when the nodes its
/// constraints allow are some and all in the pool, so a Pod without
/// constraints of its own is always allowed. The mutation leaves the Pod's
/// own constraints alone, and mutating the result again changes nothing.
fn mutate_then_validate(namespace: &str, pool: &str, pod: &Value) -> Result<Reason, TestCaseError> {
    let index = cluster();
    let view = index.placement();
    let policy = policy();
    let mutation = mutate(&to_pod(pod), namespace, &view, &policy);
    prop_assert!(mutation.allowed, "{:?}", mutation.message);
    prop_assert_eq!(mutation.pool.as_deref(), Some(pool));
    let mut mutated = pod.clone();
    let patch = mutation.patch.clone().unwrap_or_default();
    json_patch::patch(&mut mutated, &patch.0).expect("the patch applies");
    if !unconstrained(pod) {
        for field in ["nodeName", "nodeSelector"] {
            prop_assert_eq!(&mutated["spec"][field], &pod["spec"][field]);
        }
        prop_assert_eq!(
            required_affinity(&mutated["spec"]),
            required_affinity(&pod["spec"])
        );
    }

    let nodes = reference_nodes(&mutated, &view);
    let expected = !nodes.is_empty()
        && nodes
            .iter()
            .all(|node| in_pools(node, POOL, &crate::PoolSet::one(pool)));
    let after = validate(&to_pod(&mutated), namespace, &view, &policy);
    let context = format!("{pod} mutated to {mutated}: {:?}", after.message);
    prop_assert_eq!(after.allowed, expected, "{}", context);
    prop_assert!(after.allowed || !unconstrained(pod), "{}", context);
    if !after.allowed {
        let reason = if nodes.is_empty() {
            Reason::NoMatchingNode
        } else {
            Reason::OutsidePool
        };
        prop_assert_eq!(after.reason, reason, "{}", context);
    }
    let again = mutate(&to_pod(&mutated), namespace, &view, &policy);
    prop_assert!(
        again.patch.is_none(),
        "{} patched again: {:?}",
        mutated,
        again.patch
    );
    Ok(after.reason)
}

/// Every verdict comes up often enough for the agreement to mean something.
#[test]
fn a_mutated_pod_is_validated_as_the_reference_says() {
    const CASES: u32 = 1024;
    let verdicts: [(Reason, Cell<u32>); 3] = [
        (Reason::InPool, Cell::new(0)),
        (Reason::NoMatchingNode, Cell::new(0)),
        (Reason::OutsidePool, Cell::new(0)),
    ];
    let mut runner = TestRunner::new(runner_config(CASES));
    let outcome = runner.run(&random_pod(), |(namespace, pool, pod)| {
        let reason = mutate_then_validate(&namespace, &pool, &pod)?;
        let (_, count) = verdicts
            .iter()
            .find(|(verdict, _)| *verdict == reason)
            .ok_or_else(|| TestCaseError::fail(format!("validation said {reason:?}")))?;
        count.set(count.get() + 1);
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    let counts: Vec<(Reason, u32)> = verdicts.iter().map(|(r, c)| (*r, c.get())).collect();
    println!("mutated, then validated: {counts:?}");
    assert!(
        counts.iter().all(|(_, count)| *count > CASES / 20),
        "{counts:?}"
    );
}
