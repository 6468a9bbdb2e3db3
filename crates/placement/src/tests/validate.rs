//! The validating decision over the test cluster (see `cluster()`):
//! hangzhou (Edge) = hz-1, hz-2, hz-3; beijing (Cloud) = bj-1, bj-2;
//! empty (Edge) = no nodes; free-1, free-2 unpooled.

use poolkeeper_index::{IndexResource, PoolType};
use serde_json::{Value, json};

use super::{
    POOL, cluster, expr, expr_no_values, index, k8s_node, node, pod, policy, pool_node, required,
};
use crate::{Decision, PlacementPolicy, Reason, validate};

const EDGE_OK: &str = r#"[
    {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "edge.example.com/link", "operator": "Equal", "value": "flaky", "effect": "NoExecute"}
]"#;

/// `spec` plus the edge tolerations, so the node-set rules are what is tested.
fn tolerant(mut spec: Value) -> Value {
    spec["tolerations"] = serde_json::from_str(EDGE_OK).unwrap();
    spec
}

fn pool_terms(pool: &str) -> Value {
    json!([{"matchExpressions": [expr(POOL, "In", &[pool])]}])
}

fn decide(namespace: &str, spec: Value) -> Decision {
    let index = cluster();
    validate(&pod(spec), namespace, &index.placement(), &policy())
}

struct Case {
    name: &'static str,
    namespace: &'static str,
    spec: Value,
    reason: Reason,
    /// Fragments the denial message must contain.
    message: &'static [&'static str],
}

fn run(cases: Vec<Case>) {
    for c in cases {
        let decision = decide(c.namespace, c.spec.clone());
        assert_eq!(
            decision.reason, c.reason,
            "case {:?}: {:?}",
            c.name, decision.message
        );
        let allowed = matches!(
            c.reason,
            Reason::Unbound | Reason::PoolMissing | Reason::InPool
        );
        assert_eq!(decision.allowed, allowed, "case {:?}", c.name);
        assert_eq!(decision.patch, None, "validation never patches");
        let message = decision.message.clone().unwrap_or_default();
        for fragment in c.message {
            assert!(
                message.contains(fragment),
                "case {:?}: {message:?} lacks {fragment:?}",
                c.name
            );
        }
        if allowed {
            assert_eq!(decision.message, None, "case {:?}", c.name);
        }
    }
}

fn case(
    name: &'static str,
    namespace: &'static str,
    spec: Value,
    reason: Reason,
    message: &'static [&'static str],
) -> Case {
    Case {
        name,
        namespace,
        spec,
        reason,
        message,
    }
}

#[test]
fn binding_outcomes() {
    run(vec![
        case(
            "unbound namespace",
            "default",
            json!({}),
            Reason::Unbound,
            &[],
        ),
        case(
            "unbound, even if constrained elsewhere",
            "default",
            json!({"nodeName": "free-1"}),
            Reason::Unbound,
            &[],
        ),
        case(
            "missing pool",
            "shop-gone",
            json!({"nodeName": "free-1"}),
            Reason::PoolMissing,
            &[],
        ),
        case(
            "bound and pinned",
            "shop-beijing",
            required(pool_terms("beijing")),
            Reason::InPool,
            &[],
        ),
    ]);
    let warned = decide("shop-gone", json!({}));
    assert_eq!(warned.warnings.len(), 1);
    assert!(warned.warnings[0].contains("\"gone\""));
}

#[test]
fn edge_tolerations_are_required_on_edge_pools() {
    run(vec![
        case(
            "no tolerations",
            "shop-hangzhou",
            required(pool_terms("hangzhou")),
            Reason::MissingEdgeTolerations,
            &[
                "pod must tolerate {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}, \
                 {key: edge.example.com/link, operator: Equal, value: flaky, effect: NoExecute} to run on edge node pool \"hangzhou\"",
            ],
        ),
        case(
            "one of two",
            "shop-hangzhou",
            {
                let mut spec = required(pool_terms("hangzhou"));
                spec["tolerations"] =
                    json!([{"key": "node-role.kubernetes.io/edge", "operator": "Exists"}]);
                spec
            },
            Reason::MissingEdgeTolerations,
            &[
                "pod must tolerate {key: edge.example.com/link, operator: Equal, value: flaky, effect: NoExecute} to run",
            ],
        ),
        case(
            "tolerate everything",
            "shop-hangzhou",
            {
                let mut spec = required(pool_terms("hangzhou"));
                spec["tolerations"] = json!([{"operator": "Exists"}]);
                spec
            },
            Reason::InPool,
            &[],
        ),
        case(
            "both",
            "shop-hangzhou",
            tolerant(required(pool_terms("hangzhou"))),
            Reason::InPool,
            &[],
        ),
        case(
            "cloud pool needs none",
            "shop-beijing",
            required(pool_terms("beijing")),
            Reason::InPool,
            &[],
        ),
        case(
            "checked before the node sets",
            "shop-hangzhou",
            json!({"nodeName": "bj-1"}),
            Reason::MissingEdgeTolerations,
            &[],
        ),
    ]);
}

