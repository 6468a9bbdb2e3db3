//! The event catalog: every message that crosses the bus.
//!
//! Events say *what happened* and *to which object*, never carry whole
//! Kubernetes objects: state lives in the index.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// The Kubernetes kinds poolkeeper watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum ResourceKind {
    MachineClass,
    Machine,
    NodePool,
    Node,
    ConfigMap,
}

impl ResourceKind {
    pub const ALL: [ResourceKind; 5] = [
        ResourceKind::MachineClass,
        ResourceKind::Machine,
        ResourceKind::NodePool,
        ResourceKind::Node,
        ResourceKind::ConfigMap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::MachineClass => "MachineClass",
            ResourceKind::Machine => "Machine",
            ResourceKind::NodePool => "NodePool",
            ResourceKind::Node => "Node",
            ResourceKind::ConfigMap => "ConfigMap",
        }
    }
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `namespace/name` for namespaced objects, `name` for cluster-scoped ones.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectKey {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Change {
    Created,
    Updated,
    Deleted,
}

/// Why a reconciliation pass was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum TriggerReason {
    /// The quiet period after a burst of changes expired (or `maxDelay` was reached).
    Debounced,
    /// Every watched kind finished its initial list.
    IndexSynchronized,
    /// This replica just became the leader.
    LeadershipGained,
    /// A subscriber lagged behind the bus: changes may have been missed.
    Lagged,
}

impl TriggerReason {
    /// Full triggers re-examine every key instead of only the dirty ones.
    pub fn is_full(self) -> bool {
        !matches!(self, TriggerReason::Debounced)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TriggerReason::Debounced => "debounced",
            TriggerReason::IndexSynchronized => "index_synchronized",
            TriggerReason::LeadershipGained => "leadership_gained",
            TriggerReason::Lagged => "lagged",
        }
    }
}

/// What a MachineClass reconciliation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ClassOutcome {
    FinalizerAdded,
    FinalizerRemoved,
    /// In use (possibly being deleted): finalizer already present, nothing written.
    Unchanged,
    /// Not in use and no finalizer: nothing to do.
    Unused,
    /// The class is gone from the index.
    Gone,
    Conflict,
    Error,
}

impl ClassOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ClassOutcome::FinalizerAdded => "finalizer_added",
            ClassOutcome::FinalizerRemoved => "finalizer_removed",
            ClassOutcome::Unchanged => "unchanged",
            ClassOutcome::Unused => "unused",
            ClassOutcome::Gone => "gone",
            ClassOutcome::Conflict => "conflict",
            ClassOutcome::Error => "error",
        }
    }
}

/// Why a Machine was handed on for reconciliation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum EnqueueReason {
    FinalizerAdded,
    ClassSpecChanged,
    ClassDeleting,
}

impl EnqueueReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EnqueueReason::FinalizerAdded => "finalizer_added",
            EnqueueReason::ClassSpecChanged => "class_spec_changed",
            EnqueueReason::ClassDeleting => "class_deleting",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum WebhookKind {
    Mutate,
    Validate,
}

impl WebhookKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookKind::Mutate => "mutate",
            WebhookKind::Validate => "validate",
        }
    }
}

/// Every event on the bus. The table in this crate's README says who
/// publishes and who consumes each one.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum Event {
    /// An object of a watched kind changed in the index.
    ResourceChanged {
        kind: ResourceKind,
        key: ObjectKey,
        change: Change,
        /// Part of the initial list (or a relist) rather than a live change.
        initial: bool,
    },
    /// A watched kind finished its first list.
    ResourceSynced {
        kind: ResourceKind,
    },
    /// Every watched kind has synced: the index is complete.
    IndexSynchronized,
    WatchFailed {
        kind: ResourceKind,
        error: String,
    },
    WatchRecovered {
        kind: ResourceKind,
    },
    ReconciliationTriggered {
        reason: TriggerReason,
    },
    ReconciliationStarted {
        pass: u64,
        keys: usize,
    },
    ReconciliationCompleted {
        pass: u64,
        #[serde(with = "humantime_serde")]
        duration: Duration,
        writes: usize,
    },
    ReconciliationFailed {
        pass: u64,
        error: String,
    },
    MachineClassReconciled {
        key: ObjectKey,
        outcome: ClassOutcome,
        #[serde(with = "humantime_serde")]
        requeue_after: Duration,
    },
    MachineEnqueued {
        key: ObjectKey,
        reason: EnqueueReason,
    },
    AdmissionDecided {
        webhook: WebhookKind,
        allowed: bool,
        patched: bool,
        reason: String,
    },
    LeadershipChanged {
        leader: bool,
    },
    ShutdownRequested,
}

impl Event {
    /// Names in catalog order; metrics use them as label values.
    pub const NAMES: [&'static str; 14] = [
        "ResourceChanged",
        "ResourceSynced",
        "IndexSynchronized",
        "WatchFailed",
        "WatchRecovered",
        "ReconciliationTriggered",
        "ReconciliationStarted",
        "ReconciliationCompleted",
        "ReconciliationFailed",
        "MachineClassReconciled",
        "MachineEnqueued",
        "AdmissionDecided",
        "LeadershipChanged",
        "ShutdownRequested",
    ];

    /// Position of this event's variant in [`Event::NAMES`].
    pub fn ordinal(&self) -> usize {
        match self {
            Event::ResourceChanged { .. } => 0,
            Event::ResourceSynced { .. } => 1,
            Event::IndexSynchronized => 2,
            Event::WatchFailed { .. } => 3,
            Event::WatchRecovered { .. } => 4,
            Event::ReconciliationTriggered { .. } => 5,
            Event::ReconciliationStarted { .. } => 6,
            Event::ReconciliationCompleted { .. } => 7,
            Event::ReconciliationFailed { .. } => 8,
            Event::MachineClassReconciled { .. } => 9,
            Event::MachineEnqueued { .. } => 10,
            Event::AdmissionDecided { .. } => 11,
            Event::LeadershipChanged { .. } => 12,
            Event::ShutdownRequested => 13,
        }
    }

    pub fn name(&self) -> &'static str {
        Self::NAMES[self.ordinal()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_variants() {
        let samples = [
            Event::ResourceChanged {
                kind: ResourceKind::Node,
                key: ObjectKey::cluster("n1"),
                change: Change::Created,
                initial: false,
            },
            Event::IndexSynchronized,
            Event::ShutdownRequested,
            Event::LeadershipChanged { leader: true },
        ];
        for event in samples {
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json["type"], event.name());
        }
    }

    #[test]
    fn keys_display_like_kubernetes() {
        assert_eq!(ObjectKey::namespaced("ns", "a").to_string(), "ns/a");
        assert_eq!(ObjectKey::cluster("a").to_string(), "a");
    }
}
