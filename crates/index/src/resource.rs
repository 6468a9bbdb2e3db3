//! The write surface: Kubernetes objects go in, [`Changed`] comes out.
//!
//! `Index` implements [`IndexResource`] for every kind it holds. Each write
//! converts the object to its projection first (the `From` impls in
//! `projection.rs`), then takes the lock of its half once, so readers never
//! wait for a conversion; the secondary indexes stay exact.

use std::collections::HashSet;

use k8s_openapi::api::core::v1 as core;
use kube::Resource;
use poolkeeper_api as api;
use poolkeeper_bus::{ObjectKey, ResourceKind};

use crate::projection::{config_map_data, object_key};
use crate::secrets::secret_references;
use crate::{
    Changed, Exception, Index, Machine, MachineClass, Namespace, Node, NodePool, NodeSummary,
};

/// Writes objects of kind `K` into the index, in the shape of kubert's
/// `index` module: `apply` for an add or update, `delete` for a removal,
/// `reset` for a complete (re)list. Each reports what changed, so the caller
/// publishes exactly that.
pub trait IndexResource<K: Resource> {
    const KIND: ResourceKind;

    /// Stores the projection of `object`; `None` when it equals the stored
    /// one.
    fn apply(&self, object: K) -> Option<Changed>;

    /// Removes the object `key`; `None` when it was not there.
    fn delete(&self, key: &ObjectKey) -> Option<Changed>;

    /// Removes every object of this kind whose key is not in `keep` and
    /// reports those deletes, in key order. The last step of a relist that
    /// applied its objects one by one.
    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed>;

    /// A complete list: applies every object, then removes what the list
    /// lacks. Reports the applies in list order, then the deletes.
    fn reset(&self, objects: Vec<K>) -> Vec<Changed> {
        let mut listed = HashSet::with_capacity(objects.len());
        let mut changes = Vec::new();
        for object in objects {
            listed.insert(object_key(&object));
            changes.extend(self.apply(object));
        }
        changes.extend(self.retain(&listed));
        changes
    }
}

/// The watchers' Nodes.
impl IndexResource<NodeSummary> for Index {
    const KIND: ResourceKind = ResourceKind::Node;

    fn apply(&self, node: NodeSummary) -> Option<Changed> {
        let node = Node::from(node);
        self.placement.write().upsert_node(node)
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        self.placement.write().remove_node(key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        self.placement.write().retain_nodes(keep)
    }
}

/// Full Nodes (the offline objects file, a one-off list): written as their
/// summaries.
impl IndexResource<core::Node> for Index {
    const KIND: ResourceKind = ResourceKind::Node;

    fn apply(&self, node: core::Node) -> Option<Changed> {
        self.apply(NodeSummary::from(node))
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        IndexResource::<NodeSummary>::delete(self, key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        IndexResource::<NodeSummary>::retain(self, keep)
    }
}

impl IndexResource<api::NodePool> for Index {
    const KIND: ResourceKind = ResourceKind::NodePool;

    fn apply(&self, pool: api::NodePool) -> Option<Changed> {
        let pool = NodePool::from(&pool);
        self.placement.write().upsert_node_pool(pool)
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        self.placement.write().remove_node_pool(key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        self.placement.write().retain_node_pools(keep)
    }
}

/// Any ConfigMap is kept by its key; the watchers watch only the placement
/// one.
impl IndexResource<core::ConfigMap> for Index {
    const KIND: ResourceKind = ResourceKind::ConfigMap;

    fn apply(&self, config_map: core::ConfigMap) -> Option<Changed> {
        let key = object_key(&config_map);
        let data = config_map_data(config_map);
        self.placement.write().upsert_config_map(key, data)
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        self.placement.write().remove_config_map(key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        self.placement.write().retain_config_maps(keep)
    }
}

/// The watchers watch only the Namespaces that carry the namespace pool
/// label; a Namespace that loses it is deleted from their view.
impl IndexResource<core::Namespace> for Index {
    const KIND: ResourceKind = ResourceKind::Namespace;

    fn apply(&self, namespace: core::Namespace) -> Option<Changed> {
        let namespace = Namespace::from(&namespace);
        self.placement.write().upsert_namespace(namespace)
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        self.placement.write().remove_namespace(key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        self.placement.write().retain_namespaces(keep)
    }
}

impl IndexResource<api::PlacementException> for Index {
    const KIND: ResourceKind = ResourceKind::PlacementException;

    fn apply(&self, exception: api::PlacementException) -> Option<Changed> {
        let exception = Exception::from(&exception);
        self.placement.write().upsert_exception(exception)
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        self.placement.write().remove_exception(key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        self.placement.write().retain_exceptions(keep)
    }
}

/// [`Changed::related`] holds the Secrets the class referenced before and
/// references after the write (see [`secret_references`]).
impl IndexResource<api::MachineClass> for Index {
    const KIND: ResourceKind = ResourceKind::MachineClass;

    fn apply(&self, class: api::MachineClass) -> Option<Changed> {
        let secrets = secret_references(&class);
        let class = MachineClass::from(&class);
        let key = class.key.clone();
        let changed = self.machines.write().upsert_class(class);
        let related = self.secrets.write().set_references(&key, secrets);
        changed.map(|changed| changed.with_related(related))
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        let changed = self.machines.write().remove_class(key);
        let related = self.secrets.write().forget_class(key);
        changed.map(|changed| changed.with_related(related))
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        let removed = self.machines.write().retain_classes(keep);
        let mut secrets = self.secrets.write();
        removed
            .into_iter()
            .map(|changed| {
                let related = secrets.forget_class(&changed.key);
                changed.with_related(related)
            })
            .collect()
    }
}

/// [`Changed::related`] holds the classes the Machine referenced before and
/// after the write.
impl IndexResource<api::Machine> for Index {
    const KIND: ResourceKind = ResourceKind::Machine;

    fn apply(&self, machine: api::Machine) -> Option<Changed> {
        let machine = Machine::from(&machine);
        self.machines.write().upsert_machine(machine)
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        self.machines.write().remove_machine(key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        self.machines.write().retain_machines(keep)
    }
}
