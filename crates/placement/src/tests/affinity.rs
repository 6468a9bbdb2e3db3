//! Node selector semantics, operator by operator.

use k8s_openapi::api::core::v1::NodeSelector;
use poolkeeper_index::Node;
use serde_json::{Value, json};

use super::{expr, expr_no_values, node, pod, required};
use crate::affinity::{
    NodeConstraints, RequiredNodeAffinity, node_selector_map_matches, node_selector_matches,
};

fn selector(terms: Value) -> NodeSelector {
    serde_json::from_value(json!({ "nodeSelectorTerms": terms })).unwrap()
}

fn one_expression(e: Value) -> NodeSelector {
    selector(json!([{ "matchExpressions": [e] }]))
}

fn one_field(e: Value) -> NodeSelector {
    selector(json!([{ "matchFields": [e] }]))
}

struct Case {
    name: &'static str,
    selector: NodeSelector,
    node: Node,
    matches: bool,
    /// The selector has an invalid term.
    invalid: bool,
}

fn case(name: &'static str, selector: NodeSelector, node: Node, matches: bool) -> Case {
    Case {
        name,
        selector,
        node,
        matches,
        invalid: false,
    }
}

fn invalid(name: &'static str, selector: NodeSelector, node: Node) -> Case {
    Case {
        name,
        selector,
        node,
        matches: false,
        invalid: true,
    }
}

fn run(cases: Vec<Case>) {
    for c in cases {
        let parsed = RequiredNodeAffinity::parse(&c.selector, "spec");
        assert_eq!(parsed.matches(&c.node), c.matches, "case {:?}", c.name);
        assert_eq!(
            node_selector_matches(&c.selector, &c.node),
            c.matches,
            "case {:?}",
            c.name
        );
        assert_eq!(
            !parsed.errors().is_empty(),
            c.invalid,
            "case {:?}: errors {:?}",
            c.name,
            parsed.errors()
        );
    }
}

#[test]
fn operator_in() {
    run(vec![
        case(
            "value listed",
            one_expression(expr("zone", "In", &["a", "b"])),
            node("n", &[("zone", "a")]),
            true,
        ),
        case(
            "second value listed",
            one_expression(expr("zone", "In", &["a", "b"])),
            node("n", &[("zone", "b")]),
            true,
        ),
        case(
            "value not listed",
            one_expression(expr("zone", "In", &["a", "b"])),
            node("n", &[("zone", "c")]),
            false,
        ),
        case(
            "label missing",
            one_expression(expr("zone", "In", &["a"])),
            node("n", &[]),
            false,
        ),
        case(
            "empty label value listed",
            one_expression(expr("zone", "In", &[""])),
            node("n", &[("zone", "")]),
            true,
        ),
        case(
            "empty label value not listed",
            one_expression(expr("zone", "In", &["a"])),
            node("n", &[("zone", "")]),
            false,
        ),
        case(
            "case sensitive",
            one_expression(expr("zone", "In", &["A"])),
            node("n", &[("zone", "a")]),
            false,
        ),
        invalid(
            "no values",
            one_expression(expr("zone", "In", &[])),
            node("n", &[("zone", "a")]),
        ),
        invalid(
            "values omitted",
            one_expression(expr_no_values("zone", "In")),
            node("n", &[("zone", "a")]),
        ),
        invalid(
            "value not a label value",
            one_expression(expr("zone", "In", &["a b"])),
            node("n", &[("zone", "a b")]),
        ),
        invalid(
            "value too long",
            one_expression(expr("zone", "In", &[&"x".repeat(64)])),
            node("n", &[("zone", &"x".repeat(64))]),
        ),
    ]);
}

#[test]
fn operator_not_in() {
    run(vec![
        case(
            "other value",
            one_expression(expr("zone", "NotIn", &["a"])),
            node("n", &[("zone", "b")]),
            true,
        ),
        case(
            "listed value",
            one_expression(expr("zone", "NotIn", &["a", "b"])),
            node("n", &[("zone", "b")]),
            false,
        ),
        case(
            "label missing matches",
            one_expression(expr("zone", "NotIn", &["a"])),
            node("n", &[]),
            true,
        ),
        invalid(
            "no values",
            one_expression(expr("zone", "NotIn", &[])),
            node("n", &[]),
        ),
    ]);
}

