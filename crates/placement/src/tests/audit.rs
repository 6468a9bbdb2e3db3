//! The audit's decision for Pods that already exist, over the test cluster
//! (see `cluster()`): hangzhou (Edge) = hz-1..3, beijing (Cloud) = bj-1..2,
//! free-1, free-2 unpooled.

use serde_json::{Value, json};

use super::{POOL, cluster, expr, pod_json, policy, to_pod};
use crate::{Mode, PlacementPolicy, PodPlacement, Reason, audit, validate};

fn in_namespace(namespace: &str, labels: Value, spec: Value) -> PodPlacement {
    let mut value = pod_json(labels, spec);
    value["metadata"]["namespace"] = json!(namespace);
    to_pod(&value)
}

struct Case {
    name: &'static str,
    namespace: &'static str,
    labels: Value,
    spec: Value,
    reason: Reason,
    violation: bool,
    message: &'static str,
}

fn run(cases: &[Case], policy: &PlacementPolicy) {
    let index = cluster();
    for c in cases {
        let pod = in_namespace(c.namespace, c.labels.clone(), c.spec.clone());
        let decision = audit(&pod, &index.placement(), policy);
        assert_eq!(decision.reason, c.reason, "{}: {decision:?}", c.name);
        assert_eq!(!decision.allowed, c.violation, "{}", c.name);
        assert_eq!(decision.patch, None, "{}", c.name);
        let message = decision.message.clone().unwrap_or_default();
        assert!(
            message.contains(c.message),
            "{}: {message:?} lacks {:?}",
            c.name,
            c.message
        );
    }
}

fn scheduled(node: &str) -> Value {
    json!({"nodeName": node})
}

#[test]
fn scheduled_pods_are_judged_by_their_node() {
    let cases = [
        Case {
            name: "on a node of its pool",
            namespace: "shop-beijing",
            labels: json!({}),
            spec: scheduled("bj-1"),
            reason: Reason::InPool,
            violation: false,
            message: "",
        },
        Case {
            name: "on an edge node of its pool, without the edge tolerations",
            namespace: "shop-hangzhou",
            labels: json!({}),
            spec: scheduled("hz-2"),
            reason: Reason::InPool,
            violation: false,
            message: "",
        },
        Case {
            name: "on a node of another pool",
            namespace: "shop-beijing",
            labels: json!({}),
            spec: scheduled("hz-1"),
            reason: Reason::OutsidePool,
            violation: true,
            message: "pod is bound to node pool \"beijing\" but runs on node \"hz-1\", which is in node pool \"hangzhou\"",
        },
        Case {
            name: "on a node of no pool",
            namespace: "shop-hangzhou",
            labels: json!({}),
            spec: scheduled("free-2"),
            reason: Reason::OutsidePool,
            violation: true,
            message: "runs on node \"free-2\", which is in no node pool",
        },
        Case {
            name: "on a node the index does not know",
            namespace: "shop-beijing",
            labels: json!({}),
            spec: scheduled("gone-node"),
            reason: Reason::NodeUnknown,
            violation: false,
            message: "",
        },
        Case {
            name: "bound by its label, elsewhere",
            namespace: "default",
            labels: json!({(POOL): "hangzhou"}),
            spec: scheduled("bj-2"),
            reason: Reason::OutsidePool,
            violation: true,
            message: "bound to node pool \"hangzhou\"",
        },
        Case {
            name: "scheduled with a selector that reaches outside: only the node counts",
            namespace: "shop-beijing",
            labels: json!({}),
            spec: json!({"nodeName": "bj-2", "nodeSelector": {"zone": "a"}}),
            reason: Reason::InPool,
            violation: false,
            message: "",
        },
    ];
    run(&cases, &policy());
}

#[test]
fn pending_pods_get_the_validating_rules() {
    let pool_terms = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr(POOL, "In", &["beijing"])]}]}}}});
    let specs = [
        ("pinned to its pool", "shop-beijing", pool_terms),
        (
            "reaching outside",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "a"}}),
        ),
        ("unconstrained", "shop-beijing", json!({})),
        (
            "matching nothing",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "x"}}),
        ),
        ("edge, untolerated", "shop-hangzhou", json!({})),
        ("unbound", "default", json!({"nodeSelector": {"zone": "a"}})),
        ("pool missing", "shop-gone", json!({})),
    ];
    let index = cluster();
    let policy = policy();
    for (name, namespace, spec) in specs {
        let pod = in_namespace(namespace, json!({}), spec);
        let audited = audit(&pod, &index.placement(), &policy);
        let validated = validate(&pod, namespace, &index.placement(), &policy);
        assert_eq!(
            audited, validated,
            "{name}: a pending Pod is judged as on admission"
        );
    }
}

#[test]
fn the_mode_is_reported_but_never_applied() {
    let policy = PlacementPolicy::parse(
        "bindings:\n  - {namespace: shop-beijing, nodePool: beijing, mode: dryrun}\n",
    )
    .unwrap();
    let index = cluster();
    for spec in [scheduled("hz-1"), json!({"nodeSelector": {"zone": "a"}})] {
        let pod = in_namespace("shop-beijing", json!({}), spec);
        let decision = audit(&pod, &index.placement(), &policy);
        assert_eq!(decision.mode, Mode::Dryrun);
        assert!(
            !decision.allowed,
            "a violation in dryrun is still a violation"
        );
        assert_eq!(decision.reason, Reason::OutsidePool);
        assert!(decision.message.is_some());
        assert_eq!(decision.withheld_denial, None);
    }
}

#[test]
fn the_namespace_is_the_pods_own() {
    let index = cluster();
    let pod = in_namespace("shop-beijing", json!({}), scheduled("hz-1"));
    assert_eq!(
        audit(&pod, &index.placement(), &policy()).reason,
        Reason::OutsidePool
    );
    let elsewhere = in_namespace("default", json!({}), scheduled("hz-1"));
    assert_eq!(
        audit(&elsewhere, &index.placement(), &policy()).reason,
        Reason::Unbound
    );
}
