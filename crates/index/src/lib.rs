//! The in-memory state of poolkeeper: compact projections of the watched
//! Kubernetes objects plus secondary indexes that answer the hot questions in
//! O(result).
//!
//! The store is split in two independently locked halves so that Machine
//! churn never makes the admission webhook wait:
//! - **placement**: Nodes, NodePools and ConfigMaps (read by the webhook);
//! - **machines**: MachineClasses and Machines (read by the executor).
//!
//! Writers are the watchers; readers take a short-lived view
//! ([`Index::placement`], [`Index::machines`]) that holds a read lock and must
//! not be kept across an `.await`.
//!
//! Conversions from Kubernetes objects live in the watchers; this crate is a
//! plain data structure without I/O.

mod machines;
mod metrics;
mod nested_sets;
mod placement;
mod types;

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use parking_lot::RwLock;
use prometheus_client::registry::Registry;

pub use machines::MachinesView;
pub use placement::PlacementView;
pub use poolkeeper_bus::{ObjectKey, ResourceKind};
pub use types::{Machine, MachineClass, Node, NodePool, PoolType, Taint, Upsert};

use machines::MachinesState;
use metrics::Metrics;
use placement::PlacementState;

/// The shared in-memory state. Share it as `Arc<Index>`.
pub struct Index {
    pool_label: String,
    placement: RwLock<PlacementState>,
    machines: RwLock<MachinesState>,
    metrics: Metrics,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Index");
        s.field("pool_label", &self.pool_label);
        for kind in ResourceKind::ALL {
            s.field(kind.as_str(), &self.count(kind));
        }
        s.finish()
    }
}

impl Index {
    /// An empty index. A Node belongs to pool `P` when it carries the label
    /// `pool_label=P`.
    pub fn new(pool_label: &str) -> Self {
        Self {
            pool_label: pool_label.to_owned(),
            placement: RwLock::new(PlacementState::default()),
            machines: RwLock::new(MachinesState::default()),
            metrics: Metrics::default(),
        }
    }

    pub fn pool_label(&self) -> &str {
        &self.pool_label
    }

    /// Registers `poolkeeper_index_objects{kind}`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    // ---- placement writes -------------------------------------------------

    pub fn upsert_node(&self, node: Node) -> Upsert {
        let mut state = self.placement.write();
        let outcome = state.upsert_node(node);
        self.metrics.set(ResourceKind::Node, state.nodes.len());
        outcome
    }

    pub fn remove_node(&self, name: &str) -> bool {
        let mut state = self.placement.write();
        let removed = state.remove_node(name);
        self.metrics.set(ResourceKind::Node, state.nodes.len());
        removed
    }

    pub fn upsert_node_pool(&self, pool: NodePool) -> Upsert {
        let mut state = self.placement.write();
        let outcome = state.upsert_node_pool(pool);
        self.metrics.set(ResourceKind::NodePool, state.pools.len());
        outcome
    }

    pub fn remove_node_pool(&self, name: &str) -> bool {
        let mut state = self.placement.write();
        let removed = state.pools.remove(name).is_some();
        self.metrics.set(ResourceKind::NodePool, state.pools.len());
        removed
    }

    pub fn upsert_config_map(&self, key: ObjectKey, data: BTreeMap<String, String>) -> Upsert {
        let mut state = self.placement.write();
        let outcome = state.upsert_config_map(key, data);
        self.metrics
            .set(ResourceKind::ConfigMap, state.config_maps.len());
        outcome
    }

    pub fn remove_config_map(&self, key: &ObjectKey) -> bool {
        let mut state = self.placement.write();
        let removed = state.remove_config_map(key);
        self.metrics
            .set(ResourceKind::ConfigMap, state.config_maps.len());
        removed
    }

    // ---- machines writes --------------------------------------------------

    pub fn upsert_machine_class(&self, class: MachineClass) -> Upsert {
        let mut state = self.machines.write();
        let outcome = state.upsert_class(class);
        self.metrics
            .set(ResourceKind::MachineClass, state.classes.len());
        outcome
    }

    pub fn remove_machine_class(&self, key: &ObjectKey) -> bool {
        let mut state = self.machines.write();
        let removed = state.classes.remove(key).is_some();
        self.metrics
            .set(ResourceKind::MachineClass, state.classes.len());
        removed
    }

    pub fn upsert_machine(&self, machine: Machine) -> Upsert {
        let mut state = self.machines.write();
        let outcome = state.upsert_machine(machine);
        self.metrics
            .set(ResourceKind::Machine, state.machines.len());
        outcome
    }

    pub fn remove_machine(&self, key: &ObjectKey) -> bool {
        let mut state = self.machines.write();
        let removed = state.remove_machine(key).is_some();
        self.metrics
            .set(ResourceKind::Machine, state.machines.len());
        removed
    }

    /// After a (re)list: removes every object of `kind` whose key is not in
    /// `keep` and returns the removed keys, sorted.
    ///
    /// Keys of cluster-scoped kinds (Node, NodePool) have no namespace.
    pub fn retain(&self, kind: ResourceKind, keep: &HashSet<ObjectKey>) -> Vec<ObjectKey> {
        match kind {
            ResourceKind::Node | ResourceKind::NodePool | ResourceKind::ConfigMap => {
                let mut state = self.placement.write();
                let removed = state.retain(kind, keep);
                self.metrics.set(kind, state.count(kind));
                removed
            }
            ResourceKind::MachineClass | ResourceKind::Machine => {
                let mut state = self.machines.write();
                let removed = state.retain(kind, keep);
                self.metrics.set(kind, state.count(kind));
                removed
            }
        }
    }

    /// The keys of every object of `kind`, sorted.
    pub fn keys(&self, kind: ResourceKind) -> Vec<ObjectKey> {
        match kind {
            ResourceKind::Node | ResourceKind::NodePool | ResourceKind::ConfigMap => {
                self.placement.read().keys(kind)
            }
            ResourceKind::MachineClass | ResourceKind::Machine => self.machines.read().keys(kind),
        }
    }

    pub fn count(&self, kind: ResourceKind) -> usize {
        match kind {
            ResourceKind::Node | ResourceKind::NodePool | ResourceKind::ConfigMap => {
                self.placement.read().count(kind)
            }
            ResourceKind::MachineClass | ResourceKind::Machine => self.machines.read().count(kind),
        }
    }

    // ---- reads ------------------------------------------------------------

    /// A consistent read view of Nodes, NodePools and ConfigMaps. Holds a
    /// read lock: drop it before any `.await`.
    pub fn placement(&self) -> PlacementView<'_> {
        PlacementView::new(self.placement.read(), &self.pool_label)
    }

    /// A consistent read view of MachineClasses and Machines. Holds a read
    /// lock: drop it before any `.await`.
    pub fn machines(&self) -> MachinesView<'_> {
        MachinesView::new(self.machines.read())
    }
}

#[cfg(test)]
mod tests;