#[test]
fn operator_exists_and_does_not_exist() {
    run(vec![
        case(
            "exists",
            one_expression(expr_no_values("gpu", "Exists")),
            node("n", &[("gpu", "1")]),
            true,
        ),
        case(
            "exists with empty value",
            one_expression(expr_no_values("gpu", "Exists")),
            node("n", &[("gpu", "")]),
            true,
        ),
        case(
            "exists, missing",
            one_expression(expr_no_values("gpu", "Exists")),
            node("n", &[("zone", "a")]),
            false,
        ),
        case(
            "exists, empty values list",
            one_expression(expr("gpu", "Exists", &[])),
            node("n", &[("gpu", "1")]),
            true,
        ),
        invalid(
            "exists with values",
            one_expression(expr("gpu", "Exists", &["1"])),
            node("n", &[("gpu", "1")]),
        ),
        case(
            "does not exist",
            one_expression(expr_no_values("gpu", "DoesNotExist")),
            node("n", &[]),
            true,
        ),
        case(
            "does not exist, present",
            one_expression(expr_no_values("gpu", "DoesNotExist")),
            node("n", &[("gpu", "")]),
            false,
        ),
        invalid(
            "does not exist with values",
            one_expression(expr("gpu", "DoesNotExist", &["1"])),
            node("n", &[]),
        ),
    ]);
}

#[test]
fn operators_gt_and_lt() {
    run(vec![
        case(
            "gt",
            one_expression(expr("cores", "Gt", &["3"])),
            node("n", &[("cores", "4")]),
            true,
        ),
        case(
            "gt is strict",
            one_expression(expr("cores", "Gt", &["4"])),
            node("n", &[("cores", "4")]),
            false,
        ),
        case(
            "gt below",
            one_expression(expr("cores", "Gt", &["4"])),
            node("n", &[("cores", "2")]),
            false,
        ),
        case(
            "gt zero",
            one_expression(expr("cores", "Gt", &["0"])),
            node("n", &[("cores", "1")]),
            true,
        ),
        case(
            "gt leading zeros",
            one_expression(expr("cores", "Gt", &["007"])),
            node("n", &[("cores", "8")]),
            true,
        ),
        case(
            "gt, negative label value",
            one_expression(expr("cores", "Gt", &["1"])),
            node("n", &[("cores", "-5")]),
            false,
        ),
        case(
            "gt, plus-signed label value",
            one_expression(expr("cores", "Gt", &["1"])),
            node("n", &[("cores", "+5")]),
            true,
        ),
        case(
            "gt, label not an integer",
            one_expression(expr("cores", "Gt", &["1"])),
            node("n", &[("cores", "many")]),
            false,
        ),
        case(
            "gt, label a float",
            one_expression(expr("cores", "Gt", &["1"])),
            node("n", &[("cores", "2.5")]),
            false,
        ),
        case(
            "gt, label overflows int64",
            one_expression(expr("cores", "Gt", &["1"])),
            node("n", &[("cores", "99999999999999999999")]),
            false,
        ),
        case(
            "gt, label empty",
            one_expression(expr("cores", "Gt", &["1"])),
            node("n", &[("cores", "")]),
            false,
        ),
        case(
            "gt, label missing",
            one_expression(expr("cores", "Gt", &["1"])),
            node("n", &[]),
            false,
        ),
        case(
            "gt, int64 max bound",
            one_expression(expr("cores", "Gt", &["9223372036854775806"])),
            node("n", &[("cores", "9223372036854775807")]),
            true,
        ),
        case(
            "lt",
            one_expression(expr("cores", "Lt", &["3"])),
            node("n", &[("cores", "2")]),
            true,
        ),
        case(
            "lt is strict",
            one_expression(expr("cores", "Lt", &["3"])),
            node("n", &[("cores", "3")]),
            false,
        ),
        case(
            "lt, negative label value",
            one_expression(expr("cores", "Lt", &["3"])),
            node("n", &[("cores", "-3")]),
            true,
        ),
        case(
            "lt, label not an integer",
            one_expression(expr("cores", "Lt", &["3"])),
            node("n", &[("cores", "x")]),
            false,
        ),
        case(
            "lt, label missing",
            one_expression(expr("cores", "Lt", &["3"])),
            node("n", &[]),
            false,
        ),
        invalid(
            "gt, value not an integer",
            one_expression(expr("cores", "Gt", &["abc"])),
            node("n", &[("cores", "4")]),
        ),
        invalid(
            "gt, value a float",
            one_expression(expr("cores", "Gt", &["1.5"])),
            node("n", &[("cores", "4")]),
        ),
        invalid(
            "gt, value overflows int64",
            one_expression(expr("cores", "Gt", &["9223372036854775808"])),
            node("n", &[("cores", "4")]),
        ),
        // labels.NewRequirement also checks each value as a label value,
        // which cannot start with '-' or '+'.
        invalid(
            "gt, negative value",
            one_expression(expr("cores", "Gt", &["-1"])),
            node("n", &[("cores", "4")]),
        ),
        invalid(
            "lt, plus-signed value",
            one_expression(expr("cores", "Lt", &["+9"])),
            node("n", &[("cores", "4")]),
        ),
        invalid(
            "gt, two values",
            one_expression(expr("cores", "Gt", &["1", "2"])),
            node("n", &[("cores", "4")]),
        ),
        invalid(
            "gt, no values",
            one_expression(expr("cores", "Gt", &[])),
            node("n", &[("cores", "4")]),
        ),
        invalid(
            "lt, values omitted",
            one_expression(expr_no_values("cores", "Lt")),
            node("n", &[("cores", "1")]),
        ),
    ]);
}

