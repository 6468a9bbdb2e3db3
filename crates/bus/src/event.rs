//! The event catalog: every message that crosses the bus.
//!
//! Events say *what happened* and *to which object*, never carry whole
//! Kubernetes objects: state lives in the index. Every event has a consumer
//! (the table in this crate's README); the metrics observer derives the
//! Prometheus metrics from them, so each thing that happens is recorded once.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The derives every label-like enum of the catalog shares: its label value
/// (`as_str`, snake_case unless the enum says otherwise) and the list of its
/// variants (`strum::IntoEnumIterator::iter`).
macro_rules! label_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
            strum::IntoStaticStr, strum::EnumIter,
        )]
        $(#[$meta])*
        $vis enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// The value this variant has as a metric label.
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

label_enum! {
    /// The Kubernetes kinds poolkeeper watches.
    pub enum ResourceKind {
        MachineClass,
        Machine,
        NodePool,
        Node,
        ConfigMap,
        /// Metadata only: a Secret's data never reaches poolkeeper.
        Secret,
        /// Only Namespaces carrying the namespace pool label
        /// (`placement.namespaceLabels.pool`): their bindings.
        Namespace,
        /// poolkeeper's own exceptions to the bindings, in every namespace.
        PlacementException,
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

label_enum! {
    #[strum(serialize_all = "snake_case")]
    pub enum Change {
        Created,
        Updated,
        Deleted,
    }
}

label_enum! {
    /// Why a reconciliation pass was asked for.
    #[strum(serialize_all = "snake_case")]
    pub enum TriggerReason {
        /// The quiet period after a burst of changes expired (or `maxDelay` was reached).
        Debounced,
        /// This replica just became the leader.
        LeadershipGained,
        /// A subscriber lagged behind the bus: changes may have been missed.
        Lagged,
    }
}

impl TriggerReason {
    /// Full triggers re-examine every key instead of only the dirty ones.
    pub fn is_full(self) -> bool {
        !matches!(self, TriggerReason::Debounced)
    }
}

label_enum! {
    /// What a MachineClass reconciliation did (and a Secret's: the same
    /// finalizer outcomes).
    #[strum(serialize_all = "snake_case")]
    pub enum ClassOutcome {
        FinalizerAdded,
        FinalizerRemoved,
        /// In use (possibly being deleted): finalizer already present, nothing written.
        Unchanged,
        /// Not in use and no finalizer: nothing to do.
        Unused,
        /// The class is gone from the index.
        Gone,
        /// The write lost a race with another writer; retried after `conflictRetry`.
        Conflict,
        /// The write failed; retried after `shortRetry`.
        Error,
    }
}

impl ClassOutcome {
    /// The outcomes that wrote to the API server successfully.
    pub fn wrote(self) -> bool {
        matches!(
            self,
            ClassOutcome::FinalizerAdded | ClassOutcome::FinalizerRemoved
        )
    }
}

label_enum! {
    /// Which retry period a reconciliation asked for (`executor.*Retry`).
    #[strum(serialize_all = "snake_case")]
    pub enum Requeue {
        /// `shortRetry`: after an API failure, or while a deleted class is in use.
        Short,
        /// `longRetry`: the periodic re-check of a settled class.
        Long,
        /// `conflictRetry`: after a write conflict.
        Conflict,
        /// Not requeued: the class is gone.
        Never,
    }
}

label_enum! {
    /// Why a Machine was handed on for reconciliation.
    #[strum(serialize_all = "snake_case")]
    pub enum EnqueueReason {
        FinalizerAdded,
        ClassSpecChanged,
        ClassDeleting,
    }
}

label_enum! {
    /// Why a Namespace's label binding takes no effect.
    #[strum(serialize_all = "snake_case")]
    pub enum BindingRejection {
        /// The policy ConfigMap binds the namespace differently; the
        /// ConfigMap's binding applies.
        Conflict,
        /// The namespace is excluded from placement.
        Excluded,
        /// A label value is not a pool list, mode or constraints value.
        Invalid,
    }
}

/// A Namespace whose labels would bind it, and why they do not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RejectedBinding {
    pub namespace: String,
    /// The Namespace's UID, for the Warning Event that regards it.
    pub uid: String,
    pub reason: BindingRejection,
    pub message: String,
    /// Not rejected (for this reason) when the event was last published:
    /// the recorder writes its Warning Event.
    pub first_found: bool,
}

label_enum! {
    #[strum(serialize_all = "snake_case")]
    pub enum WebhookKind {
        Mutate,
        Validate,
    }
}

label_enum! {
    /// What an admission request came to.
    #[strum(serialize_all = "snake_case")]
    pub enum AdmissionResult {
        /// Allowed unchanged.
        Allowed,
        /// Allowed with a JSON patch.
        Patched,
        Denied,
        /// Not an AdmissionReview the webhook could read: answered with an
        /// HTTP error status.
        Invalid,
    }
}

label_enum! {
    /// What a binding does with a Pod (or Pod template) that brings its own
    /// node constraints (`placement.defaultConstraints`, or a binding's own
    /// `constraints`). A `nodeName` is never rewritten.
    #[strum(serialize_all = "snake_case")]
    #[serde(rename_all = "lowercase")]
    pub enum Constraints {
        /// Judge the Pod as written: its own constraints must keep it in
        /// the pool, or it is denied.
        Judge,
        /// AND the pool requirement into every required node-selector term
        /// (as OpenYurt's Pod webhook does), then judge the narrowed Pod.
        Narrow,
    }
}

label_enum! {
    /// How a binding's decisions take effect (`placement.defaultMode`, or a
    /// binding's own `mode`).
    #[strum(serialize_all = "snake_case")]
    #[serde(rename_all = "lowercase")]
    pub enum Mode {
        /// Patch and deny (DESIGN §7).
        Enforce,
        /// Patch; admit what would be denied, with the denial as a warning.
        Warn,
        /// Neither patch nor deny: only count and log the decision.
        Dryrun,
    }
}

/// Results an audit round keeps per namespace for its OpenReports `Report`
/// (`AuditCompleted.results`): an object is at most 1.5 MiB, and a result
/// takes about 500 bytes. The report's summary counts every violation.
pub const REPORT_RESULTS_PER_NAMESPACE: usize = 1000;

/// A Pod the audit found outside its pool, or a workload whose Pod
/// template would be denied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditViolation {
    pub namespace: String,
    /// The Pod's name, or `Kind/name` of a workload.
    pub pod: String,
    /// The object, for the Warning Event that regards it: `Pod` or the
    /// workload's kind, its `apiVersion`, name and UID.
    pub kind: &'static str,
    pub api_version: &'static str,
    pub name: String,
    pub uid: String,
    /// The binding's mode (violations count in every mode).
    pub mode: Mode,
    /// Found for the first time (this object and reason were not a violation
    /// in the previous round): the recorder writes its Warning Event.
    pub first_found: bool,
    pub pool: String,
    /// The validating webhook's reason for the same Pod.
    pub reason: &'static str,
    /// The node it runs on, when it is scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The denial message, as the validating webhook would give it.
    pub message: String,
}

/// How many Pods of one namespace and pool violate placement for one reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditCount {
    pub namespace: String,
    pub pool: String,
    pub reason: &'static str,
    pub pods: usize,
}

