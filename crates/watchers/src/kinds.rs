//! How each watched Kubernetes type maps onto the index.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Resource;
use poolkeeper_api::{Machine, MachineClass, NodePool};
use poolkeeper_bus::{ObjectKey, ResourceKind};
use poolkeeper_index::{Index, Upsert};
use serde::de::DeserializeOwned;

use poolkeeper_api::projection;

/// A Kubernetes type the watchers keep in the index.
pub trait WatchedKind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    const KIND: ResourceKind;
    /// Name of the watcher component.
    const COMPONENT: &'static str;

    fn key(&self) -> ObjectKey {
        projection::object_key(self.meta())
    }

    /// Writes this object's projection.
    fn upsert(&self, index: &Index) -> Upsert;

    /// Removes the object with `key`; `false` when it was not there.
    fn remove(index: &Index, key: &ObjectKey) -> bool;
}

impl WatchedKind for MachineClass {
    const KIND: ResourceKind = ResourceKind::MachineClass;
    const COMPONENT: &'static str = "machine-class-watcher";

    fn upsert(&self, index: &Index) -> Upsert {
        index.upsert_machine_class(projection::machine_class(self))
    }

    fn remove(index: &Index, key: &ObjectKey) -> bool {
        index.remove_machine_class(key)
    }
}

impl WatchedKind for Machine {
    const KIND: ResourceKind = ResourceKind::Machine;
    const COMPONENT: &'static str = "machine-watcher";

    fn upsert(&self, index: &Index) -> Upsert {
        index.upsert_machine(projection::machine(self))
    }

    fn remove(index: &Index, key: &ObjectKey) -> bool {
        index.remove_machine(key)
    }
}

impl WatchedKind for NodePool {
    const KIND: ResourceKind = ResourceKind::NodePool;
    const COMPONENT: &'static str = "node-pool-watcher";

    fn upsert(&self, index: &Index) -> Upsert {
        index.upsert_node_pool(projection::node_pool(self))
    }

    fn remove(index: &Index, key: &ObjectKey) -> bool {
        index.remove_node_pool(&key.name)
    }
}

impl WatchedKind for Node {
    const KIND: ResourceKind = ResourceKind::Node;
    const COMPONENT: &'static str = "node-watcher";

    fn upsert(&self, index: &Index) -> Upsert {
        index.upsert_node(projection::node(self))
    }

    fn remove(index: &Index, key: &ObjectKey) -> bool {
        index.remove_node(&key.name)
    }
}

impl WatchedKind for ConfigMap {
    const KIND: ResourceKind = ResourceKind::ConfigMap;
    const COMPONENT: &'static str = "config-map-watcher";

    fn upsert(&self, index: &Index) -> Upsert {
        let (key, data) = projection::config_map(self);
        index.upsert_config_map(key, data)
    }

    fn remove(index: &Index, key: &ObjectKey) -> bool {
        index.remove_config_map(key)
    }
}