#[test]
fn invalid_operators_and_keys() {
    run(vec![
        invalid(
            "unknown operator",
            one_expression(expr("zone", "Equals", &["a"])),
            node("n", &[("zone", "a")]),
        ),
        invalid(
            "lowercase operator",
            one_expression(expr("zone", "in", &["a"])),
            node("n", &[("zone", "a")]),
        ),
        invalid(
            "empty operator",
            one_expression(expr("zone", "", &["a"])),
            node("n", &[("zone", "a")]),
        ),
        invalid(
            "empty key",
            one_expression(expr("", "Exists", &[])),
            node("n", &[("zone", "a")]),
        ),
        invalid(
            "key with a space",
            one_expression(expr("my zone", "In", &["a"])),
            node("n", &[("my zone", "a")]),
        ),
        invalid(
            "key with two slashes",
            one_expression(expr("a/b/c", "Exists", &[])),
            node("n", &[("a/b/c", "a")]),
        ),
        invalid(
            "key with an uppercase prefix",
            one_expression(expr("Example.com/zone", "Exists", &[])),
            node("n", &[("Example.com/zone", "a")]),
        ),
        case(
            "prefixed key",
            one_expression(expr("topology.kubernetes.io/zone", "In", &["a"])),
            node("n", &[("topology.kubernetes.io/zone", "a")]),
            true,
        ),
    ]);
}