/// Every event on the bus. The table in this crate's README says who
/// publishes and who consumes each one.
#[derive(Clone, Debug, PartialEq, Serialize, strum::EnumDiscriminants)]
#[serde(tag = "type")]
#[strum_discriminants(name(EventName), derive(strum::IntoStaticStr, strum::EnumIter, Hash))]
pub enum Event {
    /// An object of a watched kind changed in the index.
    ResourceChanged {
        kind: ResourceKind,
        key: ObjectKey,
        change: Change,
        /// Part of the initial list (or a relist) rather than a live change.
        initial: bool,
        /// Other objects whose state this change affects, as the index knew
        /// them before and after it: for a Machine, the MachineClass it
        /// referenced and the one it references now; for a MachineClass, the
        /// Secrets of its namespace it referenced and references now
        /// (`secretRef`, `credentialsSecretRef`). Empty for other kinds.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        related: Vec<ObjectKey>,
    },
    /// A watched kind finished its first list.
    ResourceSynced {
        kind: ResourceKind,
    },
    /// Every watched kind has synced: the index is complete.
    IndexSynchronized,
    /// A watch of `kind` failed; it is retried.
    WatchFailed {
        kind: ResourceKind,
        error: String,
    },
    /// A watch of `kind` works again after [`Event::WatchFailed`].
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
    /// A pass ended; `failed` of its `keys` classes ended in an API error.
    ReconciliationCompleted {
        pass: u64,
        #[serde(with = "humantime_serde")]
        duration: Duration,
        writes: usize,
        failed: usize,
    },
    MachineClassReconciled {
        key: ObjectKey,
        /// The class's UID as the index held it; `None` once it is gone.
        uid: Option<String>,
        outcome: ClassOutcome,
        requeue: Requeue,
        #[serde(with = "humantime_serde")]
        requeue_after: Duration,
        #[serde(with = "humantime_serde")]
        duration: Duration,
    },
    /// A Secret referenced by MachineClasses was reconciled: its finalizer
    /// (`machineClasses.secretFinalizer`) kept, added or removed. The
    /// outcomes are those of a class.
    SecretReconciled {
        key: ObjectKey,
        /// The Secret's UID as the index held it; `None` once it is gone.
        uid: Option<String>,
        /// How many MachineClasses reference it.
        classes: usize,
        /// The first of them (a few names at most), for the Event's note.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        named: Vec<String>,
        outcome: ClassOutcome,
        requeue: Requeue,
        #[serde(with = "humantime_serde")]
        requeue_after: Duration,
        #[serde(with = "humantime_serde")]
        duration: Duration,
    },
    /// The Machines of one class handed on, once per class and pass.
    MachinesEnqueued {
        class: ObjectKey,
        reason: EnqueueReason,
        /// How many: the class's Machines that are not being deleted.
        machines: usize,
    },
    AdmissionDecided {
        webhook: WebhookKind,
        result: AdmissionResult,
        /// The binding's mode; `Enforce` for Pods without a binding.
        mode: Mode,
        /// The decision's reason, or why the request was invalid.
        reason: &'static str,
        /// Time spent on the request, from its body being read to its
        /// response being built.
        #[serde(with = "humantime_serde")]
        duration: Duration,
    },
    /// PlacementExceptions changed an admission (published after its
    /// `AdmissionDecided`, only when some applied).
    ExceptionsApplied {
        webhook: WebhookKind,
        /// `namespace/name` of each exception that applied.
        exceptions: Vec<String>,
    },
    /// An audit round ended: every Pod of the bound namespaces and every
    /// Pod with the pool label was checked against the current index.
    AuditCompleted {
        /// Pods checked.
        pods: usize,
        #[serde(with = "humantime_serde")]
        duration: Duration,
        /// Every violation, counted by namespace, pool and reason.
        counts: Vec<AuditCount>,
        /// The first violations found (`audit.maxReported`), for
        /// `/debug/audit` and the recorder's Warning Events.
        violations: Vec<AuditViolation>,
        /// More violations were found than `violations` holds.
        truncated: bool,
        /// With `audit.reports`, every violation, grouped by namespace, at
        /// most [`REPORT_RESULTS_PER_NAMESPACE`] of each namespace (the
        /// reports writer's results); empty otherwise. Shared, not copied,
        /// by every subscriber; left out of `/debug/events`.
        #[serde(skip)]
        results: Arc<[AuditViolation]>,
    },
    /// The Namespace label bindings that take no effect changed: every one
    /// of them, each with its reason (empty once none is left).
    BindingsRejected {
        rejected: Vec<RejectedBinding>,
    },
    /// One of the CEL engine's admission policies has a problem the API
    /// server found: it refused the object (an expression does not
    /// compile), or its type checking flags an expression (published once
    /// per new or changed problem); or the API server counted new errors
    /// while evaluating a policy or a webhook configuration's match
    /// conditions (published once per read that found them).
    AdmissionPolicyProblem {
        /// `MutatingAdmissionPolicy` or `ValidatingAdmissionPolicy`, or
        /// `Mutating`/`ValidatingWebhookConfiguration` for a match condition.
        kind: String,
        name: String,
        /// Empty when the object was refused and so has none.
        uid: String,
        message: String,
    },
    LeadershipChanged {
        leader: bool,
    },
    /// The webhook serves a (new) certificate: when it and the CA that
    /// signed it expire, as seconds since the Unix epoch (`None` when no CA
    /// beside it signed it).
    CertificateServed {
        leaf_not_after: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        ca_not_after: Option<i64>,
    },
    ShutdownRequested,
}

