//! The mutating decision, checked by applying its patch to the Pod.

use json_patch::Patch;
use poolkeeper_index::{Index, IndexResource, PoolType};
use serde_json::{Value, json};

use super::{
    POOL, cluster, expr, index, k8s_node, k8s_node_pool, labelled_pod, pod_json, policy, pool_node,
    required, to_pod,
};
use crate::{PlacementPolicy, Reason, mutate, validate};

const EDGE_TOLERATIONS: &str = r#"[
    {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "edge.example.com/link", "operator": "Equal", "value": "flaky", "effect": "NoExecute"}
]"#;

fn edge_tolerations() -> Value {
    serde_json::from_str(EDGE_TOLERATIONS).unwrap()
}

fn pool_affinity(pool: &str) -> Value {
    json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL, "operator": "In", "values": [pool]}]}
    ]}})
}

/// Runs mutate on `pod` in `namespace`, applies the patch, and returns the
/// decision, the patched Pod JSON and the patch as JSON. A patch ends with
/// the operation recording the decision in the placement annotation, which
/// is checked here and left out of the returned patch and Pod.
fn run(
    index: &Index,
    policy: &PlacementPolicy,
    namespace: &str,
    pod: &Value,
) -> (crate::Decision, Value, Value) {
    let decision = mutate(&to_pod(pod), namespace, &index.placement(), policy);
    let mut patched = pod.clone();
    let patch = decision.patch.clone().unwrap_or_default();
    json_patch::patch(&mut patched, &patch.0).expect("the patch applies to the pod");
    let mut patch = serde_json::to_value(&patch).unwrap();
    if let Some(ops) = patch.as_array_mut().filter(|ops| !ops.is_empty()) {
        let recorded = ops.pop().unwrap();
        let annotation = annotation_of(&patched);
        assert_eq!(
            annotation["pool"],
            decision.pool.as_deref().unwrap(),
            "{recorded}"
        );
        assert_eq!(annotation["mode"], decision.mode.as_str(), "{recorded}");
        strip_annotation(&mut patched, pod);
    }
    (decision, patched, patch)
}

/// The decision the placement annotation of a patched Pod records.
pub(super) fn annotation_of(patched: &Value) -> Value {
    let text = patched["metadata"]["annotations"][crate::pod::PLACEMENT_ANNOTATION]
        .as_str()
        .unwrap_or_else(|| panic!("no placement annotation on {patched}"));
    serde_json::from_str(text).unwrap()
}

/// `patched` with the placement annotation removed as `original` had it.
fn strip_annotation(patched: &mut Value, original: &Value) {
    let annotations = &mut patched["metadata"]["annotations"];
    annotations
        .as_object_mut()
        .unwrap()
        .remove(crate::pod::PLACEMENT_ANNOTATION);
    if original["metadata"].get("annotations").is_none() {
        patched["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
    }
}

/// Mutating the patched Pod again changes nothing.
fn assert_idempotent(index: &Index, policy: &PlacementPolicy, namespace: &str, patched: &Value) {
    let again = mutate(&to_pod(patched), namespace, &index.placement(), policy);
    assert!(again.allowed);
    assert_eq!(
        again.patch, None,
        "second mutation of {patched} must add nothing"
    );
    assert!(
        matches!(again.reason, Reason::Unchanged),
        "{:?}",
        again.reason
    );
}

#[test]
fn unbound_pods_are_left_alone() {
    let index = cluster();
    let pod = pod_json(json!({"app": "x"}), json!({}));
    let (decision, patched, _) = run(&index, &policy(), "default", &pod);
    assert!(decision.allowed);
    assert_eq!(decision.reason, Reason::Unbound);
    assert_eq!(decision.patch, None);
    assert!(decision.warnings.is_empty());
    assert_eq!(decision.pool, None);
    assert_eq!(patched, pod);
}

#[test]
fn missing_pool_is_allowed_with_a_warning() {
    let index = cluster();
    let pod = pod_json(json!({}), json!({}));
    let (decision, patched, _) = run(&index, &policy(), "shop-gone", &pod);
    assert!(decision.allowed);
    assert_eq!(decision.reason, Reason::PoolMissing);
    assert_eq!(decision.patch, None);
    assert_eq!(patched, pod);
    assert_eq!(
        decision.warnings,
        [
            "node pool \"gone\" (bound through namespace \"shop-gone\") does not exist; the pod is not restricted to a node pool"
        ]
    );

    let labelled = pod_json(json!({POOL: "nowhere"}), json!({}));
    let (decision, _, _) = run(&index, &policy(), "default", &labelled);
    assert_eq!(decision.reason, Reason::PoolMissing);
    assert!(
        decision.warnings[0].contains("bound by its label apps.openyurt.io/nodepool=nowhere"),
        "{:?}",
        decision.warnings
    );
}

#[test]
fn plain_pod_gets_affinity_and_edge_tolerations() {
    let index = cluster();
    let pod = pod_json(json!({}), json!({}));
    let (decision, patched, patch) = run(&index, &policy(), "shop-hangzhou", &pod);
    assert!(decision.allowed);
    assert_eq!(decision.reason, Reason::Patched);
    assert!(decision.is_patched());
    assert_eq!(decision.pool.as_deref(), Some("hangzhou"));
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": pool_affinity("hangzhou")}},
            {"op": "add", "path": "/spec/tolerations", "value": edge_tolerations()}
        ])
    );
    let mut expected = pod.clone();
    expected["spec"]["affinity"] = json!({"nodeAffinity": pool_affinity("hangzhou")});
    expected["spec"]["tolerations"] = edge_tolerations();
    assert_eq!(patched, expected);
    assert_idempotent(&index, &policy(), "shop-hangzhou", &patched);

    let after = validate(
        &to_pod(&patched),
        "shop-hangzhou",
        &index.placement(),
        &policy(),
    );
    assert!(after.allowed, "{:?}", after.message);
}