#[test]
fn match_fields() {
    let name_in = |v: &[&str]| one_field(expr("metadata.name", "In", v));
    let name_not_in = |v: &[&str]| one_field(expr("metadata.name", "NotIn", v));
    let long_name = format!("node-{}.example.com", "x".repeat(70));
    run(vec![
        case("name in", name_in(&["n1"]), node("n1", &[]), true),
        case(
            "name in, other node",
            name_in(&["n1"]),
            node("n2", &[]),
            false,
        ),
        case("name not in", name_not_in(&["n1"]), node("n2", &[]), true),
        case(
            "name not in, same node",
            name_not_in(&["n1"]),
            node("n1", &[]),
            false,
        ),
        invalid(
            "name in, two values",
            name_in(&["n1", "n2"]),
            node("n1", &[]),
        ),
        invalid("name in, no values", name_in(&[]), node("n1", &[])),
        invalid(
            "name not in, two values",
            name_not_in(&["n1", "n2"]),
            node("n3", &[]),
        ),
        invalid(
            "exists on a field",
            one_field(expr_no_values("metadata.name", "Exists")),
            node("n1", &[]),
        ),
        invalid(
            "gt on a field",
            one_field(expr("metadata.name", "Gt", &["1"])),
            node("2", &[]),
        ),
        invalid(
            "other field",
            one_field(expr("metadata.uid", "NotIn", &["x"])),
            node("n1", &[]),
        ),
        invalid(
            "label key as field",
            one_field(expr("zone", "In", &["a"])),
            node("n1", &[("zone", "a")]),
        ),
        // Field requirements are not label requirements: no label check on
        // the value, and the node's labels do not count.
        case(
            "name longer than a label value",
            name_in(&[&long_name]),
            node(&long_name, &[]),
            true,
        ),
        case(
            "label named metadata.name is ignored",
            name_in(&["x"]),
            node("n1", &[("metadata.name", "x")]),
            false,
        ),
    ]);
}

#[test]
fn terms_and_expressions() {
    let term =
        |exprs: Value, fields: Value| json!({"matchExpressions": exprs, "matchFields": fields});
    run(vec![
        case(
            "expressions are ANDed",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a"]), expr_no_values("gpu", "Exists")]}]),
            ),
            node("n", &[("zone", "a"), ("gpu", "1")]),
            true,
        ),
        case(
            "expressions are ANDed, one fails",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a"]), expr_no_values("gpu", "Exists")]}]),
            ),
            node("n", &[("zone", "a")]),
            false,
        ),
        case(
            "same key twice",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a", "b"]), expr("zone", "NotIn", &["b"])]}]),
            ),
            node("n", &[("zone", "a")]),
            true,
        ),
        case(
            "same key twice, excluded",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a", "b"]), expr("zone", "NotIn", &["b"])]}]),
            ),
            node("n", &[("zone", "b")]),
            false,
        ),
        case(
            "expressions AND fields",
            selector(json!([term(
                json!([expr("zone", "In", &["a"])]),
                json!([expr("metadata.name", "In", &["n1"])])
            )])),
            node("n1", &[("zone", "a")]),
            true,
        ),
        case(
            "expressions AND fields, label fails",
            selector(json!([term(
                json!([expr("zone", "In", &["a"])]),
                json!([expr("metadata.name", "In", &["n1"])])
            )])),
            node("n1", &[("zone", "b")]),
            false,
        ),
        case(
            "expressions AND fields, name fails",
            selector(json!([term(
                json!([expr("zone", "In", &["a"])]),
                json!([expr("metadata.name", "In", &["n1"])])
            )])),
            node("n2", &[("zone", "a")]),
            false,
        ),
        case(
            "terms are ORed, first",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a"])]}, {"matchExpressions": [expr("zone", "In", &["b"])]}]),
            ),
            node("n", &[("zone", "a")]),
            true,
        ),
        case(
            "terms are ORed, second",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a"])]}, {"matchExpressions": [expr("zone", "In", &["b"])]}]),
            ),
            node("n", &[("zone", "b")]),
            true,
        ),
        case(
            "terms are ORed, neither",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a"])]}, {"matchExpressions": [expr("zone", "In", &["b"])]}]),
            ),
            node("n", &[("zone", "c")]),
            false,
        ),
        case(
            "empty term matches nothing",
            selector(json!([{}])),
            node("n", &[]),
            false,
        ),
        case(
            "term with empty lists matches nothing",
            selector(json!([term(json!([]), json!([]))])),
            node("n", &[]),
            false,
        ),
        case(
            "term with null lists matches nothing",
            selector(json!([term(Value::Null, Value::Null)])),
            node("n", &[]),
            false,
        ),
        case(
            "no terms match nothing",
            selector(json!([])),
            node("n", &[("zone", "a")]),
            false,
        ),
        case(
            "empty term does not stop a later term",
            selector(json!([{}, {"matchExpressions": [expr("zone", "In", &["a"])]}])),
            node("n", &[("zone", "a")]),
            true,
        ),
        Case {
            name: "invalid term does not stop a later term",
            selector: selector(json!([
                {"matchExpressions": [expr("cores", "Gt", &["many"])]},
                {"matchExpressions": [expr("zone", "In", &["a"])]}
            ])),
            node: node("n", &[("zone", "a"), ("cores", "4")]),
            matches: true,
            invalid: true,
        },
        invalid(
            "one invalid expression invalidates its whole term",
            selector(
                json!([{"matchExpressions": [expr("zone", "In", &["a"]), expr("cores", "Gt", &[])]}]),
            ),
            node("n", &[("zone", "a")]),
        ),
        invalid(
            "an invalid field invalidates the term's expressions too",
            selector(json!([term(
                json!([expr("zone", "In", &["a"])]),
                json!([expr("metadata.name", "In", &[])])
            )])),
            node("n", &[("zone", "a")]),
        ),
    ]);
}