#[test]
fn node_name() {
    run(vec![
        case(
            "in the pool",
            "shop-beijing",
            json!({"nodeName": "bj-2"}),
            Reason::InPool,
            &[],
        ),
        case(
            "outside the pool",
            "shop-beijing",
            json!({"nodeName": "hz-1"}),
            Reason::OutsidePool,
            &[
                "pod is bound to node pool \"beijing\" but 1 node outside the pool matches its nodeName \"hz-1\": hz-1",
            ],
        ),
        case(
            "unpooled node",
            "shop-beijing",
            json!({"nodeName": "free-2"}),
            Reason::OutsidePool,
            &["free-2"],
        ),
        case(
            "unknown node",
            "shop-beijing",
            json!({"nodeName": "ghost"}),
            Reason::NoMatchingNode,
            &["no node matches the pod's nodeName \"ghost\"; node pool \"beijing\" has 2 nodes"],
        ),
    ]);
}

#[test]
fn node_selector() {
    run(vec![
        case(
            "pool label",
            "shop-beijing",
            json!({"nodeSelector": {POOL: "beijing"}}),
            Reason::InPool,
            &[],
        ),
        case(
            "pool label and more",
            "shop-beijing",
            json!({"nodeSelector": {POOL: "beijing", "disk": "ssd"}}),
            Reason::InPool,
            &[],
        ),
        case(
            "zone spans pools",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "a"}}),
            Reason::OutsidePool,
            &["3 nodes outside the pool match its nodeSelector: free-1, hz-1, hz-2"],
        ),
        case(
            "selects nothing",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "a", "disk": "nvme"}}),
            Reason::NoMatchingNode,
            &["no node matches the pod's nodeSelector"],
        ),
        case(
            "other pool",
            "shop-beijing",
            json!({"nodeSelector": {POOL: "hangzhou"}}),
            Reason::OutsidePool,
            &["3 nodes outside the pool match its nodeSelector: hz-1, hz-2, hz-3"],
        ),
    ]);
}

#[test]
fn required_node_affinity() {
    run(vec![
        case(
            "pool In",
            "shop-beijing",
            required(pool_terms("beijing")),
            Reason::InPool,
            &[],
        ),
        case(
            "pool In, with another pool",
            "shop-beijing",
            required(json!([{"matchExpressions": [expr(POOL, "In", &["beijing", "hangzhou"])]}])),
            Reason::OutsidePool,
            &["3 nodes outside the pool match its required node affinity: hz-1, hz-2, hz-3"],
        ),
        case(
            "terms are ORed: one term leaves the pool",
            "shop-beijing",
            required(json!([
                {"matchExpressions": [expr(POOL, "In", &["beijing"])]},
                {"matchExpressions": [expr("zone", "In", &["b"])]}
            ])),
            Reason::OutsidePool,
            &["1 node outside the pool matches its required node affinity: hz-3"],
        ),
        case(
            "terms are ORed: both inside",
            "shop-beijing",
            required(json!([
                {"matchExpressions": [expr(POOL, "In", &["beijing"]), expr("disk", "In", &["ssd"])]},
                {"matchFields": [expr("metadata.name", "In", &["bj-2"])]}
            ])),
            Reason::InPool,
            &[],
        ),
        case(
            "NotIn other pools still reaches unpooled nodes",
            "shop-beijing",
            required(json!([{"matchExpressions": [expr(POOL, "NotIn", &["hangzhou"])]}])),
            Reason::OutsidePool,
            &["2 nodes outside the pool match its required node affinity: free-1, free-2"],
        ),
        case(
            "NotIn other pools plus Exists stays inside",
            "shop-beijing",
            required(
                json!([{"matchExpressions": [expr(POOL, "NotIn", &["hangzhou", "empty"]), expr_no_values(POOL, "Exists")]}]),
            ),
            Reason::InPool,
            &[],
        ),
        case(
            "DoesNotExist selects only unpooled nodes",
            "shop-beijing",
            required(json!([{"matchExpressions": [expr_no_values(POOL, "DoesNotExist")]}])),
            Reason::OutsidePool,
            &["free-1, free-2"],
        ),
        case(
            "empty terms list matches nothing",
            "shop-beijing",
            required(json!([])),
            Reason::NoMatchingNode,
            &[
                "no node matches the pod's required node affinity (the required node affinity has no node selector term with a requirement)",
            ],
        ),
        case(
            "empty term matches nothing",
            "shop-beijing",
            required(json!([{}])),
            Reason::NoMatchingNode,
            &["no node selector term with a requirement"],
        ),
        case(
            "invalid term explains itself",
            "shop-beijing",
            required(json!([{"matchExpressions": [expr(POOL, "In", &[])]}])),
            Reason::NoMatchingNode,
            &[
                "invalid node selector terms match nothing: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values",
            ],
        ),
        case(
            "malformed Gt term is skipped, the valid term decides",
            "shop-beijing",
            required(json!([
                {"matchExpressions": [expr("cores", "Gt", &["lots"])]},
                {"matchExpressions": [expr(POOL, "In", &["beijing"])]}
            ])),
            Reason::InPool,
            &[],
        ),
    ]);
}