#[test]
fn cloud_pool_gets_affinity_only() {
    let index = cluster();
    let pod = pod_json(json!({}), json!({}));
    let (decision, patched, patch) = run(&index, &policy(), "shop-beijing", &pod);
    assert_eq!(decision.reason, Reason::Patched);
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": pool_affinity("beijing")}}])
    );
    assert_idempotent(&index, &policy(), "shop-beijing", &patched);
}

#[test]
fn pod_anti_affinity_is_preserved() {
    let index = cluster();
    let anti = json!({"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
    ]});
    let affinity = json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "db"}}}}
    ]}});
    let pod = pod_json(
        json!({}),
        json!({"affinity": {"podAntiAffinity": anti.clone()}}),
    );
    let (decision, patched, patch) = run(&index, &policy(), "shop-beijing", &pod);
    assert_eq!(decision.reason, Reason::Patched);
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": pool_affinity("beijing")}])
    );
    assert_eq!(
        patched["spec"]["affinity"],
        json!({"podAntiAffinity": anti, "nodeAffinity": pool_affinity("beijing")})
    );
    assert_idempotent(&index, &policy(), "shop-beijing", &patched);

    let pod = pod_json(json!({}), json!({"affinity": affinity.clone()}));
    let (_, patched, _) = run(&index, &policy(), "shop-beijing", &pod);
    assert_eq!(
        patched["spec"]["affinity"]["podAffinity"],
        affinity["podAffinity"]
    );
    assert_eq!(
        patched["spec"]["affinity"]["nodeAffinity"],
        pool_affinity("beijing")
    );
}

#[test]
fn preferred_node_affinity_gets_the_required_part() {
    let index = cluster();
    let preferred =
        json!([{"weight": 5, "preference": {"matchExpressions": [expr("disk", "In", &["ssd"])]}}]);
    let pod = pod_json(
        json!({}),
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred.clone()}}}),
    );
    let (_, patched, patch) = run(&index, &policy(), "shop-beijing", &pod);
    assert_eq!(
        patch,
        json!([{
            "op": "add",
            "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
            "value": pool_affinity("beijing")["requiredDuringSchedulingIgnoredDuringExecution"]
        }])
    );
    assert_eq!(
        patched["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"],
        preferred
    );
    assert_idempotent(&index, &policy(), "shop-beijing", &patched);
}

#[test]
fn explicit_nulls_and_empty_objects() {
    let index = cluster();
    let cases = [
        (json!({"affinity": null}), "/spec/affinity"),
        (json!({"affinity": {}}), "/spec/affinity/nodeAffinity"),
        (
            json!({"affinity": {"nodeAffinity": null}}),
            "/spec/affinity/nodeAffinity",
        ),
        (
            json!({"affinity": {"nodeAffinity": {}}}),
            "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
        ),
        (
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": null}}}),
            "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
        ),
        (json!({"nodeSelector": {}}), "/spec/affinity"),
        (
            json!({"nodeSelector": null, "nodeName": ""}),
            "/spec/affinity",
        ),
    ];
    for (spec, path) in cases {
        let pod = pod_json(json!({}), spec.clone());
        let (decision, patched, patch) = run(&index, &policy(), "shop-beijing", &pod);
        assert_eq!(decision.reason, Reason::Patched, "{spec}");
        assert_eq!(patch[0]["path"], path, "{spec}");
        assert_eq!(
            patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            pool_affinity("beijing")["requiredDuringSchedulingIgnoredDuringExecution"],
            "{spec}"
        );
        assert_idempotent(&index, &policy(), "shop-beijing", &patched);
    }
}

