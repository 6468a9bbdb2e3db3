//! Reading an objects file for offline evaluation.

use poolkeeper_index::{PoolType, ResourceKind};
use serde_json::json;

use super::taint;
use crate::{
    PlacementError, PlacementPolicy, PlacementSettings, PolicySource, build_index_from_objects,
    node_pool_projection,
};

const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: hz-1
  labels: {apps.openyurt.io/nodepool: hangzhou}
spec:
  taints:
    - {key: node-role.kubernetes.io/edge, effect: NoSchedule}
    - {key: link, value: flaky, effect: NoExecute}
status:
  conditions:
    - {type: MemoryPressure, status: "False"}
    - {type: Ready, status: "True"}
---
apiVersion: apps.openyurt.io/v1beta2
kind: NodePool
metadata: {name: hangzhou}
spec:
  type: Edge
  labels: {region: east}
  taints: [{key: t, value: v, effect: NoSchedule}]
---
apiVersion: apps.openyurt.io/v1beta1
kind: NodePool
metadata: {name: beijing}
spec: {type: Cloud}
---
apiVersion: apps.openyurt.io/v1beta2
kind: NodePool
metadata: {name: defaulted}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: poolkeeper-placement, namespace: poolkeeper-system}
data:
  placement.yaml: |
    bindings:
      - {namespace: shop, nodePool: hangzhou}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated, namespace: poolkeeper-system}
data: {a: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
---
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Node
    metadata: {name: bj-1, labels: {apps.openyurt.io/nodepool: beijing}}
  - apiVersion: v1
    kind: Node
    metadata: {name: free-1}
"#;

#[test]
fn reads_nodes_pools_and_the_policy() {
    let settings = PlacementSettings::default();
    let objects = build_index_from_objects(OBJECTS, &settings).unwrap();
    let index = &objects.index;
    assert_eq!(index.count(ResourceKind::Node), 3);
    assert_eq!(index.count(ResourceKind::NodePool), 3);
    assert_eq!(index.count(ResourceKind::ConfigMap), 1);
    assert_eq!(
        objects.notes,
        [
            "document 6: ignored ConfigMap poolkeeper-system/unrelated (the placement policy is ConfigMap poolkeeper-system/poolkeeper-placement key placement.yaml)",
            "document 7: ignored Deployment \"web\" (apps/v1)",
        ]
    );
    let view = index.placement();
    let hz = view.node("hz-1").unwrap();
    assert!(hz.ready);
    assert_eq!(
        hz.taints,
        [
            taint("node-role.kubernetes.io/edge", None, "NoSchedule"),
            taint("link", Some("flaky"), "NoExecute")
        ]
    );
    assert!(!view.node("free-1").unwrap().ready);
    assert_eq!(
        view.nodes_in_pool("beijing")
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>(),
        ["bj-1"]
    );
    let hangzhou = view.node_pool("hangzhou").unwrap();
    assert_eq!(hangzhou.pool_type, PoolType::Edge);
    assert_eq!(
        hangzhou.labels.get("region").map(String::as_str),
        Some("east")
    );
    assert_eq!(hangzhou.taints, [taint("t", Some("v"), "NoSchedule")]);
    assert_eq!(
        view.node_pool("beijing").unwrap().pool_type,
        PoolType::Cloud
    );
    assert_eq!(
        view.node_pool("defaulted").unwrap().pool_type,
        PoolType::Edge,
        "missing spec.type is Edge"
    );
    let policy = PlacementPolicy::load(&view, &settings.policy).unwrap();
    assert_eq!(policy.pool_for_namespace("shop"), Some("hangzhou"));
}

#[test]
fn unknown_pool_types_are_edge() {
    let yaml = "apiVersion: apps.openyurt.io/v1beta2\nkind: NodePool\nmetadata: {name: p}\nspec: {type: Fog}\n";
    let objects = build_index_from_objects(yaml, &PlacementSettings::default()).unwrap();
    assert_eq!(
        objects.index.placement().node_pool("p").unwrap().pool_type,
        PoolType::Edge
    );
    assert_eq!(
        objects.notes,
        ["document 1: NodePool \"p\" has unknown spec.type \"Fog\", treated as Edge"]
    );
}

#[test]
fn empty_input_is_an_empty_index() {
    let objects = build_index_from_objects("", &PlacementSettings::default()).unwrap();
    assert_eq!(objects.index.count(ResourceKind::Node), 0);
    let objects = build_index_from_objects("---\n---\n", &PlacementSettings::default()).unwrap();
    assert!(objects.notes.is_empty());
}

#[test]
fn errors_name_the_document() {
    let cases = [
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: a}\n",
            "document 2: duplicate Node \"a\" (first in document 1)",
        ),
        (
            "apiVersion: apps.openyurt.io/v1beta2\nkind: NodePool\nmetadata: {}\n",
            "document 1: NodePool without metadata.name",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: a, labels: [x]}\n",
            "document 1: invalid Node \"a\"",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {labels: {}}\n",
            "document 1: Node without metadata.name",
        ),
        ("just a string\n", "document 1: not a Kubernetes object"),
        (
            "apiVersion: v1\nkind: List\nitems: 5\n",
            "document 1: List items must be a sequence",
        ),
    ];
    for (yaml, expected) in cases {
        let error = build_index_from_objects(yaml, &PlacementSettings::default()).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("objects file, {expected}")),
            "{yaml:?}: {error}"
        );
    }
    let error = build_index_from_objects("a: [\n", &PlacementSettings::default()).unwrap_err();
    assert!(
        matches!(error, PlacementError::ObjectsSyntax { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("line 1"), "{error}");
}

#[test]
fn node_pools_of_any_version_project() {
    let pool = node_pool_projection(
        &json!({"metadata": {"name": "p"}, "spec": {"type": "Cloud", "hostNetwork": true}}),
    )
    .unwrap();
    assert_eq!(pool.pool_type, PoolType::Cloud);
    assert!(
        node_pool_projection(&json!({"metadata": {"name": "p"}, "spec": {"type": 5}})).is_err()
    );
}

#[test]
fn custom_policy_location_and_pool_label() {
    let settings = PlacementSettings {
        pool_label: "example.com/pool".into(),
        policy: PolicySource {
            namespace: "ops".into(),
            name: "placement".into(),
            key: "policy".into(),
        },
    };
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: placement, namespace: ops}\ndata:\n  policy: 'bindings: [{namespace: a, nodePool: p}]'\n---\napiVersion: v1\nkind: Node\nmetadata: {name: node-1, labels: {example.com/pool: p}}\n";
    let objects = build_index_from_objects(yaml, &settings).unwrap();
    let view = objects.index.placement();
    assert_eq!(view.nodes_in_pool("p").count(), 1);
    let policy = PlacementPolicy::load(&view, &settings.policy).unwrap();
    assert_eq!(policy.pool_for_namespace("a"), Some("p"));
}
