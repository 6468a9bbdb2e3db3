//! The indexed node-set computation agrees with a full scan.

use poolkeeper_index::{Index, IndexResource, Node};
use serde_json::{Value, json};

use super::{POOL, expr, expr_no_values, k8s_node, node, pod, required};
use crate::affinity::NodeConstraints;
use crate::candidates::{
    Reach, in_pools, matching_nodes, matching_nodes_by_scan, reach, source_for,
};
use crate::pools::PoolSet;

fn big_cluster() -> Index {
    let index = Index::new(POOL);
    for i in 0..200 {
        let mut labels: Vec<(String, String)> = vec![
            ("zone".into(), format!("z{}", i % 3)),
            ("cores".into(), (i % 16).to_string()),
        ];
        if i % 7 != 0 {
            labels.push((POOL.into(), format!("p{}", i % 4)));
        }
        if i % 5 == 0 {
            labels.push(("gpu".into(), String::new()));
        }
        if i % 11 == 0 {
            labels.push(("cores".into(), "many".into()));
        }
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        index.apply(k8s_node(&node(&format!("n-{i:03}"), &labels)));
    }
    index
}

fn names(nodes: &[&Node]) -> Vec<String> {
    nodes.iter().map(|n| n.name.to_string()).collect()
}

fn specs() -> Vec<Value> {
    let term = |exprs: Value| json!({"matchExpressions": exprs});
    vec![
        json!({}),
        json!({"nodeName": "n-001"}),
        json!({"nodeName": "n-999"}),
        json!({"nodeSelector": {"zone": "z1"}}),
        json!({"nodeSelector": {"zone": "z1", POOL: "p2"}}),
        json!({"nodeSelector": {"zone": "z9"}}),
        json!({"nodeSelector": {"gpu": ""}}),
        json!({"nodeName": "n-005", "nodeSelector": {"gpu": ""}}),
        json!({"nodeName": "n-006", "nodeSelector": {"gpu": ""}}),
        required(json!([term(json!([expr(POOL, "In", &["p1"])]))])),
        required(json!([term(json!([expr(POOL, "In", &["p1", "p3"])]))])),
        required(json!([term(json!([expr(POOL, "NotIn", &["p1"])]))])),
        required(json!([term(json!([expr_no_values(POOL, "DoesNotExist")]))])),
        required(json!([term(json!([expr_no_values("gpu", "Exists")]))])),
        required(json!([term(json!([expr("cores", "Gt", &["10"])]))])),
        required(json!([term(json!([
            expr("cores", "Lt", &["3"]),
            expr("zone", "In", &["z0"])
        ]))])),
        required(json!([
            term(json!([expr("cores", "Lt", &["3"])])),
            term(json!([expr_no_values("gpu", "Exists")]))
        ])),
        required(json!([
            term(json!([expr("zone", "NotIn", &["z0"])])),
            term(json!([expr(POOL, "In", &["p0"])]))
        ])),
        required(json!([{"matchFields": [expr("metadata.name", "In", &["n-010"])]}])),
        required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["n-010"])]}])),
        required(
            json!([{"matchFields": [expr("metadata.name", "In", &["n-010"])], "matchExpressions": [expr(POOL, "In", &["p2"])]}]),
        ),
        required(
            json!([{"matchFields": [expr("metadata.name", "In", &["n-010"])]}, term(json!([expr("zone", "In", &["z2"])]))]),
        ),
        required(json!([])),
        required(json!([{}])),
        required(json!([
            term(json!([expr("cores", "Gt", &["x"])])),
            term(json!([expr(POOL, "In", &["p3"])]))
        ])),
        {
            let mut spec = required(json!([term(json!([expr(POOL, "In", &["p1", "p2"])]))]));
            spec["nodeSelector"] = json!({"zone": "z2"});
            spec
        },
        {
            let mut spec = required(json!([term(json!([expr_no_values("gpu", "Exists")]))]));
            spec["nodeSelector"] = json!({"zone": "z0", "cores": "0"});
            spec
        },
        {
            let mut spec = required(json!([term(json!([expr_no_values(
                "gpu",
                "DoesNotExist"
            )]))]));
            spec["nodeName"] = json!("n-003");
            spec["nodeSelector"] = json!({"zone": "z0"});
            spec
        },
    ]
}

#[test]
fn indexed_equals_scan() {
    let index = big_cluster();
    let view = index.placement();
    for spec in specs() {
        let pod = pod(spec.clone());
        let constraints = NodeConstraints::from_pod(&pod);
        let indexed = matching_nodes(&view, &constraints);
        let scanned = matching_nodes_by_scan(&view, &constraints);
        assert_eq!(names(&indexed), names(&scanned), "{spec}");
    }
}

/// `reach` as its definition says: the scanned matches, split by the pools.
fn reach_by_scan(
    view: &poolkeeper_index::PlacementView<'_>,
    constraints: &NodeConstraints<'_>,
    pools: &PoolSet,
) -> String {
    let matched = matching_nodes_by_scan(view, constraints);
    let outside: Vec<&Node> = matched
        .iter()
        .copied()
        .filter(|node| !in_pools(node, POOL, pools))
        .collect();
    match (matched.is_empty(), outside.is_empty()) {
        (true, _) => "no node".to_owned(),
        (false, true) => "in pools".to_owned(),
        (false, false) => format!("outside: {}", names(&outside).join(",")),
    }
}