#[test]
fn constrained_pods_keep_their_constraints() {
    let index = cluster();
    let cases = [
        ("nodeName", json!({"nodeName": "bj-1"})),
        ("nodeSelector", json!({"nodeSelector": {"zone": "a"}})),
        (
            "required affinity",
            required(json!([{"matchExpressions": [expr("zone", "In", &["a"])]}])),
        ),
        ("required affinity, empty terms", required(json!([]))),
        (
            "daemonset-style",
            required(json!([{"matchFields": [expr("metadata.name", "In", &["bj-1"])]}])),
        ),
    ];
    for (name, spec) in cases {
        let pod = pod_json(json!({}), spec);
        let (decision, patched, _) = run(&index, &policy(), "shop-beijing", &pod);
        assert!(decision.allowed, "{name}");
        assert_eq!(decision.reason, Reason::Unchanged, "{name}");
        assert_eq!(decision.patch, None, "{name}");
        assert_eq!(patched, pod, "{name}");
    }
}

#[test]
fn constrained_pods_on_edge_get_tolerations_only() {
    let index = cluster();
    let pod = pod_json(json!({}), json!({"nodeSelector": {"zone": "a"}}));
    let (decision, patched, patch) = run(&index, &policy(), "shop-hangzhou", &pod);
    assert_eq!(decision.reason, Reason::Patched);
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/tolerations", "value": edge_tolerations()}])
    );
    assert!(patched["spec"].get("affinity").is_none());
    assert_idempotent(&index, &policy(), "shop-hangzhou", &patched);
}

#[test]
fn tolerations_are_appended_when_some_exist() {
    let index = cluster();
    let existing = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
    let pod = pod_json(json!({}), json!({"tolerations": [existing.clone()]}));
    let (_, patched, patch) = run(&index, &policy(), "shop-hangzhou", &pod);
    let expected = edge_tolerations();
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": pool_affinity("hangzhou")}},
            {"op": "add", "path": "/spec/tolerations/-", "value": expected[0]},
            {"op": "add", "path": "/spec/tolerations/-", "value": expected[1]}
        ])
    );
    assert_eq!(
        patched["spec"]["tolerations"],
        json!([existing, expected[0], expected[1]])
    );
    assert_idempotent(&index, &policy(), "shop-hangzhou", &patched);

    // An empty list is appended to, not replaced.
    let pod = pod_json(json!({}), json!({"tolerations": []}));
    let (_, patched, patch) = run(&index, &policy(), "shop-hangzhou", &pod);
    assert_eq!(patch[1]["path"], "/spec/tolerations/-");
    assert_eq!(patched["spec"]["tolerations"], edge_tolerations());

    // An explicit null is replaced.
    let pod = pod_json(json!({}), json!({"tolerations": null}));
    let (_, patched, patch) = run(&index, &policy(), "shop-hangzhou", &pod);
    assert_eq!(patch[1]["path"], "/spec/tolerations");
    assert_eq!(patched["spec"]["tolerations"], edge_tolerations());
}

