//! Secrets that MachineClasses reference, as machine-controller-manager
//! protects them: the metadata of each Secret of the watched namespace, and
//! which classes reference which Secret (`secretRef`, `credentialsSecretRef`).
//!
//! A Secret enters the index only as kube's `PartialObjectMeta<Secret>` (the
//! watchers use `metadata_watcher`, so the API server sends no data), and its
//! projection has no field that could hold data, labels or annotations:
//! [`IndexResource`](crate::IndexResource) is implemented for the metadata
//! type alone.
//!
//! ```compile_fail,E0277
//! use poolkeeper_index::{Index, IndexResource};
//! // A whole Secret, data included, cannot be written into the index.
//! Index::new("pool").apply(k8s_openapi::api::core::v1::Secret::default());
//! ```
//!
//! ```
//! use kube::core::PartialObjectMeta;
//! use k8s_openapi::api::core::v1::Secret;
//! use poolkeeper_index::{Index, IndexResource};
//! // Its metadata can.
//! Index::new("pool").apply(PartialObjectMeta::<Secret>::default());
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1 as core;
use kube::core::PartialObjectMeta;
use parking_lot::RwLockReadGuard;
use poolkeeper_api as api;
use poolkeeper_bus::{Change, ObjectKey};

use crate::projection::object_key;
use crate::types::{Changed, retain_keyed, upsert_keyed};
use crate::{Index, IndexResource, ResourceKind};

/// What the index keeps of a Secret: its identity and finalizers, nothing
/// of its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Secret {
    pub key: ObjectKey,
    /// `metadata.uid`, which Kubernetes Events about the Secret regard.
    pub uid: String,
    pub finalizers: Vec<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    pub resource_version: String,
}

impl Secret {
    /// Equal but for `resource_version`: a write of the data (or labels,
    /// annotations) that the decision does not read.
    fn differs_only_in_resource_version(&self, other: &Self) -> bool {
        // Destructured, so that a new field has to be placed on one side or the other.
        let Self {
            key,
            uid,
            finalizers,
            deleting,
            resource_version,
        } = self;
        *resource_version != other.resource_version
            && *key == other.key
            && *uid == other.uid
            && *finalizers == other.finalizers
            && *deleting == other.deleting
    }
}

