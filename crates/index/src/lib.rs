//! The in-memory state of poolkeeper: compact projections of the watched
//! Kubernetes objects plus secondary indexes that answer the hot questions in
//! O(result).
//!
//! The store is split in independently locked parts so that Machine churn
//! never makes the admission webhook wait:
//! - **placement**: Nodes, NodePools, ConfigMaps and the labelled
//!   Namespaces (read by the webhook);
//! - **machines**: MachineClasses and Machines (read by the executor);
//! - **secrets**: the metadata of the Secrets of the MachineClasses'
//!   namespace and which classes reference each (read by the executor).
//!
//! Writers hand in Kubernetes objects through [`IndexResource`] (`apply`,
//! `delete`, `reset`); the conversions to projections live in this crate, so
//! the watchers and the offline objects file of `poolkeeper admit` cannot
//! disagree. Readers take a short-lived view ([`Index::placement`],
//! [`Index::machines`]) that holds a read lock and must not be kept across an
//! `.await`. No I/O happens here.

mod exception;
mod labels;
mod machines;
mod nested_sets;
mod node_summary;
mod placement;
mod projection;
mod resource;
mod secrets;
mod shared;
mod types;

use std::fmt;

use parking_lot::RwLock;
use poolkeeper_bus::IntoEnumIterator;

pub use exception::{Exception, LabelSelector, Requirement, SelectorOperator};
pub use labels::Labels;
pub use machines::MachinesView;
pub use node_summary::{NodeConditionSummary, NodeSummary};
pub use placement::PlacementView;
pub use poolkeeper_bus::{Change, ObjectKey, ResourceKind};
pub use projection::object_key;
pub use resource::IndexResource;
pub use secrets::{Secret, SecretsView, secret_references};
pub use shared::SharedString;
pub use types::{Changed, Machine, MachineClass, Namespace, Node, NodePool, PoolType, Taint};

use machines::MachinesState;
use placement::PlacementState;
use secrets::SecretsState;

/// The shared in-memory state. Share it as `Arc<Index>`.
pub struct Index {
    pool_label: String,
    placement: RwLock<PlacementState>,
    machines: RwLock<MachinesState>,
    secrets: RwLock<SecretsState>,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Index");
        s.field("pool_label", &self.pool_label);
        for (kind, count) in self.object_counts() {
            s.field(kind.as_str(), &count);
        }
        s.finish()
    }
}

impl Index {
    /// An empty index. A Node belongs to pool `P` when it carries the label
    /// `pool_label=P`; this is the one place poolkeeper keeps that label.
    pub fn new(pool_label: &str) -> Self {
        Self {
            pool_label: pool_label.to_owned(),
            placement: RwLock::new(PlacementState::default()),
            machines: RwLock::new(MachinesState::default()),
            secrets: RwLock::new(SecretsState::default()),
        }
    }

    /// The label that assigns a Node to a pool (and a Pod that names its
    /// pool itself).
    pub fn pool_label(&self) -> &str {
        &self.pool_label
    }

    /// How many objects of each kind the index holds, every kind listed.
    /// Takes each half's read lock briefly, one after the other, and counts
    /// map lengths: cheap enough for a metrics scrape.
    pub fn object_counts(&self) -> Vec<(ResourceKind, usize)> {
        ResourceKind::iter()
            .map(|kind| (kind, self.object_count(kind)))
            .collect()
    }

    /// How many objects of `kind` the index holds.
    pub fn object_count(&self, kind: ResourceKind) -> usize {
        match kind {
            ResourceKind::MachineClass => self.machines.read().classes.len(),
            ResourceKind::Machine => self.machines.read().machines.len(),
            ResourceKind::NodePool => self.placement.read().pools.len(),
            ResourceKind::Node => self.placement.read().nodes.len(),
            ResourceKind::ConfigMap => self.placement.read().config_maps.len(),
            ResourceKind::Secret => self.secrets.read().secrets.len(),
            ResourceKind::Namespace => self.placement.read().namespaces.len(),
            ResourceKind::PlacementException => self.placement.read().exceptions.len(),
        }
    }

    /// A consistent read view of Nodes, NodePools, ConfigMaps and
    /// Namespaces. Holds a
    /// read lock: drop it before any `.await`.
    pub fn placement(&self) -> PlacementView<'_> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs().try_into().unwrap_or(i64::MAX));
        self.placement_at(now)
    }

    /// [`Index::placement`] as of `now` (seconds since the Unix epoch), the
    /// time that decides which exceptions have expired.
    pub fn placement_at(&self, now: i64) -> PlacementView<'_> {
        PlacementView::new(self.placement.read(), &self.pool_label, now)
    }

    /// A consistent read view of MachineClasses and Machines. Holds a read
    /// lock: drop it before any `.await`.
    pub fn machines(&self) -> MachinesView<'_> {
        MachinesView::new(self.machines.read())
    }

    /// A consistent read view of the Secrets and the MachineClasses'
    /// references to them. Holds a read lock: drop it before any `.await`.
    pub fn secrets(&self) -> SecretsView<'_> {
        SecretsView::new(self.secrets.read())
    }
}

#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
