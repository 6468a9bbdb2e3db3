//! Table tests of the index, fed with real Kubernetes objects through
//! [`IndexResource`], as the watchers feed it.

mod config_maps;
mod counts;
mod machines;
mod namespaces;
mod node_summary;
mod nodes;
mod projection;
mod reset;
mod secrets;
mod writes;

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1 as core;
use poolkeeper_api as api;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{Index, IndexResource, Node, ObjectKey, ResourceKind};

pub(super) const POOL: &str = "apps.openyurt.io/nodepool";
pub(super) const NS: &str = "machine-system";
pub(super) const EDGE_ROLE: &str = "node-role.kubernetes.io/edge";

pub(super) fn parse<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("test object parses")
}

pub(super) fn label_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A ready Node with `labels`.
pub(super) fn node(name: &str, labels: &[(&str, &str)]) -> core::Node {
    parse(json!({
        "metadata": {"name": name, "labels": label_map(labels)},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
}

/// A NodePool of `pool_type` (`None`: no `spec.type`).
pub(super) fn node_pool(name: &str, pool_type: Option<&str>) -> api::NodePool {
    parse(json!({
        "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": match pool_type {
            Some(pool_type) => json!({"type": pool_type}),
            None => json!({}),
        },
    }))
}

pub(super) fn machine_class(namespace: &str, name: &str) -> api::MachineClass {
    parse(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        "providerSpec": {"image": "ubuntu"},
    }))
}

pub(super) fn machine(namespace: &str, name: &str, class_name: &str) -> api::Machine {
    parse(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"class": {"kind": "MachineClass", "name": class_name}},
    }))
}

pub(super) fn config_map(namespace: &str, name: &str, data: &[(&str, &str)]) -> core::ConfigMap {
    parse(json!({
        "metadata": {"name": name, "namespace": namespace},
        "data": label_map(data),
    }))
}

/// The metadata of a Secret, as `metadata_watcher` delivers it.
pub(super) fn secret_meta(
    namespace: &str,
    name: &str,
    finalizers: &[&str],
) -> kube::core::PartialObjectMeta<core::Secret> {
    parse(json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {
            "name": name, "namespace": namespace, "uid": format!("uid-{name}"),
            "resourceVersion": "1", "finalizers": finalizers,
        },
    }))
}

pub(super) fn names<'a>(nodes: impl Iterator<Item = &'a Node>) -> Vec<String> {
    nodes.map(|n| n.name.to_string()).collect()
}

pub(super) fn machine_names<'a>(machines: impl Iterator<Item = &'a crate::Machine>) -> Vec<String> {
    machines.map(|m| m.key.name.clone()).collect()
}

pub(super) fn key_set(keys: &[ObjectKey]) -> HashSet<ObjectKey> {
    keys.iter().cloned().collect()
}

pub(super) fn counts(index: &Index) -> BTreeMap<ResourceKind, usize> {
    index.object_counts().into_iter().collect()
}

/// Nodes and pools:
/// - n1 hangzhou, edge role, zone a
/// - n2 hangzhou, zone b
/// - n3 beijing, edge role
/// - n4 no pool, zone a
/// - pools hangzhou (Edge), beijing (Cloud)
pub(super) fn placement_fixture() -> Index {
    let index = Index::new(POOL);
    index.apply(node(
        "n1",
        &[(POOL, "hangzhou"), (EDGE_ROLE, ""), ("zone", "a")],
    ));
    index.apply(node("n2", &[(POOL, "hangzhou"), ("zone", "b")]));
    index.apply(node("n3", &[(POOL, "beijing"), (EDGE_ROLE, "")]));
    index.apply(node("n4", &[("zone", "a")]));
    index.apply(node_pool("hangzhou", Some("Edge")));
    index.apply(node_pool("beijing", Some("Cloud")));
    index
}

/// Classes c1, c2 in NS, c1 also in "other"; machines:
/// - NS/m1 -> c1, NS/m2 -> c1, NS/m3 -> c2, NS/m4 -> missing
/// - other/m1 -> c1
pub(super) fn machines_fixture() -> Index {
    let index = Index::new(POOL);
    fill_machines(&index);
    index
}

pub(super) fn fill_machines(index: &Index) {
    for (namespace, name) in [(NS, "c1"), (NS, "c2"), ("other", "c1")] {
        index.apply(machine_class(namespace, name));
    }
    for (namespace, name, class_name) in [
        (NS, "m1", "c1"),
        (NS, "m2", "c1"),
        (NS, "m3", "c2"),
        (NS, "m4", "missing"),
        ("other", "m1", "c1"),
    ] {
        index.apply(machine(namespace, name, class_name));
    }
}