impl EventName {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl Event {
    pub fn name(&self) -> &'static str {
        EventName::from(self).as_str()
    }
}

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator;

    use super::*;

    #[test]
    fn serialized_type_is_the_event_name() {
        let samples = [
            Event::ResourceChanged {
                kind: ResourceKind::Node,
                key: ObjectKey::cluster("n1"),
                change: Change::Created,
                initial: false,
                related: Vec::new(),
            },
            Event::IndexSynchronized,
            Event::ShutdownRequested,
            Event::LeadershipChanged { leader: true },
            Event::CertificateServed {
                leaf_not_after: 1,
                ca_not_after: None,
            },
            Event::AdmissionDecided {
                webhook: WebhookKind::Mutate,
                result: AdmissionResult::Patched,
                mode: Mode::Enforce,
                reason: "placed",
                duration: Duration::from_micros(10),
            },
            Event::ExceptionsApplied {
                webhook: WebhookKind::Validate,
                exceptions: vec!["shop/probe".to_owned()],
            },
        ];
        for event in samples {
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json["type"], event.name());
        }
    }

    #[test]
    fn every_event_has_a_distinct_name() {
        let names: Vec<&str> = EventName::iter().map(EventName::as_str).collect();
        assert_eq!(names.len(), 19);
        let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len());
        assert_eq!(names[0], "ResourceChanged");
    }

    #[test]
    fn label_values_are_snake_case_except_kinds() {
        assert_eq!(
            TriggerReason::LeadershipGained.as_str(),
            "leadership_gained"
        );
        assert_eq!(ClassOutcome::FinalizerAdded.as_str(), "finalizer_added");
        assert_eq!(Requeue::Conflict.as_str(), "conflict");
        assert_eq!(
            EnqueueReason::ClassSpecChanged.as_str(),
            "class_spec_changed"
        );
        assert_eq!(WebhookKind::Validate.as_str(), "validate");
        assert_eq!(AdmissionResult::Invalid.as_str(), "invalid");
        assert_eq!(ResourceKind::MachineClass.as_str(), "MachineClass");
        assert_eq!(ResourceKind::iter().count(), 8);
        assert_eq!(
            ResourceKind::PlacementException.as_str(),
            "PlacementException"
        );
        assert_eq!(ResourceKind::Secret.as_str(), "Secret");
        assert_eq!(ResourceKind::Namespace.as_str(), "Namespace");
        assert_eq!(BindingRejection::Conflict.as_str(), "conflict");
    }

    #[test]
    fn keys_display_like_kubernetes() {
        assert_eq!(ObjectKey::namespaced("ns", "a").to_string(), "ns/a");
        assert_eq!(ObjectKey::cluster("a").to_string(), "a");
    }
}
