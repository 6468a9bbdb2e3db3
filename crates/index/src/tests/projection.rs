//! The conversions from Kubernetes objects to projections: what is kept,
//! what is dropped, and what counts as a change.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use poolkeeper_api as api;
use serde_json::{Value, json};

use crate::{
    Index, IndexResource, Machine, MachineClass, Node, NodePool, NodeSummary, ObjectKey, PoolType,
    Taint, object_key,
};

use super::{POOL, parse};

fn node_from(value: Value) -> Node {
    Node::from(NodeSummary::from(parse::<core::Node>(value)))
}

#[test]
fn node_readiness_from_ready_condition() {
    let cases = [
        ("no status", json!({}), false),
        ("no conditions", json!({"conditions": []}), false),
        (
            "ready true",
            json!({"conditions": [{"type": "Ready", "status": "True"}]}),
            true,
        ),
        (
            "ready false",
            json!({"conditions": [{"type": "Ready", "status": "False"}]}),
            false,
        ),
        (
            "ready unknown",
            json!({"conditions": [{"type": "Ready", "status": "Unknown"}]}),
            false,
        ),
        (
            "other conditions only",
            json!({"conditions": [{"type": "MemoryPressure", "status": "True"}]}),
            false,
        ),
        (
            "ready among others",
            json!({"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"}
            ]}),
            true,
        ),
    ];
    for (what, status, ready) in cases {
        let n = node_from(json!({"metadata": {"name": "n1"}, "status": status}));
        assert_eq!(n.ready, ready, "{what}");
    }
}

#[test]
fn node_labels_and_taints() {
    let n = node_from(json!({
        "metadata": {"name": "n1", "labels": {"apps.openyurt.io/nodepool": "hangzhou", "zone": "a"},
                     "resourceVersion": "7", "annotations": {"dropped": "yes"}},
        "spec": {"taints": [
            {"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"},
            {"key": "empty", "value": "", "effect": "PreferNoSchedule"}
        ]}
    }));
    assert_eq!(n.name, "n1");
    assert_eq!(
        n.labels,
        BTreeMap::from([
            (
                "apps.openyurt.io/nodepool".to_owned(),
                "hangzhou".to_owned()
            ),
            ("zone".to_owned(), "a".to_owned()),
        ])
    );
    assert_eq!(
        n.taints,
        vec![
            Taint {
                key: "node-role.kubernetes.io/edge".into(),
                value: None,
                effect: "NoSchedule".into()
            },
            Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoExecute".into()
            },
            Taint {
                key: "empty".into(),
                value: None,
                effect: "PreferNoSchedule".into()
            },
        ]
    );
    let bare = node_from(json!({"metadata": {"name": "n2"}}));
    assert!(bare.labels.is_empty() && bare.taints.is_empty() && !bare.ready);
}

#[test]
fn node_heartbeat_gives_an_equal_projection() {
    let at = |time: &str| {
        node_from(json!({
            "metadata": {"name": "n1", "resourceVersion": time},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": time}]}
        }))
    };
    assert_eq!(at("2024-01-01T00:00:00Z"), at("2024-01-01T00:00:40Z"));
}

#[test]
fn machine_class_name_and_deletion() {
    let cases = [
        (
            json!({"class": {"kind": "MachineClass", "name": "c1"}}),
            None,
            "c1",
            false,
        ),
        (json!({}), None, "", false),
        (
            json!({"class": {"name": "c2"}}),
            Some("2024-01-01T00:00:00Z"),
            "c2",
            true,
        ),
    ];
    for (spec, deleted_at, class_name, deleting) in cases {
        let m: api::Machine = parse(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "ns", "deletionTimestamp": deleted_at},
            "spec": spec,
        }));
        let projection = Machine::from(&m);
        assert_eq!(projection.key, ObjectKey::namespaced("ns", "m1"));
        assert_eq!(projection.class_name, class_name);
        assert_eq!(projection.deleting, deleting);
    }
}

fn class_from(value: Value) -> api::MachineClass {
    parse(value)
}

fn spec_hash(value: Value) -> u64 {
    MachineClass::from(&class_from(value)).spec_hash
}

fn base_class() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "1"},
        "provider": "AWS",
        "providerSpec": {"ami": "ami-1", "tags": {"a": "1", "b": "2"}},
        "secretRef": {"name": "s", "namespace": "ns"}
    })
}