#[test]
fn daemonset_style_pods() {
    let daemon =
        |name: &str| required(json!([{"matchFields": [expr("metadata.name", "In", &[name])]}]));
    run(vec![
        case(
            "node in pool",
            "shop-beijing",
            daemon("bj-1"),
            Reason::InPool,
            &[],
        ),
        case(
            "node outside pool",
            "shop-beijing",
            daemon("hz-2"),
            Reason::OutsidePool,
            &["1 node outside the pool matches its required node affinity: hz-2"],
        ),
        case(
            "unknown node",
            "shop-beijing",
            daemon("ghost"),
            Reason::NoMatchingNode,
            &[],
        ),
        case(
            "name NotIn",
            "shop-beijing",
            required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["bj-1"])]}])),
            Reason::OutsidePool,
            &[
                "5 nodes outside the pool match its required node affinity: free-1, free-2, hz-1, hz-2, hz-3",
            ],
        ),
    ]);
}

#[test]
fn intersections() {
    run(vec![
        case(
            "selector wide, affinity narrows to the pool",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "a"}, "affinity": required(pool_terms("beijing"))["affinity"].clone()}),
            Reason::InPool,
            &[],
        ),
        case(
            "affinity wide, selector narrows to the pool",
            "shop-beijing",
            json!({"nodeSelector": {POOL: "beijing"}, "affinity": required(json!([{"matchExpressions": [expr_no_values("zone", "Exists")]}]))["affinity"].clone()}),
            Reason::InPool,
            &[],
        ),
        case(
            "nodeName and selector agree",
            "shop-beijing",
            json!({"nodeName": "bj-1", "nodeSelector": {"disk": "ssd"}}),
            Reason::InPool,
            &[],
        ),
        case(
            "nodeName and selector disagree",
            "shop-beijing",
            json!({"nodeName": "bj-2", "nodeSelector": {"disk": "ssd"}}),
            Reason::NoMatchingNode,
            &["no node matches the pod's nodeName \"bj-2\", nodeSelector"],
        ),
        case(
            "all three, inside",
            "shop-beijing",
            json!({"nodeName": "bj-1", "nodeSelector": {"zone": "a"}, "affinity": required(pool_terms("beijing"))["affinity"].clone()}),
            Reason::InPool,
            &[],
        ),
        case(
            "all three, affinity excludes the named node",
            "shop-beijing",
            json!({"nodeName": "hz-1", "nodeSelector": {"zone": "a"}, "affinity": required(pool_terms("beijing"))["affinity"].clone()}),
            Reason::NoMatchingNode,
            &["nodeName \"hz-1\", nodeSelector, required node affinity"],
        ),
        case(
            "all three, outside together",
            "shop-beijing",
            json!({"nodeName": "free-1", "nodeSelector": {"zone": "a"}, "affinity": required(json!([{"matchExpressions": [expr_no_values(POOL, "DoesNotExist")]}]))["affinity"].clone()}),
            Reason::OutsidePool,
            &[
                "1 node outside the pool matches its nodeName \"free-1\", nodeSelector, required node affinity: free-1",
            ],
        ),
        case(
            "selector and affinity disjoint",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "b"}, "affinity": required(pool_terms("beijing"))["affinity"].clone()}),
            Reason::NoMatchingNode,
            &[],
        ),
    ]);
}