/// Key, UID, finalizers, deletion flag and resourceVersion: everything
/// else of the metadata (labels, annotations, managedFields) is dropped.
impl From<&PartialObjectMeta<core::Secret>> for Secret {
    fn from(secret: &PartialObjectMeta<core::Secret>) -> Self {
        let meta = &secret.metadata;
        Self {
            key: object_key(secret),
            uid: meta.uid.clone().unwrap_or_default(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// The Secrets a MachineClass references through `secretRef` and
/// `credentialsSecretRef`, each once, in the order named.
///
/// A reference without a namespace means the class's own. A reference into
/// another namespace is left out: poolkeeper watches (and may patch)
/// Secrets of the MachineClasses' namespace only, as machine-controller-manager
/// does. A reference without a name references nothing.
pub fn secret_references(class: &api::MachineClass) -> Vec<ObjectKey> {
    let class_namespace = class.metadata.namespace.as_deref().unwrap_or_default();
    let mut keys: Vec<ObjectKey> = Vec::with_capacity(2);
    for reference in [&class.secret_ref, &class.credentials_secret_ref]
        .into_iter()
        .flatten()
    {
        let Some(name) = reference.name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        let namespace = match reference.namespace.as_deref() {
            None | Some("") => class_namespace,
            Some(namespace) if namespace == class_namespace => namespace,
            Some(_) => continue,
        };
        let key = ObjectKey::namespaced(namespace, name);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Secrets are written as metadata only; see the module documentation.
impl IndexResource<PartialObjectMeta<core::Secret>> for Index {
    const KIND: ResourceKind = ResourceKind::Secret;

    fn apply(&self, secret: PartialObjectMeta<core::Secret>) -> Option<Changed> {
        let secret = Secret::from(&secret);
        self.secrets.write().upsert_secret(secret)
    }

    fn delete(&self, key: &ObjectKey) -> Option<Changed> {
        self.secrets.write().remove_secret(key)
    }

    fn retain(&self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        self.secrets.write().retain_secrets(keep)
    }
}

/// The Secrets part of the index: the Secrets of the watched namespace and
/// the references of the MachineClasses to them.
#[derive(Debug, Default)]
pub(crate) struct SecretsState {
    pub(crate) secrets: BTreeMap<ObjectKey, Secret>,
    /// The Secrets each class references (at most two).
    references: HashMap<ObjectKey, Vec<ObjectKey>>,
    /// The classes that reference each Secret; no empty set is kept.
    referrers: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
}

impl SecretsState {
    pub(crate) fn upsert_secret(&mut self, secret: Secret) -> Option<Changed> {
        let key = secret.key.clone();
        // Writes of the data, labels or annotations move only the
        // resourceVersion: kept for the next patch's guard, not reported.
        if let Some(existing) = self.secrets.get_mut(&key)
            && existing.differs_only_in_resource_version(&secret)
        {
            existing.resource_version = secret.resource_version;
            return None;
        }
        upsert_keyed(&mut self.secrets, secret, |secret| &secret.key).changed(|| key)
    }

    pub(crate) fn remove_secret(&mut self, key: &ObjectKey) -> Option<Changed> {
        self.secrets
            .remove(key)
            .map(|_| Changed::new(key.clone(), Change::Deleted))
    }

    pub(crate) fn retain_secrets(&mut self, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
        retain_keyed(&mut self.secrets, keep, ObjectKey::clone)
    }

    /// Records that `class` references `secrets` now, and returns the
    /// Secrets it referenced before or references now (each once): those
    /// whose protection this write may change.
    pub(crate) fn set_references(
        &mut self,
        class: &ObjectKey,
        secrets: Vec<ObjectKey>,
    ) -> Vec<ObjectKey> {
        let before = self.forget_class(class);
        for secret in &secrets {
            self.referrers
                .entry(secret.clone())
                .or_default()
                .insert(class.clone());
        }
        let mut related = before;
        for secret in &secrets {
            if !related.contains(secret) {
                related.push(secret.clone());
            }
        }
        if !secrets.is_empty() {
            self.references.insert(class.clone(), secrets);
        }
        related
    }

    /// Drops the references of `class` (gone from the index) and returns
    /// the Secrets it referenced.
    pub(crate) fn forget_class(&mut self, class: &ObjectKey) -> Vec<ObjectKey> {
        let before = self.references.remove(class).unwrap_or_default();
        for secret in &before {
            if let Some(classes) = self.referrers.get_mut(secret) {
                classes.remove(class);
                if classes.is_empty() {
                    self.referrers.remove(secret);
                }
            }
        }
        before
    }
}

/// A read view of the Secrets and the classes that reference them.
/// Iterators yield in key order.
pub struct SecretsView<'a> {
    state: RwLockReadGuard<'a, SecretsState>,
}

impl<'a> SecretsView<'a> {
    pub(crate) fn new(state: RwLockReadGuard<'a, SecretsState>) -> Self {
        Self { state }
    }

    pub fn secret(&self, key: &ObjectKey) -> Option<&Secret> {
        self.state.secrets.get(key)
    }

    pub fn secrets(&self) -> impl Iterator<Item = &Secret> {
        self.state.secrets.values()
    }

    /// The MachineClasses that reference the Secret `key`, in O(result).
    /// The Secret itself need not exist.
    pub fn referrers(&self, key: &ObjectKey) -> impl Iterator<Item = &ObjectKey> {
        self.state.referrers.get(key).into_iter().flatten()
    }

    /// How many MachineClasses reference the Secret `key`, in O(log n).
    pub fn referrer_count(&self, key: &ObjectKey) -> usize {
        self.state.referrers.get(key).map_or(0, BTreeSet::len)
    }

    /// Every Secret some MachineClass references, whether the index holds
    /// it or not.
    pub fn referenced(&self) -> impl Iterator<Item = &ObjectKey> {
        self.state.referrers.keys()
    }

    /// The Secrets the class `key` references.
    pub fn references_of(&self, class: &ObjectKey) -> &[ObjectKey] {
        self.state.references.get(class).map_or(&[], Vec::as_slice)
    }
}