#[test]
fn only_missing_tolerations_are_added() {
    let index = cluster();
    let cases = [
        // (pod tolerations, how many edge tolerations get added)
        (
            json!([{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]),
            1,
        ),
        (
            json!([{"key": "node-role.kubernetes.io/edge", "operator": "Exists"}]),
            1,
        ),
        (
            json!([{"key": "edge.example.com/link", "operator": "Exists"}]),
            1,
        ),
        (
            json!([{"key": "edge.example.com/link", "value": "flaky"}]),
            1,
        ),
        (
            json!([{"key": "edge.example.com/link", "value": "stable"}]),
            2,
        ),
        (
            json!([{"key": "node-role.kubernetes.io/edge", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]),
            2,
        ),
        (json!([{"operator": "Exists"}]), 0),
        (json!([{"operator": "Exists", "effect": "NoSchedule"}]), 1),
        (
            json!([
                {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "edge.example.com/link", "operator": "Equal", "value": "flaky", "effect": "NoExecute"}
            ]),
            0,
        ),
    ];
    for (tolerations, added) in cases {
        let pod = pod_json(
            json!({}),
            json!({"nodeName": "hz-1", "tolerations": tolerations.clone()}),
        );
        let (decision, patched, patch) = run(&index, &policy(), "shop-hangzhou", &pod);
        let ops = patch.as_array().unwrap();
        assert_eq!(ops.len(), added, "{tolerations}: {patch}");
        if added == 0 {
            assert_eq!(decision.reason, Reason::Unchanged);
        }
        assert_idempotent(&index, &policy(), "shop-hangzhou", &patched);
    }
}

#[test]
fn redundant_policy_tolerations_are_added_once() {
    let index = cluster();
    let policy = PlacementPolicy::parse(
        "bindings: [{namespace: ns, nodePool: hangzhou}]\nedgeTolerations:\n - {key: e, operator: Exists}\n - {key: e, operator: Exists, effect: NoSchedule}\n",
    )
    .unwrap();
    let pod = pod_json(json!({}), json!({"nodeName": "hz-1"}));
    let (_, patched, patch) = run(&index, &policy, "ns", &pod);
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/tolerations", "value": [{"key": "e", "operator": "Exists"}]}])
    );
    assert_idempotent(&index, &policy, "ns", &patched);
}

#[test]
fn edge_pool_without_configured_tolerations() {
    let index = cluster();
    let policy = PlacementPolicy::parse("bindings: [{namespace: ns, nodePool: hangzhou}]").unwrap();
    let pod = pod_json(json!({}), json!({}));
    let (_, _, patch) = run(&index, &policy, "ns", &pod);
    assert_eq!(patch.as_array().unwrap().len(), 1, "affinity only: {patch}");
}

#[test]
fn pool_without_nodes_still_gets_affinity() {
    // Mutation pins the Pod; validation then refuses it with a clear message.
    let index = cluster();
    let pod = pod_json(json!({}), json!({}));
    let (decision, patched, _) = run(&index, &policy(), "shop-empty", &pod);
    assert_eq!(decision.reason, Reason::Patched);
    let after = validate(
        &to_pod(&patched),
        "shop-empty",
        &index.placement(),
        &policy(),
    );
    assert!(!after.allowed);
    assert_eq!(after.reason, Reason::NoMatchingNode);
    assert!(
        after
            .message
            .unwrap()
            .contains("node pool \"empty\" has no nodes")
    );
}

#[test]
fn pod_without_spec_is_left_alone() {
    let index = cluster();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let (decision, _, _) = run(&index, &policy(), "shop-hangzhou", &pod);
    assert!(decision.allowed);
    assert_eq!(decision.reason, Reason::Unchanged);
    assert_eq!(decision.patch, None);
}

#[test]
fn custom_pool_label() {
    let label = "example.com/pool";
    let index = Index::new(label);
    index.apply(k8s_node(&super::node("n1", &[(label, "p")])));
    index.apply(k8s_node_pool("p", PoolType::Cloud));
    let pod = labelled_pod(json!({label: "p"}), json!({}));
    let decision = mutate(
        &pod,
        "default",
        &index.placement(),
        &PlacementPolicy::default(),
    );
    let patch: Patch = decision.patch.unwrap();
    assert_eq!(
        serde_json::to_value(&patch).unwrap()[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0],
        json!({"key": label, "operator": "In", "values": ["p"]})
    );
    // The default label means nothing under a custom one.
    let pod = labelled_pod(json!({POOL: "p"}), json!({}));
    let decision = mutate(
        &pod,
        "default",
        &index.placement(),
        &PlacementPolicy::default(),
    );
    assert_eq!(decision.reason, Reason::Unbound);
}

#[test]
fn many_pods_round_trip() {
    // Mutate then validate: every pod the mutation pins is admitted, and a
    // second mutation adds nothing.
    let index = index(
        (0..20)
            .map(|i| {
                pool_node(
                    &format!("p-{i:02}"),
                    if i % 2 == 0 { "even" } else { "odd" },
                )
            })
            .collect(),
        &[("even", PoolType::Edge), ("odd", PoolType::Cloud)],
    );
    let policy = PlacementPolicy::parse(
        "bindings: [{namespace: e, nodePool: even}, {namespace: o, nodePool: odd}]\nedgeTolerations: [{key: edge, operator: Exists}]\n",
    )
    .unwrap();
    let specs = [
        json!({}),
        json!({"affinity": {"podAntiAffinity": {}}}),
        json!({"tolerations": [{"key": "x", "operator": "Exists"}]}),
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}),
    ];
    for namespace in ["e", "o"] {
        for spec in &specs {
            let pod = pod_json(json!({}), spec.clone());
            let (decision, patched, _) = run(&index, &policy, namespace, &pod);
            assert_eq!(decision.reason, Reason::Patched);
            assert_idempotent(&index, &policy, namespace, &patched);
            let verdict = validate(&to_pod(&patched), namespace, &index.placement(), &policy);
            assert!(verdict.allowed, "{namespace} {spec}: {:?}", verdict.message);
        }
    }
}