#[test]
fn unconstrained_pods() {
    run(vec![case(
        "could land anywhere",
        "shop-beijing",
        json!({}),
        Reason::OutsidePool,
        &[
            "pod is bound to node pool \"beijing\" but has no node constraints, so it may be scheduled onto 5 nodes outside the pool: free-1, free-2, hz-1, hz-2, hz-3",
        ],
    )]);

    // Allowed when every node of the cluster is in the pool.
    let index = index(
        vec![pool_node("a", "p"), pool_node("b", "p")],
        &[("p", PoolType::Cloud)],
    );
    let policy = PlacementPolicy::parse("bindings: [{namespace: ns, nodePool: p}]").unwrap();
    let decision = validate(&pod(json!({})), "ns", &index.placement(), &policy);
    assert_eq!(decision.reason, Reason::InPool);
    assert!(decision.allowed);

    // Preferred-only node affinity and pod anti-affinity constrain nothing.
    let spec = json!({"affinity": {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [expr(POOL, "In", &["p"])]}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}
    }});
    index.apply(k8s_node(&node("stranger", &[])));
    let decision = validate(&pod(spec), "ns", &index.placement(), &policy);
    assert_eq!(decision.reason, Reason::OutsidePool);
    assert!(
        decision
            .message
            .unwrap()
            .contains("may be scheduled onto 1 node outside the pool: stranger")
    );
}

#[test]
fn pools_without_nodes() {
    run(vec![
        case(
            "pinned to an empty pool",
            "shop-empty",
            tolerant(required(pool_terms("empty"))),
            Reason::NoMatchingNode,
            &["no node matches the pod's required node affinity; node pool \"empty\" has no nodes"],
        ),
        case(
            "unconstrained, empty pool",
            "shop-empty",
            tolerant(json!({})),
            Reason::OutsidePool,
            &["7 nodes outside the pool"],
        ),
    ]);
    // No nodes in the whole cluster: nothing can match.
    let index = index(vec![], &[("p", PoolType::Cloud)]);
    let policy = PlacementPolicy::parse("bindings: [{namespace: ns, nodePool: p}]").unwrap();
    let decision = validate(&pod(json!({})), "ns", &index.placement(), &policy);
    assert_eq!(decision.reason, Reason::NoMatchingNode);
    assert!(
        decision
            .message
            .unwrap()
            .contains("node pool \"p\" has no nodes")
    );
}

#[test]
fn names_at_most_five_offenders_sorted_with_the_count() {
    let mut nodes: Vec<_> = (0..12)
        .map(|i| node(&format!("out-{i:02}"), &[("role", "worker")]))
        .collect();
    nodes.push(node("in-1", &[(POOL, "p"), ("role", "worker")]));
    let index = index(nodes, &[("p", PoolType::Cloud)]);
    let policy = PlacementPolicy::parse("bindings: [{namespace: ns, nodePool: p}]").unwrap();
    let decision = validate(
        &pod(json!({"nodeSelector": {"role": "worker"}})),
        "ns",
        &index.placement(),
        &policy,
    );
    assert_eq!(
        decision.message.as_deref(),
        Some(
            "pod is bound to node pool \"p\" but 12 nodes outside the pool match its nodeSelector: out-00, out-01, out-02, out-03, out-04 and 7 more"
        )
    );
}

#[test]
fn index_changes_are_seen() {
    let index = cluster();
    let spec = json!({"nodeSelector": {"disk": "ssd"}});
    let before = validate(
        &pod(spec.clone()),
        "shop-beijing",
        &index.placement(),
        &policy(),
    );
    assert_eq!(before.reason, Reason::OutsidePool);
    // The hangzhou ssd nodes lose their disk label.
    index.apply(k8s_node(&node(
        "hz-1",
        &[(POOL, "hangzhou"), ("zone", "a")],
    )));
    index.apply(k8s_node(&node(
        "hz-3",
        &[(POOL, "hangzhou"), ("zone", "b")],
    )));
    let after = validate(&pod(spec), "shop-beijing", &index.placement(), &policy());
    assert_eq!(after.reason, Reason::InPool, "{:?}", after.message);
}