#[test]
fn machine_class_projection() {
    let class = class_from(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9",
                     "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
                     "deletionTimestamp": "2024-01-01T00:00:00Z"},
        "providerSpec": {}
    }));
    let projection = MachineClass::from(&class);
    assert_eq!(projection.key, ObjectKey::namespaced("ns", "c1"));
    assert_eq!(
        projection.finalizers,
        ["machine.sapcloud.io/machine-controller-manager"]
    );
    assert!(projection.deleting);
    assert_eq!(projection.resource_version, "9");
}

#[test]
fn spec_hash_ignores_metadata_and_status() {
    let base = spec_hash(base_class());
    let mut cases: Vec<(&str, Value, bool)> = Vec::new();
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v = base_class();
        f(&mut v);
        v
    };
    cases.push((
        "finalizer and resourceVersion",
        edit(&|v| {
            v["metadata"]["finalizers"] = json!(["x"]);
            v["metadata"]["resourceVersion"] = json!("2");
        }),
        false,
    ));
    cases.push((
        "labels and annotations",
        edit(&|v| v["metadata"]["labels"] = json!({"a": "b"})),
        false,
    ));
    cases.push(("status", edit(&|v| v["status"] = json!({"x": 1})), false));
    cases.push((
        "key order inside providerSpec",
        edit(&|v| v["providerSpec"] = json!({"tags": {"b": "2", "a": "1"}, "ami": "ami-1"})),
        false,
    ));
    cases.push((
        "providerSpec value",
        edit(&|v| v["providerSpec"]["ami"] = json!("ami-2")),
        true,
    ));
    cases.push((
        "nested providerSpec value",
        edit(&|v| v["providerSpec"]["tags"]["a"] = json!("9")),
        true,
    ));
    cases.push(("provider", edit(&|v| v["provider"] = json!("GCP")), true));
    cases.push((
        "secretRef",
        edit(&|v| v["secretRef"]["name"] = json!("other")),
        true,
    ));
    cases.push((
        "credentialsSecretRef added",
        edit(&|v| v["credentialsSecretRef"] = json!({"name": "c"})),
        true,
    ));
    cases.push((
        "nodeTemplate added",
        edit(&|v| v["nodeTemplate"] = json!({"zone": "a"})),
        true,
    ));
    cases.push((
        "unknown top-level field",
        edit(&|v| v["futureField"] = json!(true)),
        true,
    ));
    for (what, value, changes) in cases {
        let hash = spec_hash(value);
        assert_eq!(hash != base, changes, "{what}");
    }
}

#[test]
fn node_pool_type_and_fields() {
    let cases = [
        (json!({}), PoolType::Edge),
        (json!({"type": "Edge"}), PoolType::Edge),
        (json!({"type": "Cloud"}), PoolType::Cloud),
        (json!({"type": "Unknown"}), PoolType::Edge),
    ];
    for (spec, expected) in cases {
        let text = spec.to_string();
        let pool: api::NodePool = parse(json!({
            "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
            "metadata": {"name": "hangzhou"}, "spec": spec,
        }));
        let projection = NodePool::from(&pool);
        assert_eq!(projection.pool_type, expected, "{text}");
        assert_eq!(projection.name, "hangzhou");
    }
    let pool: api::NodePool = parse(json!({
        "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {"labels": {"a": "b"}, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
    }));
    let projection = NodePool::from(&pool);
    assert_eq!(projection.labels.get("a").map(String::as_str), Some("b"));
    assert_eq!(projection.taints.len(), 1);
    assert_eq!(projection.taints[0].value.as_deref(), Some("v"));
}

#[test]
fn config_map_data_without_binary_data() {
    let cases = [
        (
            json!({"metadata": {"name": "p", "namespace": "ns"}}),
            BTreeMap::new(),
        ),
        (
            json!({"metadata": {"name": "p", "namespace": "ns"},
                   "data": {"placement.yaml": "bindings: []"},
                   "binaryData": {"blob": "AAEC"}}),
            BTreeMap::from([("placement.yaml".to_owned(), "bindings: []".to_owned())]),
        ),
    ];
    for (value, data) in cases {
        let index = Index::new(POOL);
        let cm: core::ConfigMap = parse(value);
        assert_eq!(object_key(&cm), ObjectKey::namespaced("ns", "p"));
        index.apply(cm);
        assert_eq!(
            index
                .placement()
                .config_map(&ObjectKey::namespaced("ns", "p")),
            Some(&data)
        );
    }
}
