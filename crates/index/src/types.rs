//! The compact projections stored in the index.

use std::collections::BTreeMap;
use std::fmt;

use poolkeeper_bus::{Change, ObjectKey};

use crate::{Labels, SharedString};

/// A Node taint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// What the index keeps of a Node. Its name and label strings are shared
/// with every other Node that has the same text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: SharedString,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
}

/// `spec.type` of an OpenYurt NodePool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PoolType {
    /// OpenYurt's default when `spec.type` is missing.
    #[default]
    Edge,
    Cloud,
}

impl PoolType {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolType::Edge => "Edge",
            PoolType::Cloud => "Cloud",
        }
    }
}

impl fmt::Display for PoolType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the index keeps of a NodePool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePool {
    pub name: String,
    pub pool_type: PoolType,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

/// What the index keeps of a Namespace that carries the namespace pool
/// label: its bindings are in its labels; its UID is what a Warning Event
/// about a rejected binding regards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
}

/// What the index keeps of a MachineClass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineClass {
    pub key: ObjectKey,
    /// `metadata.uid`, which Kubernetes Events about the class regard.
    pub uid: String,
    pub finalizers: Vec<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Hash of everything but `metadata` and `status`: tells a spec change
    /// apart from a finalizer or status write.
    pub spec_hash: u64,
    pub resource_version: String,
}

impl MachineClass {
    /// Equal but for `resource_version`: nothing the decision reads changed.
    pub(crate) fn differs_only_in_resource_version(&self, other: &Self) -> bool {
        // Destructured, so that a new field has to be placed on one side or the other.
        let Self {
            key,
            uid,
            finalizers,
            deleting,
            spec_hash,
            resource_version,
        } = self;
        *resource_version != other.resource_version
            && *key == other.key
            && *uid == other.uid
            && *finalizers == other.finalizers
            && *deleting == other.deleting
            && *spec_hash == other.spec_hash
    }
}

/// What the index keeps of a Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub key: ObjectKey,
    /// `spec.class.name`; the class lives in the Machine's namespace.
    pub class_name: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// What one write did to the index. `None` from a write means the index did
/// not change: the projection equals the stored one (a Node heartbeat, a
/// relist of an unchanged object), or the deleted object was not there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub key: ObjectKey,
    pub change: Change,
    /// Other objects whose state this change affects, as the index knew them
    /// before and after the write: for a Machine, the MachineClass it
    /// referenced and the one it references now (deduplicated, in the
    /// Machine's namespace; a Machine without a class name references none);
    /// for a MachineClass, the Secrets of its namespace it referenced and
    /// references now. Empty for the other kinds.
    pub related: Vec<ObjectKey>,
}

impl Changed {
    pub(crate) fn new(key: ObjectKey, change: Change) -> Self {
        Self {
            key,
            change,
            related: Vec::new(),
        }
    }

    pub(crate) fn with_related(mut self, related: Vec<ObjectKey>) -> Self {
        self.related = related;
        self
    }
}

/// What an upsert did to a map of projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Upsert {
    Created,
    Updated,
    /// The projection is equal to the stored one.
    Unchanged,
}

impl Upsert {
    /// The change for the object `key`, `None` when nothing changed.
    pub(crate) fn changed(self, key: impl FnOnce() -> ObjectKey) -> Option<Changed> {
        let change = match self {
            Upsert::Created => Change::Created,
            Upsert::Updated => Change::Updated,
            Upsert::Unchanged => return None,
        };
        Some(Changed::new(key(), change))
    }
}

/// Stores `value` in `map` under the key `key_of` reads from it, and tells
/// what that did. The key is cloned only for a new entry.
pub(crate) fn upsert_keyed<K: Ord + Clone, V: PartialEq>(
    map: &mut BTreeMap<K, V>,
    value: V,
    key_of: impl Fn(&V) -> &K,
) -> Upsert {
    match map.get_mut(key_of(&value)) {
        Some(existing) if *existing == value => Upsert::Unchanged,
        Some(existing) => {
            *existing = value;
            Upsert::Updated
        }
        None => {
            map.insert(key_of(&value).clone(), value);
            Upsert::Created
        }
    }
}

/// Removes from `map` every entry whose key, as `key_of` builds it, is not in
/// `keep`, and returns those keys as deletes, in map order.
pub(crate) fn retain_keyed<K: Ord, V>(
    map: &mut BTreeMap<K, V>,
    keep: &std::collections::HashSet<ObjectKey>,
    key_of: impl Fn(&K) -> ObjectKey,
) -> Vec<Changed> {
    let mut removed = Vec::new();
    map.retain(|key, _| {
        let key = key_of(key);
        let kept = keep.contains(&key);
        if !kept {
            removed.push(Changed::new(key, Change::Deleted));
        }
        kept
    });
    removed
}
