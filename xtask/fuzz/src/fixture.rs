//! The cluster the admission target decides over, built once per process.
//!
//! | node | pool (type) | taint |
//! |---|---|---|
//! | `edge-hz-1`, `edge-hz-2` | `hangzhou` (Edge) | `node-role.kubernetes.io/edge:NoSchedule` |
//! | `cloud-1` | `cloud` (Cloud) | - |
//! | `loose-1` | none | - |
//!
//! The pool `empty` (Edge) has no node. The policy binds a namespace to each
//! pool in each mode, and one to a pool that does not exist.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use poolkeeper_api::NodePool;
use poolkeeper_config::Config;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::{PlacementError, PlacementPolicy, PolicySource};
use serde_json::{Value, json};

/// The label that puts a Node into a pool.
pub const POOL_LABEL: &str = "apps.openyurt.io/nodepool";

const EDGE_TAINT: &str = "node-role.kubernetes.io/edge";

const POLICY: &str = "
bindings:
  - {namespace: shop-hangzhou, nodePool: hangzhou}
  - {namespace: shop-cloud, nodePool: cloud}
  - {namespace: shop-warn, nodePool: hangzhou, mode: warn}
  - {namespace: shop-dry, nodePool: hangzhou, mode: dryrun}
  - {namespace: shop-empty, nodePool: empty}
  - {namespace: shop-gone, nodePool: gone}
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
  - {key: edge.example.com/flaky, operator: Equal, value: 'yes', effect: NoExecute, tolerationSeconds: 30}
";

/// The index, the policy it holds and where that policy lives.
pub struct Fixture {
    pub index: Index,
    pub source: PolicySource,
    pub policy: PlacementPolicy,
    /// A policy that failed to parse: validation fails closed on it.
    pub broken: PlacementError,
}

/// The shared fixture (built on first use).
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(build)
}

fn build() -> Fixture {
    let source = PolicySource::from(&Config::default().placement);
    let index = Index::new(POOL_LABEL);
    for (name, pool_type) in [("hangzhou", "Edge"), ("cloud", "Cloud"), ("empty", "Edge")] {
        index.apply(node_pool(name, pool_type));
    }
    let edge = [json!({"key": EDGE_TAINT, "effect": "NoSchedule"})];
    index.apply(node("edge-hz-1", Some("hangzhou"), &edge));
    index.apply(node("edge-hz-2", Some("hangzhou"), &edge));
    index.apply(node("cloud-1", Some("cloud"), &[]));
    index.apply(node("loose-1", None, &[]));
    index.apply(policy_config_map(&source, POLICY));
    let policy = PlacementPolicy::load(&index.placement(), &source)
        .expect("the fixture's placement policy is valid");
    let broken = PlacementPolicy::parse("bindings: {not: a list}")
        .expect_err("a mapping is not a list of bindings");
    Fixture {
        index,
        source,
        policy,
        broken,
    }
}

fn node_pool(name: &str, pool_type: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"type": pool_type}
    }))
    .expect("a NodePool")
}

fn node(name: &str, pool: Option<&str>, taints: &[Value]) -> Node {
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": "zone-a",
    });
    if let Some(pool) = pool {
        labels[POOL_LABEL] = json!(pool);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a Node")
}

fn policy_config_map(source: &PolicySource, yaml: &str) -> ConfigMap {
    let mut data = serde_json::Map::new();
    data.insert(source.key.clone(), json!(yaml));
    serde_json::from_value(json!({
        "metadata": {"namespace": source.namespace, "name": source.name},
        "data": data
    }))
    .expect("a ConfigMap")
}
