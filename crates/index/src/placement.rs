//! Nodes, NodePools and ConfigMaps: the state the admission webhook reads.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use parking_lot::RwLockReadGuard;
use poolkeeper_bus::{ObjectKey, ResourceKind};

use crate::nested_sets::NestedSets;
use crate::types::{Node, NodePool, Upsert, upsert_keyed};

/// Node names by label key, then label value, sharing their name strings with
/// the primary map. Readers list a key's values in order, so a `BTreeMap`
/// holds them.
type LabelIndex = NestedSets<BTreeMap<String, BTreeSet<Arc<str>>>>;

/// Moves `node` from the entries of `old` labels to those of `new`.
fn relabel(
    labels: &mut LabelIndex,
    node: &Arc<str>,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) {
    for (key, value) in old {
        if new.get(key) != Some(value) {
            labels.remove(key, value, node.as_ref());
        }
    }
    for (key, value) in new {
        if old.get(key) != Some(value) {
            labels.insert(key, value, Arc::clone(node));
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct PlacementState {
    pub(crate) nodes: BTreeMap<Arc<str>, Node>,
    labels: LabelIndex,
    pub(crate) pools: BTreeMap<String, NodePool>,
    pub(crate) config_maps: BTreeMap<ObjectKey, BTreeMap<String, String>>,
    config_maps_generation: u64,
}

impl PlacementState {
    pub(crate) fn upsert_node(&mut self, node: Node) -> Upsert {
        match self.nodes.get_key_value(node.name.as_str()) {
            Some((_, existing)) if *existing == node => Upsert::Unchanged,
            Some((name, existing)) => {
                let name = Arc::clone(name);
                relabel(&mut self.labels, &name, &existing.labels, &node.labels);
                self.nodes.insert(name, node);
                Upsert::Updated
            }
            None => {
                let name: Arc<str> = Arc::from(node.name.as_str());
                for (key, value) in &node.labels {
                    self.labels.insert(key, value, Arc::clone(&name));
                }
                self.nodes.insert(name, node);
                Upsert::Created
            }
        }
    }

    pub(crate) fn remove_node(&mut self, name: &str) -> bool {
        let Some(node) = self.nodes.remove(name) else {
            return false;
        };
        for (key, value) in &node.labels {
            self.labels.remove(key, value, name);
        }
        true
    }

    pub(crate) fn upsert_node_pool(&mut self, pool: NodePool) -> Upsert {
        upsert_keyed(&mut self.pools, pool, |pool| &pool.name)
    }

    pub(crate) fn upsert_config_map(
        &mut self,
        key: ObjectKey,
        data: BTreeMap<String, String>,
    ) -> Upsert {
        let outcome = match self.config_maps.get_mut(&key) {
            Some(existing) if *existing == data => return Upsert::Unchanged,
            Some(existing) => {
                *existing = data;
                Upsert::Updated
            }
            None => {
                self.config_maps.insert(key, data);
                Upsert::Created
            }
        };
        self.config_maps_generation += 1;
        outcome
    }

    pub(crate) fn remove_config_map(&mut self, key: &ObjectKey) -> bool {
        let removed = self.config_maps.remove(key).is_some();
        if removed {
            self.config_maps_generation += 1;
        }
        removed
    }

    pub(crate) fn retain(
        &mut self,
        kind: ResourceKind,
        keep: &HashSet<ObjectKey>,
    ) -> Vec<ObjectKey> {
        let mut removed = Vec::new();
        match kind {
            ResourceKind::Node => {
                let gone: Vec<Arc<str>> = self
                    .nodes
                    .keys()
                    .filter(|name| !keep.contains(&ObjectKey::cluster(name.as_ref())))
                    .cloned()
                    .collect();
                for name in gone {
                    self.remove_node(&name);
                    removed.push(ObjectKey::cluster(name.as_ref()));
                }
            }
            ResourceKind::NodePool => {
                self.pools.retain(|name, _| {
                    let key = ObjectKey::cluster(name.as_str());
                    let kept = keep.contains(&key);
                    if !kept {
                        removed.push(key);
                    }
                    kept
                });
            }
            ResourceKind::ConfigMap => {
                self.config_maps.retain(|key, _| {
                    let kept = keep.contains(key);
                    if !kept {
                        removed.push(key.clone());
                    }
                    kept
                });
                if !removed.is_empty() {
                    self.config_maps_generation += 1;
                }
            }
            ResourceKind::MachineClass | ResourceKind::Machine => {}
        }
        removed
    }

    pub(crate) fn keys(&self, kind: ResourceKind) -> Vec<ObjectKey> {
        match kind {
            ResourceKind::Node => self
                .nodes
                .keys()
                .map(|name| ObjectKey::cluster(name.as_ref()))
                .collect(),
            ResourceKind::NodePool => self.pools.keys().map(ObjectKey::cluster).collect(),
            ResourceKind::ConfigMap => self.config_maps.keys().cloned().collect(),
            ResourceKind::MachineClass | ResourceKind::Machine => Vec::new(),
        }
    }

    pub(crate) fn count(&self, kind: ResourceKind) -> usize {
        match kind {
            ResourceKind::Node => self.nodes.len(),
            ResourceKind::NodePool => self.pools.len(),
            ResourceKind::ConfigMap => self.config_maps.len(),
            ResourceKind::MachineClass | ResourceKind::Machine => 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn label_index_entries(&self) -> usize {
        self.labels.member_count()
    }

    #[cfg(test)]
    pub(crate) fn label_index_keys(&self) -> usize {
        self.labels.outer_count()
    }
}

/// A read view of Nodes, NodePools and ConfigMaps. Iterators yield in name
/// order (label-key queries: grouped by label value, then name order).
pub struct PlacementView<'a> {
    state: RwLockReadGuard<'a, PlacementState>,
    pool_label: &'a str,
}

impl<'a> PlacementView<'a> {
    pub(crate) fn new(state: RwLockReadGuard<'a, PlacementState>, pool_label: &'a str) -> Self {
        Self { state, pool_label }
    }

    /// The label that assigns a Node to a pool.
    pub fn pool_label(&self) -> &str {
        self.pool_label
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.state.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.state.nodes.values()
    }

    pub fn node_count(&self) -> usize {
        self.state.nodes.len()
    }

    /// Nodes carrying `key=value`, in O(result).
    pub fn nodes_with_label(&self, key: &str, value: &str) -> impl Iterator<Item = &Node> {
        self.state
            .labels
            .members(key, value)
            .into_iter()
            .flatten()
            .filter_map(|name| self.state.nodes.get(name.as_ref()))
    }

    /// How many nodes carry `key=value`, in O(1).
    pub fn label_count(&self, key: &str, value: &str) -> usize {
        self.state
            .labels
            .members(key, value)
            .map_or(0, BTreeSet::len)
    }

    /// How many nodes carry the label `key`, in O(distinct values).
    pub fn label_key_count(&self, key: &str) -> usize {
        self.state
            .labels
            .sets_under(key)
            .map_or(0, |values| values.values().map(BTreeSet::len).sum())
    }

    /// Nodes carrying the label `key` with any value, in O(result).
    pub fn nodes_with_label_key(&self, key: &str) -> impl Iterator<Item = &Node> {
        self.state
            .labels
            .sets_under(key)
            .into_iter()
            .flat_map(|values| values.values())
            .flatten()
            .filter_map(|name| self.state.nodes.get(name.as_ref()))
    }

    /// The distinct values of label `key` over all nodes, sorted.
    pub fn label_values(&self, key: &str) -> impl Iterator<Item = &str> {
        self.state
            .labels
            .sets_under(key)
            .into_iter()
            .flat_map(|values| values.keys())
            .map(String::as_str)
    }

    /// Nodes whose pool label is `pool`, in O(result).
    pub fn nodes_in_pool(&self, pool: &str) -> impl Iterator<Item = &Node> {
        self.nodes_with_label(self.pool_label, pool)
    }

    /// The pool a Node belongs to by its pool label (whether or not that
    /// NodePool exists).
    pub fn pool_of_node(&self, node: &str) -> Option<&str> {
        self.state
            .nodes
            .get(node)?
            .labels
            .get(self.pool_label)
            .map(String::as_str)
    }

    pub fn node_pool(&self, name: &str) -> Option<&NodePool> {
        self.state.pools.get(name)
    }

    pub fn node_pools(&self) -> impl Iterator<Item = &NodePool> {
        self.state.pools.values()
    }

    pub fn node_pool_count(&self) -> usize {
        self.state.pools.len()
    }

    pub fn config_map(&self, key: &ObjectKey) -> Option<&BTreeMap<String, String>> {
        self.state.config_maps.get(key)
    }

    /// Bumps on every ConfigMap change (create, data change, delete), so
    /// readers can cache what they parse from a ConfigMap.
    pub fn config_maps_generation(&self) -> u64 {
        self.state.config_maps_generation
    }
}
