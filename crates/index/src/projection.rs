//! Kubernetes objects to index projections. Pure functions: every field the
//! index keeps is taken here, everything else is dropped. The watchers and
//! the offline `admit` objects file both convert through here.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::{Machine, MachineClass, NodePool, NodePoolType};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use poolkeeper_bus::ObjectKey;
use poolkeeper_index as index;
use serde_json::Value;

/// `namespace/name` of a namespaced object, `name` of a cluster-scoped one.
pub fn object_key(meta: &ObjectMeta) -> ObjectKey {
    ObjectKey {
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// An empty taint value is the same as none.
pub fn taint(taint: &core::Taint) -> index::Taint {
    index::Taint {
        key: taint.key.clone(),
        value: taint.value.clone().filter(|v| !v.is_empty()),
        effect: taint.effect.clone(),
    }
}

/// Name, labels, taints and whether the `Ready` condition is `True`.
pub fn node(node: &core::Node) -> index::Node {
    let ready = node
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|ready| ready.status == "True");
    let taints = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .map(|taints| taints.iter().map(taint).collect())
        .unwrap_or_default();
    index::Node {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: node.metadata.labels.clone().unwrap_or_default(),
        taints,
        ready,
    }
}

/// A NodePool without `spec.type` is an Edge pool (OpenYurt's default); so
/// is one with a type this version does not know, which keeps the stricter
/// edge checks.
pub fn node_pool(pool: &NodePool) -> index::NodePool {
    let pool_type = match pool.spec.effective_type() {
        NodePoolType::Cloud => index::PoolType::Cloud,
        NodePoolType::Edge | NodePoolType::Other(_) => index::PoolType::Edge,
    };
    index::NodePool {
        name: pool.metadata.name.clone().unwrap_or_default(),
        pool_type,
        labels: pool.spec.labels.clone(),
        taints: pool.spec.taints.iter().map(taint).collect(),
    }
}

/// Key, class name and deletion flag.
pub fn machine(machine: &Machine) -> index::Machine {
    index::Machine {
        key: object_key(&machine.metadata),
        class_name: machine.class_name().to_owned(),
        deleting: machine.metadata.deletion_timestamp.is_some(),
    }
}

/// Key, finalizers, deletion flag, resourceVersion and the hash of
/// everything but `metadata` and `status`.
pub fn machine_class(class: &MachineClass) -> index::MachineClass {
    index::MachineClass {
        key: object_key(&class.metadata),
        finalizers: class.metadata.finalizers.clone().unwrap_or_default(),
        deleting: class.metadata.deletion_timestamp.is_some(),
        spec_hash: machine_class_spec_hash(class),
        resource_version: class.metadata.resource_version.clone().unwrap_or_default(),
    }
}

/// Hash of a MachineClass without `apiVersion`, `kind`, `metadata` and
/// `status`: it changes when the provider configuration changes, not when a
/// finalizer is added. Object keys are hashed in sorted order, so the hash
/// does not depend on field order.
pub fn machine_class_spec_hash(class: &MachineClass) -> u64 {
    let mut hasher = DefaultHasher::new();
    let fields = [
        (
            "credentialsSecretRef",
            secret_ref(class.credentials_secret_ref.as_ref()),
        ),
        ("nodeTemplate", class.node_template.clone()),
        ("provider", class.provider.clone().map(Value::String)),
        (
            "providerSpec",
            Some(class.provider_spec.clone()).filter(|v| !v.is_null()),
        ),
        ("secretRef", secret_ref(class.secret_ref.as_ref())),
    ];
    let mut all: BTreeMap<&str, &Value> = class
        .extra
        .iter()
        .filter(|(key, _)| key.as_str() != "status")
        .map(|(key, value)| (key.as_str(), value))
        .collect();
    for (key, value) in &fields {
        if let Some(value) = value {
            all.insert(key, value);
        }
    }
    for (key, value) in all {
        key.hash(&mut hasher);
        hash_value(value, &mut hasher);
    }
    hasher.finish()
}

fn secret_ref(reference: Option<&core::SecretReference>) -> Option<Value> {
    let reference = reference?;
    let mut map = serde_json::Map::new();
    for (key, value) in [
        ("name", &reference.name),
        ("namespace", &reference.namespace),
    ] {
        if let Some(value) = value {
            map.insert(key.to_owned(), Value::String(value.clone()));
        }
    }
    Some(Value::Object(map))
}

fn hash_value(value: &Value, hasher: &mut DefaultHasher) {
    match value {
        Value::Null => 0u8.hash(hasher),
        Value::Bool(b) => {
            1u8.hash(hasher);
            b.hash(hasher);
        }
        Value::Number(n) => {
            2u8.hash(hasher);
            n.to_string().hash(hasher);
        }
        Value::String(s) => {
            3u8.hash(hasher);
            s.hash(hasher);
        }
        Value::Array(items) => {
            4u8.hash(hasher);
            items.len().hash(hasher);
            for item in items {
                hash_value(item, hasher);
            }
        }
        Value::Object(map) => {
            5u8.hash(hasher);
            map.len().hash(hasher);
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (key, value) in entries {
                key.hash(hasher);
                hash_value(value, hasher);
            }
        }
    }
}

/// `data` of a ConfigMap (binaryData is not used).
pub fn config_map(config_map: &core::ConfigMap) -> (ObjectKey, BTreeMap<String, String>) {
    (
        object_key(&config_map.metadata),
        config_map.data.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node_from(value: Value) -> index::Node {
        node(&serde_json::from_value(value).expect("node parses"))
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
                index::Taint {
                    key: "node-role.kubernetes.io/edge".into(),
                    value: None,
                    effect: "NoSchedule".into()
                },
                index::Taint {
                    key: "dedicated".into(),
                    value: Some("gpu".into()),
                    effect: "NoExecute".into()
                },
                index::Taint {
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
            let m: Machine = serde_json::from_value(json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
                "metadata": {"name": "m1", "namespace": "ns", "deletionTimestamp": deleted_at},
                "spec": spec,
            }))
            .expect("machine parses");
            let projection = machine(&m);
            assert_eq!(projection.key, ObjectKey::namespaced("ns", "m1"));
            assert_eq!(projection.class_name, class_name);
            assert_eq!(projection.deleting, deleting);
        }
    }

    fn class_from(value: Value) -> MachineClass {
        serde_json::from_value(value).expect("class parses")
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
        let projection = machine_class(&class);
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
        let base = machine_class_spec_hash(&class_from(base_class()));
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
            let hash = machine_class_spec_hash(&class_from(value));
            assert_eq!(hash != base, changes, "{what}");
        }
    }

    #[test]
    fn node_pool_type_and_fields() {
        let cases = [
            (json!({}), index::PoolType::Edge),
            (json!({"type": "Edge"}), index::PoolType::Edge),
            (json!({"type": "Cloud"}), index::PoolType::Cloud),
            (json!({"type": "Unknown"}), index::PoolType::Edge),
        ];
        for (spec, expected) in cases {
            let text = spec.to_string();
            let pool: NodePool = serde_json::from_value(json!({
                "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
                "metadata": {"name": "hangzhou"}, "spec": spec,
            }))
            .expect("pool parses");
            let projection = node_pool(&pool);
            assert_eq!(projection.pool_type, expected, "{text}");
            assert_eq!(projection.name, "hangzhou");
        }
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"labels": {"a": "b"}, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
        }))
        .expect("pool parses");
        let projection = node_pool(&pool);
        assert_eq!(projection.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(projection.taints.len(), 1);
        assert_eq!(projection.taints[0].value.as_deref(), Some("v"));
    }

    #[test]
    fn config_map_data() {
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
            let cm: core::ConfigMap = serde_json::from_value(value).expect("parses");
            assert_eq!(config_map(&cm), (ObjectKey::namespaced("ns", "p"), data));
        }
    }
}
