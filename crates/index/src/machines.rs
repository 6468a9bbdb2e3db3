//! MachineClasses and Machines: the state the executor reads.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLockReadGuard;
use poolkeeper_bus::{Change, ObjectKey};

use crate::nested_sets::NestedSets;
use crate::types::{Changed, Machine, MachineClass, retain_keyed, upsert_keyed};

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

/// The MachineClass keys a Machine referenced across one write: each class
/// name once, in the Machine's namespace, empty names left out.
fn class_keys(machine: &ObjectKey, class_names: &[&str]) -> Vec<ObjectKey> {
    let mut keys: Vec<ObjectKey> = Vec::with_capacity(class_names.len());
    for name in class_names.iter().filter(|name| !name.is_empty()) {
        if !keys.iter().any(|key| key.name == *name) {
            keys.push(ObjectKey {
                namespace: machine.namespace.clone(),
                name: (*name).to_owned(),
            });
        }
    }
    keys
}

fn machine_changed(key: &ObjectKey, change: Change, class_names: &[&str]) -> Changed {
    Changed {
        key: key.clone(),
        change,
        related: class_keys(key, class_names),
    }
}

impl MachinesState {
    pub(crate) fn upsert_class(&mut self, class: MachineClass) -> Option<Changed> {
        let key = class.key.clone();
        // Another controller's writes (labels, annotations, status) move only the
        // resourceVersion. It is kept for the next patch's guard but not reported, or
        // each such write would start the debounce of the class over.
        if let Some(existing) = self.classes.get_mut(&key)
            && existing.differs_only_in_resource_version(&class)
        {
            existing.resource_version = class.resource_version;
            return None;
        }
        upsert_keyed(&mut self.classes, class, |class| &class.key).changed(|| key)
    }

    pub(crate) fn remove_class(&mut self, key: &ObjectKey) -> Option<Changed> {
        self.classes
            .remove(key)
            .map(|_| Changed::new(key.clone(), Change::Deleted))
    }

    pub(crate) fn retain_classes(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        retain_keyed(&mut self.classes, keep, ObjectKey::clone)
    }

    pub(crate) fn upsert_machine(&mut self, machine: Machine) -> Option<Changed> {
        match self.machines.get_key_value(&machine.key) {
            Some((_, existing)) if *existing == machine => None,
            Some((key, existing)) => {
                let key = Arc::clone(key);
                let old_class = existing.class_name.clone();
                let changed =
                    machine_changed(&key, Change::Updated, &[&old_class, &machine.class_name]);
                if old_class != machine.class_name {
                    self.unindex(&key, &old_class);
                    self.index(&key, &machine.class_name);
                }
                self.machines.insert(key, machine);
                Some(changed)
            }
            None => {
                let key = Arc::new(machine.key.clone());
                let changed = machine_changed(&key, Change::Created, &[&machine.class_name]);
                self.index(&key, &machine.class_name);
                self.machines.insert(key, machine);
                Some(changed)
            }
        }
    }

    pub(crate) fn remove_machine(&mut self, key: &ObjectKey) -> Option<Changed> {
        let (key, machine) = self.machines.remove_entry(key)?;
        self.unindex(&key, &machine.class_name);
        Some(machine_changed(
            &key,
            Change::Deleted,
            &[&machine.class_name],
        ))
    }

    pub(crate) fn retain_machines(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        let gone: Vec<Arc<ObjectKey>> = self
            .machines
            .keys()
            .filter(|key| !keep.contains(key.as_ref()))
            .cloned()
            .collect();
        gone.iter()
            .filter_map(|key| self.remove_machine(key))
            .collect()
    }

    fn index(&mut self, key: &Arc<ObjectKey>, class_name: &str) {
        self.by_class
            .insert(namespace_of(key), class_name, Arc::clone(key));
    }

    fn unindex(&mut self, key: &ObjectKey, class_name: &str) {
        self.by_class.remove(namespace_of(key), class_name, key);
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

    pub fn machine(&self, key: &ObjectKey) -> Option<&Machine> {
        self.state.machines.get(key)
    }

    pub fn machines(&self) -> impl Iterator<Item = &Machine> {
        self.state.machines.values()
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
    #[cfg(test)]
    pub(crate) fn referenced_classes(&self, namespace: &str) -> impl Iterator<Item = &str> {
        self.state
            .by_class
            .sets_under(namespace)
            .into_iter()
            .flat_map(|classes| classes.keys())
            .map(String::as_str)
    }
}
