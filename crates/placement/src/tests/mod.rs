//! Table tests of the placement logic.

mod affinity;
mod audit;
mod candidates;
mod exceptions;
mod exclusions;
mod explain;
mod modes;
mod mutate;
mod objects;
mod pod;
mod pod_label;
mod policy;
mod pool_sets;
mod properties;
mod tolerations;
mod validate;
mod workloads;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::core::v1::Pod;
use poolkeeper_config::Config;
use poolkeeper_index::{Index, IndexResource, Node, PoolType, Taint};
use serde_json::{Value, json};

use crate::{PlacementPolicy, PodPlacement, PolicySource, PoolSet};

/// OpenYurt's pool label, the default `placement.poolLabel`.
pub(crate) const POOL: &str = "apps.openyurt.io/nodepool";

pub(crate) fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        name: name.into(),
        labels: labels.iter().copied().collect(),
        taints: Vec::new(),
        ready: true,
    }
}

pub(crate) fn pool_node(name: &str, pool: &str) -> Node {
    node(name, &[(POOL, pool)])
}

pub(crate) fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        value: value.map(str::to_owned),
        effect: effect.to_owned(),
    }
}

/// The Kubernetes Node whose projection is `node`.
pub(crate) fn k8s_node(node: &Node) -> core::Node {
    let taints: Vec<Value> = node
        .taints
        .iter()
        .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect}))
        .collect();
    let ready = if node.ready { "True" } else { "False" };
    serde_json::from_value(json!({
        "metadata": {"name": node.name, "labels": node.labels},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }))
    .expect("test node parses")
}

/// A NodePool of `pool_type`.
pub(crate) fn k8s_node_pool(name: &str, pool_type: PoolType) -> poolkeeper_api::NodePool {
    serde_json::from_value(json!({
        "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"type": pool_type.as_str()},
    }))
    .expect("test node pool parses")
}

/// Where the default configuration keeps the placement policy.
pub(crate) fn policy_source() -> PolicySource {
    PolicySource::from(&Config::default().placement)
}

/// The pools `namespace` is bound to, joined by commas.
pub(crate) fn pools_of(policy: &PlacementPolicy, namespace: &str) -> Option<String> {
    policy.pools_for_namespace(namespace).map(PoolSet::joined)
}

/// The placement ConfigMap `source` names, holding `yaml` under its key.
pub(crate) fn policy_config_map(source: &PolicySource, yaml: &str) -> core::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": source.name, "namespace": source.namespace},
        "data": {(source.key.clone()): yaml},
    }))
    .expect("test config map parses")
}

/// An index with `nodes` and the pools `(name, type)`.
pub(crate) fn index(nodes: Vec<Node>, pools: &[(&str, PoolType)]) -> Index {
    let index = Index::new(POOL);
    for n in nodes {
        index.apply(k8s_node(&n));
    }
    for (name, pool_type) in pools {
        index.apply(k8s_node_pool(name, *pool_type));
    }
    index
}

/// The cluster most decision tests use:
/// - pool `hangzhou` (Edge): hz-1, hz-2 (zone a), hz-3 (zone b)
/// - pool `beijing` (Cloud): bj-1, bj-2 (zone a)
/// - pool `empty` (Edge): no nodes
/// - unpooled: free-1 (zone a), free-2
pub(crate) fn cluster() -> Index {
    index(
        vec![
            node(
                "hz-1",
                &[(POOL, "hangzhou"), ("zone", "a"), ("disk", "ssd")],
            ),
            node("hz-2", &[(POOL, "hangzhou"), ("zone", "a")]),
            node(
                "hz-3",
                &[(POOL, "hangzhou"), ("zone", "b"), ("disk", "ssd")],
            ),
            node("bj-1", &[(POOL, "beijing"), ("zone", "a"), ("disk", "ssd")]),
            node("bj-2", &[(POOL, "beijing"), ("zone", "a")]),
            node("free-1", &[("zone", "a")]),
            node("free-2", &[]),
        ],
        &[
            ("hangzhou", PoolType::Edge),
            ("beijing", PoolType::Cloud),
            ("empty", PoolType::Edge),
        ],
    )
}

pub(crate) const POLICY: &str = "
bindings:
  - namespace: shop-hangzhou
    nodePool: hangzhou
  - namespace: shop-beijing
    nodePool: beijing
  - namespace: shop-empty
    nodePool: empty
  - namespace: shop-gone
    nodePool: gone
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
  - {key: edge.example.com/link, operator: Equal, value: flaky, effect: NoExecute}
";

pub(crate) fn policy() -> PlacementPolicy {
    PlacementPolicy::parse(POLICY).expect("test policy parses")
}

/// A Pod from `spec` (merged into a minimal valid Pod) and `labels`.
pub(crate) fn pod_json(labels: Value, spec: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    });
    if let (Some(target), Value::Object(extra)) = (pod["spec"].as_object_mut(), spec) {
        for (k, v) in extra {
            target.insert(k, v);
        }
    }
    pod
}

pub(crate) fn pod(spec: Value) -> PodPlacement {
    to_pod(&pod_json(json!({}), spec))
}

pub(crate) fn labelled_pod(labels: Value, spec: Value) -> PodPlacement {
    to_pod(&pod_json(labels, spec))
}

/// The projection of the Pod `value`, read straight from its JSON as the
/// webhook does; it must equal the one built from a `k8s_openapi` Pod (as
/// the audit, `admit` and `explain` build it), so every decision test
/// covers both ways in.
pub(crate) fn to_pod(value: &Value) -> PodPlacement {
    let projected: PodPlacement = serde_json::from_value(value.clone()).expect("test pod projects");
    let pod: Pod = serde_json::from_value(value.clone()).expect("test pod parses");
    assert_eq!(
        PodPlacement::from(&pod),
        projected,
        "both projections of {value}"
    );
    projected
}

/// `spec` with required node affinity `terms`.
pub(crate) fn required(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
}

pub(crate) fn expr(key: &str, operator: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": operator, "values": values})
}

pub(crate) fn expr_no_values(key: &str, operator: &str) -> Value {
    json!({"key": key, "operator": operator})
}
