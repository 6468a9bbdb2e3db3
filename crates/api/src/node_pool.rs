use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// OpenYurt's NodePool: a group of nodes, usually in one location. A node
/// belongs to pool `P` when it carries the pool label with value `P`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "apps.openyurt.io",
    version = "v1beta2",
    kind = "NodePool",
    shortname = "np",
    status = "NodePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// `Edge` or `Cloud`; missing means `Edge` (see [`NodePoolSpec::effective_type`]).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub pool_type: Option<NodePoolType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    /// Labels OpenYurt puts on every node of the pool.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations OpenYurt puts on every node of the pool.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Taints OpenYurt puts on every node of the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Every other spec field, kept as it is.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `spec.type` of a NodePool.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NodePoolType {
    Edge,
    Cloud,
    /// A value this version does not know, kept as written.
    #[serde(untagged)]
    Other(String),
}

impl NodePoolSpec {
    /// The pool type as OpenYurt reads it: a missing type is `Edge`. An
    /// unknown type is reported as is.
    pub fn effective_type(&self) -> NodePoolType {
        self.pool_type.clone().unwrap_or(NodePoolType::Edge)
    }
}

/// `status` of a NodePool, maintained by OpenYurt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_node_num: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready_node_num: Option<i32>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;

    use super::*;

    #[test]
    fn type_defaults_to_edge() {
        let cases = [
            (json!({}), NodePoolType::Edge, None),
            (
                json!({"type": "Edge"}),
                NodePoolType::Edge,
                Some(NodePoolType::Edge),
            ),
            (
                json!({"type": "Cloud"}),
                NodePoolType::Cloud,
                Some(NodePoolType::Cloud),
            ),
            (
                json!({"type": "Satellite"}),
                NodePoolType::Other("Satellite".to_owned()),
                Some(NodePoolType::Other("Satellite".to_owned())),
            ),
        ];
        for (spec, effective, raw) in cases {
            let spec_text = spec.to_string();
            let pool: NodePool = serde_json::from_value(json!({
                "apiVersion": "apps.openyurt.io/v1beta2",
                "kind": "NodePool",
                "metadata": {"name": "hangzhou"},
                "spec": spec,
            }))
            .expect("parses");
            assert_eq!(pool.spec.effective_type(), effective, "{spec_text}");
            assert_eq!(pool.spec.pool_type, raw, "{spec_text}");
        }
    }

    #[test]
    fn round_trip_preserves_unknown_fields() {
        let sample = json!({
            "apiVersion": "apps.openyurt.io/v1beta2",
            "kind": "NodePool",
            "metadata": {"name": "hangzhou"},
            "spec": {
                "type": "Edge",
                "hostNetwork": false,
                "labels": {"region": "hangzhou"},
                "annotations": {"note": "x"},
                "taints": [{"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"}],
                "interConnectivity": true,
                "leaderReplicas": 1
            },
            "status": {"nodes": ["n1"], "readyNodeNum": 1, "unreadyNodeNum": 0,
                       "leaderEndpoints": ["10.0.0.1"]}
        });
        let pool: NodePool = serde_json::from_value(sample.clone()).expect("parses");
        assert_eq!(pool.spec.taints.len(), 1);
        assert_eq!(pool.spec.extra.get("leaderReplicas"), Some(&json!(1)));
        assert_eq!(serde_json::to_value(&pool).expect("serializes"), sample);
    }

    #[test]
    fn resource_identity() {
        assert_eq!(NodePool::api_version(&()), "apps.openyurt.io/v1beta2");
        assert_eq!(
            NodePool::url_path(&(), None),
            "/apis/apps.openyurt.io/v1beta2/nodepools"
        );
    }
}
