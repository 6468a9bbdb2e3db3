//! Kubernetes objects to index projections. Every field the index keeps is
//! taken here, everything else is dropped; the watchers and the offline
//! objects file both write through [`crate::IndexResource`], which converts
//! with these.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::core::v1 as core;
use kube::Resource;
use poolkeeper_api as api;
use poolkeeper_bus::ObjectKey;
use serde_json::Value;

use crate::{Machine, MachineClass, Namespace, Node, NodePool, NodeSummary, PoolType, Taint};

/// `namespace/name` of a namespaced object, `name` of a cluster-scoped one.
pub fn object_key<K: Resource>(object: &K) -> ObjectKey {
    let meta = object.meta();
    ObjectKey {
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// An empty taint value is the same as none.
impl From<&core::Taint> for Taint {
    fn from(taint: &core::Taint) -> Self {
        Self {
            key: taint.key.clone(),
            value: taint.value.clone().filter(|v| !v.is_empty()),
            effect: taint.effect.clone(),
        }
    }
}

/// Name, labels, taints and whether the first `Ready` condition is `True`.
/// Takes the summary by value: its name and label strings move into the
/// projection. A full Node converts into the summary first, so both take
/// this one path.
impl From<NodeSummary> for Node {
    fn from(node: NodeSummary) -> Self {
        let ready = node
            .conditions
            .iter()
            .find(|condition| condition.type_ == "Ready")
            .is_some_and(|ready| ready.status == "True");
        Self {
            name: node.metadata.name.unwrap_or_default().into(),
            labels: node.metadata.labels.unwrap_or_default().into(),
            taints: node.taints.iter().map(Taint::from).collect(),
            ready,
        }
    }
}

/// A NodePool without `spec.type` is an Edge pool (OpenYurt's default); so
/// is one with a type this version does not know, which keeps the stricter
/// edge checks.
impl From<&api::NodePool> for NodePool {
    fn from(pool: &api::NodePool) -> Self {
        let pool_type = match pool.spec.effective_type() {
            api::NodePoolType::Cloud => PoolType::Cloud,
            api::NodePoolType::Edge | api::NodePoolType::Other(_) => PoolType::Edge,
        };
        Self {
            name: pool.metadata.name.clone().unwrap_or_default(),
            pool_type,
            labels: pool.spec.labels.clone(),
            taints: pool.spec.taints.iter().map(Taint::from).collect(),
        }
    }
}

/// Name, UID and labels.
impl From<&core::Namespace> for Namespace {
    fn from(namespace: &core::Namespace) -> Self {
        Self {
            name: namespace.metadata.name.clone().unwrap_or_default(),
            uid: namespace.metadata.uid.clone().unwrap_or_default(),
            labels: namespace.metadata.labels.clone().unwrap_or_default(),
        }
    }
}

/// Key, class name and deletion flag.
impl From<&api::Machine> for Machine {
    fn from(machine: &api::Machine) -> Self {
        Self {
            key: object_key(machine),
            class_name: machine.class_name().to_owned(),
            deleting: machine.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// Key, finalizers, deletion flag, resourceVersion and the hash of
/// everything but `metadata` and `status`.
impl From<&api::MachineClass> for MachineClass {
    fn from(class: &api::MachineClass) -> Self {
        Self {
            key: object_key(class),
            uid: class.metadata.uid.clone().unwrap_or_default(),
            finalizers: class.metadata.finalizers.clone().unwrap_or_default(),
            deleting: class.metadata.deletion_timestamp.is_some(),
            spec_hash: machine_class_spec_hash(class),
            resource_version: class.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// `data` of a ConfigMap (binaryData is not used).
pub(crate) fn config_map_data(config_map: core::ConfigMap) -> BTreeMap<String, String> {
    config_map.data.unwrap_or_default()
}

/// Hash of a MachineClass without `apiVersion`, `kind`, `metadata` and
/// `status`: it changes when the provider configuration changes, not when a
/// finalizer is added. Object keys are hashed in sorted order, so the hash
/// does not depend on field order.
fn machine_class_spec_hash(class: &api::MachineClass) -> u64 {
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
