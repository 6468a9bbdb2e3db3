//! Bindings to several pools (the union of their nodes) and bindings made by
//! a Namespace's own labels, over the test cluster (see `cluster()`):
//! hangzhou (Edge) = hz-1..3; beijing (Cloud) = bj-1, bj-2; empty (Edge).

use std::collections::BTreeMap;

use poolkeeper_bus::{BindingRejection, RejectedBinding};
use poolkeeper_config::{Constraints, Mode, NamespaceLabels};
use poolkeeper_index::{IndexResource, Namespace};
use serde_json::{Value, json};

use super::{POOL, cluster, expr, pod, pools_of, required};
use crate::{BindingOrigin, PlacementPolicy, PoolSet, Reason, mutate, validate};

const SETS: &str = "
bindings:
  - {namespace: both, nodePools: [hangzhou, beijing]}
  - {namespace: cloud-only, nodePools: [beijing]}
  - {namespace: half-gone, nodePools: [beijing, gone]}
  - {namespace: all-gone, nodePools: [gone, lost]}
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
";

fn sets() -> PlacementPolicy {
    PlacementPolicy::parse(SETS).unwrap()
}

fn edge_tolerant(mut spec: Value) -> Value {
    spec["tolerations"] = json!([{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]);
    spec
}

#[test]
fn the_affinity_names_every_pool_of_the_set() {
    let index = cluster();
    let decision = mutate(&pod(json!({})), "both", &index.placement(), &sets());
    assert_eq!(decision.reason, Reason::Patched);
    assert_eq!(decision.pool.as_deref(), Some("beijing,hangzhou"));
    let patch = serde_json::to_value(decision.patch.unwrap()).unwrap();
    let affinity =
        &patch[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        affinity["nodeSelectorTerms"][0]["matchExpressions"][0],
        expr(POOL, "In", &["beijing", "hangzhou"])
    );
    // One Edge pool in the set: the edge tolerations are added.
    assert_eq!(patch[1]["path"], "/spec/tolerations");
    assert!(
        patch[2]["value"]["poolkeeper.io/placement"]
            .as_str()
            .unwrap()
            .contains("\"pool\":\"beijing,hangzhou\"")
    );
}

#[test]
fn a_set_of_cloud_pools_needs_no_tolerations() {
    let index = cluster();
    let decision = mutate(&pod(json!({})), "cloud-only", &index.placement(), &sets());
    let patch = serde_json::to_value(decision.patch.unwrap()).unwrap();
    assert_eq!(
        patch.as_array().unwrap().len(),
        2,
        "affinity and annotation: {patch}"
    );
}

#[test]
fn validation_judges_against_the_union() {
    struct Case {
        what: &'static str,
        namespace: &'static str,
        spec: Value,
        reason: Reason,
        message: &'static str,
    }
    let in_terms =
        |pools: &[&str]| required(json!([{"matchExpressions": [expr(POOL, "In", pools)]}]));
    let cases = [
        Case {
            what: "both pools",
            namespace: "both",
            spec: edge_tolerant(in_terms(&["hangzhou", "beijing"])),
            reason: Reason::InPool,
            message: "",
        },
        Case {
            what: "one pool of the set",
            namespace: "both",
            spec: edge_tolerant(in_terms(&["beijing"])),
            reason: Reason::InPool,
            message: "",
        },
        Case {
            what: "a node outside both",
            namespace: "both",
            spec: edge_tolerant(json!({"nodeName": "free-1"})),
            reason: Reason::OutsidePool,
            message: "pod is bound to node pools \"beijing\", \"hangzhou\" but 1 node outside the pools matches its nodeName",
        },
        Case {
            what: "edge tolerations for the Edge member",
            namespace: "both",
            spec: in_terms(&["beijing"]),
            reason: Reason::MissingEdgeTolerations,
            message: "to run on edge node pool \"hangzhou\"",
        },
        Case {
            what: "no node",
            namespace: "both",
            spec: edge_tolerant(json!({"nodeSelector": {"zone": "nowhere"}})),
            reason: Reason::NoMatchingNode,
            message: "node pools \"beijing\", \"hangzhou\" have 5 nodes",
        },
        Case {
            what: "a missing member: the others bind",
            namespace: "half-gone",
            spec: in_terms(&["beijing"]),
            reason: Reason::InPool,
            message: "",
        },
        Case {
            what: "every member missing",
            namespace: "all-gone",
            spec: json!({}),
            reason: Reason::PoolMissing,
            message: "",
        },
    ];
    let index = cluster();
    for case in cases {
        let decision = validate(&pod(case.spec), case.namespace, &index.placement(), &sets());
        assert_eq!(
            decision.reason, case.reason,
            "{}: {:?}",
            case.what, decision.message
        );
        let message = decision.message.unwrap_or_default();
        assert!(message.contains(case.message), "{}: {message}", case.what);
    }
}

#[test]
fn missing_members_are_warned_about() {
    let index = cluster();
    let view = index.placement();
    let half = validate(&pod(json!({})), "half-gone", &view, &sets());
    assert_eq!(
        half.warnings,
        [
            "node pool \"gone\" (bound through namespace \"half-gone\") does not exist; nodes labelled with it still count"
        ]
    );
    let all = mutate(&pod(json!({})), "all-gone", &view, &sets());
    assert_eq!(
        all.warnings,
        [
            "node pools \"gone\", \"lost\" (bound through namespace \"all-gone\") do not exist; the pod is not restricted to a node pool"
        ]
    );
    assert_eq!(all.pool.as_deref(), Some("gone,lost"));
}

#[test]
fn pool_sets_read_from_a_label_value() {
    let cases: [(&str, Option<&str>, &str); 5] = [
        ("hangzhou", Some("hangzhou"), "node pool \"hangzhou\""),
        ("b_a", Some("a,b"), "node pools \"a\", \"b\""),
        ("a__a_", Some("a"), "node pool \"a\""),
        ("_", None, ""),
        ("", None, ""),
    ];
    for (value, joined, shown) in cases {
        let set = PoolSet::from_label_value(value);
        assert_eq!(
            set.as_ref().map(PoolSet::joined).as_deref(),
            joined,
            "{value:?}"
        );
        assert_eq!(
            set.map(|s| s.to_string()).unwrap_or_default(),
            shown,
            "{value:?}"
        );
    }
}

fn labels() -> NamespaceLabels {
    NamespaceLabels::default()
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    Namespace {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

const MODE: &str = "poolkeeper.io/mode";
const CONSTRAINTS: &str = "poolkeeper.io/constraints";

#[test]
fn namespace_labels_bind() {
    let config_map = PlacementPolicy::parse(
        "bindings:\n - {namespace: central, nodePool: beijing}\n - {namespace: same, nodePool: hangzhou}\n",
    )
    .unwrap();
    let namespaces = [
        namespace("shop", &[(POOL, "hangzhou")]),
        namespace(
            "east",
            &[
                (POOL, "hangzhou_beijing"),
                (MODE, "warn"),
                (CONSTRAINTS, "narrow"),
            ],
        ),
        namespace("same", &[(POOL, "hangzhou")]),
        namespace("central", &[(POOL, "hangzhou")]),
        namespace("kube-system", &[(POOL, "hangzhou")]),
        namespace("bad-mode", &[(POOL, "hangzhou"), (MODE, "audit")]),
        namespace(
            "bad-constraints",
            &[(POOL, "hangzhou"), (CONSTRAINTS, "loose")],
        ),
        namespace("no-pool", &[(POOL, "_")]),
        namespace("unlabelled", &[("team", "a")]),
    ];
    let policy = config_map.with_namespace_labels(&namespaces, &labels());

    assert_eq!(pools_of(&policy, "shop").as_deref(), Some("hangzhou"));
    let east = policy.binding("east").unwrap();
    assert_eq!(east.pools.joined(), "beijing,hangzhou");
    assert_eq!(
        (east.mode, east.constraints),
        (Mode::Warn, Constraints::Narrow)
    );
    assert_eq!(east.origin, BindingOrigin::NamespaceLabel);
    assert_eq!(
        policy.binding("same").unwrap().origin,
        BindingOrigin::ConfigMap
    );
    assert_eq!(
        pools_of(&policy, "central").as_deref(),
        Some("beijing"),
        "the ConfigMap applies"
    );
    for unbound in [
        "kube-system",
        "bad-mode",
        "bad-constraints",
        "no-pool",
        "unlabelled",
    ] {
        assert_eq!(pools_of(&policy, unbound), None, "{unbound}");
    }

    let rejected: Vec<(&str, BindingRejection)> = policy
        .rejected_bindings()
        .iter()
        .map(|r| (r.namespace.as_str(), r.reason))
        .collect();
    assert_eq!(
        rejected,
        [
            ("central", BindingRejection::Conflict),
            ("kube-system", BindingRejection::Excluded),
            ("bad-mode", BindingRejection::Invalid),
            ("bad-constraints", BindingRejection::Invalid),
            ("no-pool", BindingRejection::Invalid),
        ]
    );
    let message = |name: &str| -> &RejectedBinding {
        policy
            .rejected_bindings()
            .iter()
            .find(|r| r.namespace == name)
            .unwrap()
    };
    assert_eq!(message("central").uid, "uid-central");
    assert_eq!(
        message("central").message,
        "namespace \"central\" is bound by the policy ConfigMap to node pool \"beijing\" (mode enforce, \
         constraints judge), which applies; its labels would bind it to node pool \"hangzhou\" (mode \
         enforce, constraints judge)"
    );
    assert_eq!(
        message("bad-mode").message,
        "label poolkeeper.io/mode=\"audit\" is not one of enforce, warn, dryrun"
    );
    assert_eq!(
        message("no-pool").message,
        "label apps.openyurt.io/nodepool=\"_\" names no node pool"
    );
}

#[test]
fn a_label_binding_places_and_records_its_source() {
    let index = cluster();
    let labelled = [namespace("shop", &[(POOL, "beijing")])];
    let policy = PlacementPolicy::default().with_namespace_labels(&labelled, &labels());
    let decision = mutate(&pod(json!({})), "shop", &index.placement(), &policy);
    assert_eq!(decision.reason, Reason::Patched);
    let patch = serde_json::to_value(decision.patch.unwrap()).unwrap();
    let record = patch[1]["value"]["poolkeeper.io/placement"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        record,
        r#"{"pool":"beijing","binding":"namespaceLabel","mode":"enforce","constraints":"judge"}"#
    );
    let denied = validate(
        &pod(json!({"nodeName": "hz-1"})),
        "shop",
        &index.placement(),
        &policy,
    );
    assert_eq!(denied.reason, Reason::OutsidePool);
}

#[test]
fn the_policy_loads_label_bindings_from_the_index() {
    let index = cluster();
    let source = super::policy_source();
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
        "metadata": {"name": "shop", "uid": "u", "labels": {POOL: "beijing"}}
    }))
    .unwrap();
    index.apply(ns);
    let loaded = PlacementPolicy::load(&index.placement(), &source).unwrap();
    assert_eq!(pools_of(&loaded, "shop").as_deref(), Some("beijing"));

    let off = crate::PolicySource {
        namespace_labels: None,
        ..source
    };
    let loaded = PlacementPolicy::load(&index.placement(), &off).unwrap();
    assert_eq!(
        pools_of(&loaded, "shop"),
        None,
        "namespaceLabels.enabled: false"
    );
}