#[test]
fn errors_name_the_path() {
    let parsed = RequiredNodeAffinity::parse(
        &selector(
            json!([{}, {"matchExpressions": [expr("zone", "In", &["a"]), expr("cores", "Gt", &["x"])]}]),
        ),
        "spec.affinity",
    );
    assert!(parsed.matches_nothing());
    assert_eq!(
        parsed.errors(),
        [
            "spec.affinity.nodeSelectorTerms[1].matchExpressions[1].values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
        ]
    );
}

#[test]
fn node_selector_map_needs_every_pair() {
    let selector = [
        ("zone".to_owned(), "a".to_owned()),
        ("disk".to_owned(), "ssd".to_owned()),
    ]
    .into();
    assert!(node_selector_map_matches(
        &selector,
        &node("n", &[("zone", "a"), ("disk", "ssd"), ("x", "y")])
    ));
    assert!(!node_selector_map_matches(
        &selector,
        &node("n", &[("zone", "a")])
    ));
    assert!(!node_selector_map_matches(
        &selector,
        &node("n", &[("zone", "a"), ("disk", "hdd")])
    ));
    let empty_value = [("zone".to_owned(), String::new())].into();
    assert!(node_selector_map_matches(
        &empty_value,
        &node("n", &[("zone", "")])
    ));
    assert!(!node_selector_map_matches(&empty_value, &node("n", &[])));
}

#[test]
fn constraints_from_pods() {
    let none = pod(json!({}));
    assert!(NodeConstraints::from_pod(&none).is_unconstrained());

    let empties = pod(json!({"nodeName": "", "nodeSelector": {}}));
    assert!(NodeConstraints::from_pod(&empties).is_unconstrained());

    let preferred_only = pod(
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", &["a"])]}}
        ]}}}),
    );
    assert!(NodeConstraints::from_pod(&preferred_only).is_unconstrained());

    let anti_affinity_only = pod(
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}
        ]}}}),
    );
    assert!(NodeConstraints::from_pod(&anti_affinity_only).is_unconstrained());

    let empty_terms = pod(required(json!([])));
    let constraints = NodeConstraints::from_pod(&empty_terms);
    assert!(!constraints.is_unconstrained());
    assert!(!constraints.matches(&node("n", &[])));

    let all = pod(json!({
        "nodeName": "n1",
        "nodeSelector": {"zone": "a"},
        "affinity": required(json!([{"matchExpressions": [expr_no_values("gpu", "Exists")]}]))["affinity"].clone()
    }));
    let constraints = NodeConstraints::from_pod(&all);
    assert_eq!(
        constraints.describe(),
        "nodeName \"n1\", nodeSelector, required node affinity"
    );
    assert!(constraints.matches(&node("n1", &[("zone", "a"), ("gpu", "1")])));
    assert!(!constraints.matches(&node("n2", &[("zone", "a"), ("gpu", "1")])));
    assert!(!constraints.matches(&node("n1", &[("zone", "b"), ("gpu", "1")])));
    assert!(!constraints.matches(&node("n1", &[("zone", "a")])));

    let no_spec: crate::PodPlacement =
        serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(no_spec.spec, None);
    assert!(NodeConstraints::from_pod(&no_spec).is_unconstrained());
}
