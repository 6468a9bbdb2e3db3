//! Reading an objects file for offline evaluation.

use poolkeeper_index::{PoolType, ResourceKind};

use super::{POOL, policy_source, pools_of, taint};
use crate::{
    OfflineObjects, PlacementError, PlacementPolicy, PolicySource, build_index_from_objects,
};

/// Reads `yaml` with the default configuration's pool label and policy.
fn read(yaml: &str) -> Result<OfflineObjects, PlacementError> {
    build_index_from_objects(yaml, POOL, &policy_source())
}

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
    let objects = read(OBJECTS).unwrap();
    let index = &objects.index;
    assert_eq!(index.object_count(ResourceKind::Node), 3);
    assert_eq!(index.object_count(ResourceKind::NodePool), 3);
    assert_eq!(index.object_count(ResourceKind::ConfigMap), 1);
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
    let policy = PlacementPolicy::load(&view, &policy_source()).unwrap();
    assert_eq!(pools_of(&policy, "shop").as_deref(), Some("hangzhou"));
}

#[test]
fn unknown_pool_types_are_edge() {
    let yaml = "apiVersion: apps.openyurt.io/v1beta2\nkind: NodePool\nmetadata: {name: p}\nspec: {type: Fog}\n";
    let objects = read(yaml).unwrap();
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
    let objects = read("").unwrap();
    assert_eq!(objects.index.object_count(ResourceKind::Node), 0);
    let objects = read("---\n---\n").unwrap();
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
        let error = read(yaml).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("objects file, {expected}")),
            "{yaml:?}: {error}"
        );
    }
    let error = read("a: [\n").unwrap_err();
    assert!(
        matches!(error, PlacementError::ObjectsSyntax { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("line 1"), "{error}");
}

#[test]
fn node_pools_of_any_version_are_read() {
    let yaml = "apiVersion: apps.openyurt.io/v1alpha1\nkind: NodePool\nmetadata: {name: p}\nspec: {type: Cloud, hostNetwork: true}\n";
    let objects = read(yaml).unwrap();
    assert_eq!(
        objects
            .index
            .placement()
            .node_pool("p")
            .map(|p| p.pool_type),
        Some(PoolType::Cloud)
    );
    let error = read("apiVersion: apps.openyurt.io/v1beta2\nkind: NodePool\nmetadata: {name: p}\nspec: {type: 5}\n")
        .unwrap_err();
    assert!(
        matches!(
            error,
            PlacementError::InvalidObject {
                document: 1,
                kind: "NodePool",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("objects file, document 1: invalid NodePool \"p\": "),
        "{error}"
    );
}

#[test]
fn custom_policy_location_and_pool_label() {
    let policy = PolicySource {
        namespace: "ops".into(),
        name: "placement".into(),
        key: "policy".into(),
        default_mode: poolkeeper_config::Mode::Warn,
        default_constraints: poolkeeper_config::Constraints::Judge,
        excluded_namespaces: Default::default(),
        namespace_labels: None,
    };
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: placement, namespace: ops}\ndata:\n  policy: 'bindings: [{namespace: a, nodePool: p}]'\n---\napiVersion: v1\nkind: Node\nmetadata: {name: node-1, labels: {example.com/pool: p}}\n";
    let objects = build_index_from_objects(yaml, "example.com/pool", &policy).unwrap();
    let view = objects.index.placement();
    assert_eq!(view.pool_label(), "example.com/pool");
    assert_eq!(view.nodes_in_pool("p").count(), 1);
    let loaded = PlacementPolicy::load(&view, &policy).unwrap();
    assert_eq!(pools_of(&loaded, "a").as_deref(), Some("p"));
    // The source's default mode is the mode of a binding without one.
    assert_eq!(
        loaded.mode_for_namespace("a"),
        poolkeeper_config::Mode::Warn
    );
}

#[test]
fn a_namespace_on_a_cluster_scoped_object_is_ignored() {
    let yaml = "apiVersion: v1\nkind: Node\nmetadata: {name: n1, namespace: default}\n---\napiVersion: apps.openyurt.io/v1beta2\nkind: NodePool\nmetadata: {name: p, namespace: default}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n";
    let error = read(yaml).unwrap_err();
    assert_eq!(
        error.to_string(),
        "objects file, document 3: duplicate Node \"n1\" (first in document 1)"
    );
    let objects = read(&yaml[..yaml.rfind("---").unwrap()]).unwrap();
    let view = objects.index.placement();
    assert!(view.node("n1").is_some());
    assert!(view.node_pool("p").is_some());
}
