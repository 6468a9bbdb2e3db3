//! MachineClasses and Machines: the state the executor reads.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLockReadGuard;
use poolkeeper_bus::{ObjectKey, ResourceKind};

use crate::nested_sets::NestedSets;
use crate::types::{Machine, MachineClass, Upsert, upsert_keyed};

/// Machine keys by namespace, then class name, sharing their keys with the
/// primary map. Class names are only looked up, so a `HashMap` holds them.
type ByClass = NestedSets<HashMap<String, BTreeSet<Arc<ObjectKey>>>>;

/// Machines without a namespace (never seen from the API server) are indexed
/// under this one.
const NO_NAMESPACE: &str = "";

#[derive(Debug, Default)]
pub(crate) struct MachinesState {
    pub(crate) classes: BTreeMap<ObjectKey, MachineClass>,
    pub(crate) machines: BTreeMap<Arc<ObjectKey>, Machine>,
    by_class: ByClass,
}

fn namespace_of(key: &ObjectKey) -> &str {
    key.namespace.as_deref().unwrap_or(NO_NAMESPACE)
}

impl MachinesState {
    pub(crate) fn upsert_class(&mut self, class: MachineClass) -> Upsert {
        upsert_keyed(&mut self.classes, class, |class| &class.key)
    }

    pub(crate) fn upsert_machine(&mut self, machine: Machine) -> Upsert {
        match self.machines.get_key_value(&machine.key) {
            Some((_, existing)) if *existing == machine => Upsert::Unchanged,
            Some((key, existing)) => {
                let key = Arc::clone(key);
                if existing.class_name != machine.class_name {
                    let old_class = existing.class_name.clone();
                    self.unindex(&key, &old_class);
                    self.index(&key, &machine.class_name);
                }
                self.machines.insert(key, machine);
                Upsert::Updated
            }
            None => {
                let key = Arc::new(machine.key.clone());
                self.index(&key, &machine.class_name);
                self.machines.insert(key, machine);
                Upsert::Created
            }
        }
    }

    pub(crate) fn remove_machine(&mut self, key: &ObjectKey) -> Option<Machine> {
        let (key, machine) = self.machines.remove_entry(key)?;
        self.unindex(&key, &machine.class_name);
        Some(machine)
    }

    fn index(&mut self, key: &Arc<ObjectKey>, class_name: &str) {
        self.by_class
            .insert(namespace_of(key), class_name, Arc::clone(key));
    }

    fn unindex(&mut self, key: &ObjectKey, class_name: &str) {
        self.by_class.remove(namespace_of(key), class_name, key);
    }

    pub(crate) fn retain(
        &mut self,
        kind: ResourceKind,
        keep: &HashSet<ObjectKey>,
    ) -> Vec<ObjectKey> {
        let mut removed = Vec::new();
        match kind {
            ResourceKind::MachineClass => {
                self.classes.retain(|key, _| {
                    let kept = keep.contains(key);
                    if !kept {
                        removed.push(key.clone());
                    }
                    kept
                });
            }
            ResourceKind::Machine => {
                let gone: Vec<Arc<ObjectKey>> = self
                    .machines
                    .keys()
                    .filter(|key| !keep.contains(key.as_ref()))
                    .cloned()
                    .collect();
                for key in gone {
                    self.remove_machine(&key);
                    removed.push(ObjectKey::clone(&key));
                }
            }
            ResourceKind::Node | ResourceKind::NodePool | ResourceKind::ConfigMap => {}
        }
        removed
    }

    pub(crate) fn keys(&self, kind: ResourceKind) -> Vec<ObjectKey> {
        match kind {
            ResourceKind::MachineClass => self.classes.keys().cloned().collect(),
            ResourceKind::Machine => self
                .machines
                .keys()
                .map(|key| ObjectKey::clone(key))
                .collect(),
            ResourceKind::Node | ResourceKind::NodePool | ResourceKind::ConfigMap => Vec::new(),
        }
    }

    pub(crate) fn count(&self, kind: ResourceKind) -> usize {
        match kind {
            ResourceKind::MachineClass => self.classes.len(),
            ResourceKind::Machine => self.machines.len(),
            ResourceKind::Node | ResourceKind::NodePool | ResourceKind::ConfigMap => 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn class_index_entries(&self) -> usize {
        self.by_class.member_count()
    }

    #[cfg(test)]
    pub(crate) fn class_index_sets(&self) -> usize {
        self.by_class.set_count()
    }
}

/// A read view of MachineClasses and Machines. Iterators yield in key order.
pub struct MachinesView<'a> {
    state: RwLockReadGuard<'a, MachinesState>,
}

impl<'a> MachinesView<'a> {
    pub(crate) fn new(state: RwLockReadGuard<'a, MachinesState>) -> Self {
        Self { state }
    }

    pub fn machine_class(&self, key: &ObjectKey) -> Option<&MachineClass> {
        self.state.classes.get(key)
    }

    pub fn machine_classes(&self) -> impl Iterator<Item = &MachineClass> {
        self.state.classes.values()
    }

    pub fn machine_class_count(&self) -> usize {
        self.state.classes.len()
    }

    pub fn machine(&self, key: &ObjectKey) -> Option<&Machine> {
        self.state.machines.get(key)
    }

    pub fn machines(&self) -> impl Iterator<Item = &Machine> {
        self.state.machines.values()
    }

    pub fn machine_count(&self) -> usize {
        self.state.machines.len()
    }

    /// Machines in `namespace` whose `spec.class.name` is `class_name`, in
    /// O(result). The class itself need not exist.
    pub fn machines_of_class(
        &self,
        namespace: &str,
        class_name: &str,
    ) -> impl Iterator<Item = &Machine> {
        self.state
            .by_class
            .members(namespace, class_name)
            .into_iter()
            .flatten()
            .filter_map(|key| self.state.machines.get(key.as_ref()))
    }

    /// Number of Machines referencing the class, in O(1).
    pub fn machine_count_of_class(&self, namespace: &str, class_name: &str) -> usize {
        self.state
            .by_class
            .members(namespace, class_name)
            .map_or(0, BTreeSet::len)
    }

    /// The class names referenced by at least one Machine in `namespace`.
    pub fn referenced_classes(&self, namespace: &str) -> impl Iterator<Item = &str> {
        self.state
            .by_class
            .sets_under(namespace)
            .into_iter()
            .flat_map(|classes| classes.keys())
            .map(String::as_str)
    }
}