fn describe(reach: Reach<'_>) -> String {
    match reach {
        Reach::NoNode => "no node".to_owned(),
        Reach::InPools => "in pools".to_owned(),
        Reach::Outside(nodes) => format!("outside: {}", names(&nodes).join(",")),
    }
}

#[test]
fn reach_equals_scan_for_every_pool_set() {
    let index = big_cluster();
    let view = index.placement();
    let pool_sets = [
        vec!["p1"],
        vec!["p1", "p3"],
        vec!["p0", "p1", "p2", "p3"],
        vec!["p2"],
        vec!["p9"],
    ];
    let mut specs = specs();
    // Terms that select only nodes of some pools, with a constraint that
    // rules out all or some of them.
    let term = |exprs: Value| json!({"matchExpressions": exprs});
    specs.push(required(json!([term(json!([
        expr(POOL, "In", &["p1", "p3"]),
        expr("zone", "In", &["z9"])
    ]))])));
    specs.push(required(json!([
        term(json!([
            expr(POOL, "In", &["p1"]),
            expr("cores", "Gt", &["14"])
        ])),
        term(json!([
            expr(POOL, "In", &["p3"]),
            expr_no_values("gpu", "Exists")
        ]))
    ])));
    for spec in specs {
        let pod = pod(spec.clone());
        let constraints = NodeConstraints::from_pod(&pod);
        for pools in &pool_sets {
            let pools = PoolSet::new(pools.iter().map(|p| (*p).to_owned())).expect("pools");
            assert_eq!(
                describe(reach(&view, &constraints, &pools)),
                reach_by_scan(&view, &constraints, &pools),
                "{spec} in {pools}"
            );
        }
    }
}

/// The short cut: a source of the bound pools' label values only.
#[test]
fn a_source_of_pool_labels_is_within_those_pools_only() {
    let index = big_cluster();
    let view = index.placement();
    let term = |exprs: Value| json!({"matchExpressions": exprs});
    let cases = [
        (
            required(json!([term(json!([expr(POOL, "In", &["p1"])]))])),
            vec!["p1"],
            true,
        ),
        (
            required(json!([term(json!([expr(POOL, "In", &["p1"])]))])),
            vec!["p1", "p2"],
            true,
        ),
        (
            required(json!([term(json!([expr(POOL, "In", &["p1", "p3"])]))])),
            vec!["p1"],
            false,
        ),
        (
            required(json!([
                term(json!([expr(POOL, "In", &["p1"])])),
                term(json!([expr(POOL, "In", &["p3"])]))
            ])),
            vec!["p1", "p3"],
            true,
        ),
        (
            required(json!([
                term(json!([expr(POOL, "In", &["p1"])])),
                term(json!([expr("zone", "In", &["z1"])]))
            ])),
            vec!["p1", "p3"],
            false,
        ),
        (json!({"nodeSelector": {POOL: "p2"}}), vec!["p2"], true),
        (
            json!({"nodeSelector": {"zone": "z1"}}),
            vec!["p0", "p1", "p2", "p3"],
            false,
        ),
        (json!({"nodeName": "n-001"}), vec!["p1"], false),
        (json!({}), vec!["p1"], false),
    ];
    for (spec, pools, within) in cases {
        let pod = pod(spec.clone());
        let constraints = NodeConstraints::from_pod(&pod);
        let pools = PoolSet::new(pools.into_iter().map(str::to_owned)).expect("pools");
        assert_eq!(
            source_for(&view, &constraints).within(POOL, &pools),
            within,
            "{spec} in {pools}"
        );
    }
}

#[test]
fn results_are_sorted_and_unique() {
    let index = big_cluster();
    let view = index.placement();
    // Overlapping terms select some nodes twice.
    let pod = pod(required(json!([
        {"matchExpressions": [expr("zone", "In", &["z0", "z1"])]},
        {"matchExpressions": [expr("zone", "In", &["z1", "z2"])]}
    ])));
    let found = names(&matching_nodes(&view, &NodeConstraints::from_pod(&pod)));
    assert_eq!(found.len(), 200);
    let mut sorted = found.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(found, sorted);
}

#[test]
fn expected_sets_on_a_small_cluster() {
    let index = super::cluster();
    let view = index.placement();
    let cases = [
        (
            json!({"nodeSelector": {"zone": "a", "disk": "ssd"}}),
            vec!["bj-1", "hz-1"],
        ),
        (
            required(json!([{"matchExpressions": [expr_no_values("disk", "DoesNotExist")]}])),
            vec!["bj-2", "free-1", "free-2", "hz-2"],
        ),
        (json!({"nodeName": "free-2"}), vec!["free-2"]),
        (
            json!({}),
            vec!["bj-1", "bj-2", "free-1", "free-2", "hz-1", "hz-2", "hz-3"],
        ),
    ];
    for (spec, expected) in cases {
        let pod = pod(spec.clone());
        let found = names(&matching_nodes(&view, &NodeConstraints::from_pod(&pod)));
        assert_eq!(found, expected, "{spec}");
    }
}
