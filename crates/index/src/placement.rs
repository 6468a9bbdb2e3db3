//! Nodes, NodePools, the placement ConfigMap and the labelled Namespaces:
//! the state the admission webhook reads.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use parking_lot::RwLockReadGuard;
use poolkeeper_bus::{Change, ObjectKey};

use crate::exception::Exception;
use crate::labels::Labels;
use crate::nested_sets::NestedSets;
use crate::shared::{Interner, SharedString};
use crate::types::{Changed, Namespace, Node, NodePool, Upsert, retain_keyed, upsert_keyed};

/// Node names by label key, then label value, sharing their name strings with
/// the primary map. Readers list a key's values in order, so a `BTreeMap`
/// holds them.
type LabelIndex = NestedSets<BTreeMap<String, BTreeSet<SharedString>>>;

/// Moves `node` from the entries of `old` labels to those of `new`.
fn relabel(labels: &mut LabelIndex, node: &SharedString, old: &Labels, new: &Labels) {
    for (key, value) in old {
        if new.get(key) != Some(value) {
            labels.remove(key, value, node.as_str());
        }
    }
    for (key, value) in new {
        if old.get(key) != Some(value) {
            labels.insert(key, value, node.clone());
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct PlacementState {
    pub(crate) nodes: BTreeMap<SharedString, Node>,
    labels: LabelIndex,
    /// One copy of each Node name, label key and label value in use: ~13
    /// labels per Node repeat across the cluster, and `kubernetes.io/hostname`
    /// repeats the Node's name.
    strings: Interner,
    pub(crate) pools: BTreeMap<String, NodePool>,
    pub(crate) config_maps: BTreeMap<ObjectKey, BTreeMap<String, String>>,
    pub(crate) namespaces: BTreeMap<String, Namespace>,
    /// PlacementExceptions by namespace, then name.
    pub(crate) exceptions: BTreeMap<(String, String), Exception>,
    /// Bumps on every change of what the placement policy is read from:
    /// ConfigMaps and Namespaces.
    policy_generation: u64,
}

/// Nodes and NodePools are cluster-scoped: a key with a namespace names
/// neither.
fn cluster_name(key: &ObjectKey) -> Option<&str> {
    match key.namespace {
        None => Some(&key.name),
        Some(_) => None,
    }
}

impl PlacementState {
    pub(crate) fn upsert_node(&mut self, mut node: Node) -> Option<Changed> {
        let key = ObjectKey::cluster(node.name.as_str());
        if self.nodes.get(node.name.as_str()) == Some(&node) {
            return None;
        }
        // Shared before the old Node's strings are released, so that the
        // strings both have stay stored.
        self.strings.share(&mut node.name);
        node.labels.share(&mut self.strings);
        let name = node.name.clone();
        let upsert = match self.nodes.insert(name.clone(), node) {
            Some(old) => {
                relabel(
                    &mut self.labels,
                    &name,
                    &old.labels,
                    &self.nodes[&name].labels,
                );
                self.release(old);
                Upsert::Updated
            }
            None => {
                for (key, value) in &self.nodes[&name].labels {
                    self.labels.insert(key, value, name.clone());
                }
                Upsert::Created
            }
        };
        upsert.changed(|| key)
    }

    pub(crate) fn remove_node(&mut self, key: &ObjectKey) -> Option<Changed> {
        let name = cluster_name(key)?;
        let node = self.nodes.remove(name)?;
        for (label, value) in &node.labels {
            self.labels.remove(label, value, name);
        }
        self.release(node);
        Some(Changed::new(key.clone(), Change::Deleted))
    }

    /// Hands the strings of a Node that left the index back to the interner.
    fn release(&mut self, node: Node) {
        self.strings.release(node.name);
        for string in node.labels.into_strings() {
            self.strings.release(string);
        }
    }

    pub(crate) fn retain_nodes(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        let gone: Vec<ObjectKey> = self
            .nodes
            .keys()
            .map(|name| ObjectKey::cluster(name.as_str()))
            .filter(|key| !keep.contains(key))
            .collect();
        gone.iter()
            .filter_map(|key| self.remove_node(key))
            .collect()
    }

    pub(crate) fn upsert_node_pool(&mut self, pool: NodePool) -> Option<Changed> {
        let key = ObjectKey::cluster(pool.name.as_str());
        upsert_keyed(&mut self.pools, pool, |pool| &pool.name).changed(|| key)
    }

    pub(crate) fn remove_node_pool(&mut self, key: &ObjectKey) -> Option<Changed> {
        self.pools
            .remove(cluster_name(key)?)
            .map(|_| Changed::new(key.clone(), Change::Deleted))
    }

    pub(crate) fn retain_node_pools(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        retain_keyed(&mut self.pools, keep, |name| {
            ObjectKey::cluster(name.as_str())
        })
    }

    pub(crate) fn upsert_config_map(
        &mut self,
        key: ObjectKey,
        data: BTreeMap<String, String>,
    ) -> Option<Changed> {
        let upsert = match self.config_maps.get_mut(&key) {
            Some(existing) if *existing == data => Upsert::Unchanged,
            Some(existing) => {
                *existing = data;
                Upsert::Updated
            }
            None => {
                self.config_maps.insert(key.clone(), data);
                Upsert::Created
            }
        };
        self.policy_changed(upsert.changed(|| key))
    }

    pub(crate) fn remove_config_map(&mut self, key: &ObjectKey) -> Option<Changed> {
        self.config_maps.remove(key)?;
        self.policy_changed(Some(Changed::new(key.clone(), Change::Deleted)))
    }

    pub(crate) fn retain_config_maps(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        let removed = retain_keyed(&mut self.config_maps, keep, ObjectKey::clone);
        self.policy_changes(removed)
    }

    pub(crate) fn upsert_namespace(&mut self, namespace: Namespace) -> Option<Changed> {
        let key = ObjectKey::cluster(namespace.name.as_str());
        let upsert = upsert_keyed(&mut self.namespaces, namespace, |namespace| &namespace.name);
        self.policy_changed(upsert.changed(|| key))
    }

    pub(crate) fn remove_namespace(&mut self, key: &ObjectKey) -> Option<Changed> {
        self.namespaces.remove(cluster_name(key)?)?;
        self.policy_changed(Some(Changed::new(key.clone(), Change::Deleted)))
    }

    pub(crate) fn retain_namespaces(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        let removed = retain_keyed(&mut self.namespaces, keep, |name| {
            ObjectKey::cluster(name.as_str())
        });
        self.policy_changes(removed)
    }

    pub(crate) fn upsert_exception(&mut self, exception: Exception) -> Option<Changed> {
        let id = (exception.namespace.clone(), exception.name.clone());
        let key = ObjectKey::namespaced(&id.0, &id.1);
        let upsert = match self.exceptions.insert(id.clone(), exception) {
            None => Upsert::Created,
            Some(old) if old == self.exceptions[&id] => Upsert::Unchanged,
            Some(_) => Upsert::Updated,
        };
        upsert.changed(|| key)
    }

    pub(crate) fn remove_exception(&mut self, key: &ObjectKey) -> Option<Changed> {
        let id = (key.namespace.clone()?, key.name.clone());
        self.exceptions.remove(&id)?;
        Some(Changed::new(key.clone(), Change::Deleted))
    }

    pub(crate) fn retain_exceptions(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        retain_keyed(&mut self.exceptions, keep, |(namespace, name)| {
            ObjectKey::namespaced(namespace, name)
        })
    }

    fn policy_changed(&mut self, changed: Option<Changed>) -> Option<Changed> {
        if changed.is_some() {
            self.policy_generation += 1;
        }
        changed
    }

    fn policy_changes(&mut self, changes: Vec<Changed>) -> Vec<Changed> {
        if !changes.is_empty() {
            self.policy_generation += 1;
        }
        changes
    }

    #[cfg(test)]
    pub(crate) fn label_index_entries(&self) -> usize {
        self.labels.member_count()
    }

    /// The distinct Node names, label keys and values stored, each once.
    #[cfg(test)]
    pub(crate) fn shared_strings(&self) -> usize {
        self.strings.len()
    }

    #[cfg(test)]
    pub(crate) fn label_index_keys(&self) -> usize {
        self.labels.outer_count()
    }
}

/// A read view of Nodes, NodePools, ConfigMaps and Namespaces. Iterators yield in name
/// order (label-key queries: grouped by label value, then name order).
pub struct PlacementView<'a> {
    state: RwLockReadGuard<'a, PlacementState>,
    pool_label: &'a str,
    now: i64,
}

impl<'a> PlacementView<'a> {
    pub(crate) fn new(
        state: RwLockReadGuard<'a, PlacementState>,
        pool_label: &'a str,
        now: i64,
    ) -> Self {
        Self {
            state,
            pool_label,
            now,
        }
    }

    /// When the view was taken (seconds since the Unix epoch): an exception
    /// past its `expiresAt` no longer applies from then on.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// The PlacementExceptions of `namespace`, in name order.
    pub fn exceptions_in(&self, namespace: &str) -> impl Iterator<Item = &Exception> {
        let start = (namespace.to_owned(), String::new());
        self.state
            .exceptions
            .range(start..)
            .take_while(move |((ns, _), _)| ns == namespace)
            .map(|(_, exception)| exception)
    }

    /// Every PlacementException, by namespace and name.
    pub fn exceptions(&self) -> impl Iterator<Item = &Exception> {
        self.state.exceptions.values()
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
            .filter_map(|name| self.state.nodes.get(name.as_str()))
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
            .filter_map(|name| self.state.nodes.get(name.as_str()))
    }

    /// The distinct values of label `key` over all nodes, sorted.
    #[cfg(test)]
    pub(crate) fn label_values(&self, key: &str) -> impl Iterator<Item = &str> {
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
    #[cfg(test)]
    pub(crate) fn pool_of_node(&self, node: &str) -> Option<&str> {
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

    /// The NodePools, in name order.
    pub fn node_pools(&self) -> impl Iterator<Item = &NodePool> {
        self.state.pools.values()
    }

    pub fn config_map(&self, key: &ObjectKey) -> Option<&BTreeMap<String, String>> {
        self.state.config_maps.get(key)
    }

    /// The labelled Namespaces, in name order.
    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.state.namespaces.values()
    }

    /// Bumps on every ConfigMap and Namespace change (create, update,
    /// delete), so readers can cache the policy they derive from them.
    pub fn policy_generation(&self) -> u64 {
        self.state.policy_generation
    }
}
