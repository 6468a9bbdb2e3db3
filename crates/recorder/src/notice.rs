//! The pure part: which bus events call for which Kubernetes Event.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::Resource;
use kube::runtime::events::{Event as KubeEvent, EventType};
use poolkeeper_api::MachineClass;
use poolkeeper_bus::{
    AuditViolation, BindingRejection, ClassOutcome, Event, ObjectKey, RejectedBinding,
};

use crate::secret_notice::{Referrers, secret_notice, secret_reference};
use crate::settings::RecorderSettings;

/// The API server's limit on an Event's `note`, in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// One Kubernetes Event to write, apart from the object it regards.
///
/// `reason` and `action` are short PascalCase identifiers (at most 128
/// characters): `kubectl describe` shows `reason` as Reason and `note` as
/// Message. Events of the same object with the same type, reason and action
/// are one Event object whose series counts the repetitions; the note of the
/// first one stays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub type_: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

impl Notice {
    pub fn normal(reason: &'static str, action: &'static str, note: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            action,
            note: note.into(),
        }
    }

    pub fn warning(reason: &'static str, action: &'static str, note: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            action,
            note: note.into(),
        }
    }

    /// kube's form of it, with the note cut to what the API server accepts.
    pub(crate) fn to_kube(&self) -> KubeEvent {
        KubeEvent {
            type_: self.type_,
            reason: self.reason.to_owned(),
            note: Some(truncate(&self.note, MAX_NOTE_BYTES).to_owned()),
            action: self.action.to_owned(),
            secondary: None,
        }
    }
}

/// The Event a MachineClass reconciliation calls for: finalizer changes and
/// failures. Settled classes, conflicts (retried within moments) and classes
/// that are gone call for none, so periodic passes write nothing.
pub fn class_notice(
    outcome: ClassOutcome,
    requeue_after: Duration,
    settings: &RecorderSettings,
) -> Option<Notice> {
    let why = FinalizerWhy {
        added: || "Machines use this MachineClass".to_owned(),
        removed: "no Machine uses this MachineClass",
    };
    finalizer_notice(outcome, &settings.finalizer, why, requeue_after)
}

/// Why a finalizer was added (built only when it was) and removed.
pub(crate) struct FinalizerWhy<F: FnOnce() -> String> {
    pub(crate) added: F,
    pub(crate) removed: &'static str,
}

/// The Event a finalizer reconciliation (of a class or a Secret) calls for:
/// the finalizer added or removed, or a failed write; every other outcome
/// is no news.
pub(crate) fn finalizer_notice<F: FnOnce() -> String>(
    outcome: ClassOutcome,
    finalizer: &str,
    why: FinalizerWhy<F>,
    requeue_after: Duration,
) -> Option<Notice> {
    match outcome {
        ClassOutcome::FinalizerAdded => Some(Notice::normal(
            "FinalizerAdded",
            "AddFinalizer",
            format!("Added finalizer {finalizer}: {}", (why.added)()),
        )),
        ClassOutcome::FinalizerRemoved => Some(Notice::normal(
            "FinalizerRemoved",
            "RemoveFinalizer",
            format!("Removed finalizer {finalizer}: {}", why.removed),
        )),
        ClassOutcome::Error => Some(Notice::warning(
            "ReconcileFailed",
            "UpdateFinalizers",
            format!(
                "Updating finalizer {finalizer} failed (the poolkeeper log has the API server's \
                 answer); retrying every {}",
                humantime::format_duration(requeue_after)
            ),
        )),
        ClassOutcome::Unchanged
        | ClassOutcome::Unused
        | ClassOutcome::Gone
        | ClassOutcome::Conflict => None,
    }
}

/// The objects and Events a bus event calls for: a MachineClass or Secret
/// whose finalizer changed or whose reconciliation failed, each violation the
/// audit found for the first time, each Namespace label binding newly
/// rejected.
pub fn notices_for(event: &Event, settings: &RecorderSettings) -> Vec<(ObjectReference, Notice)> {
    match event {
        Event::MachineClassReconciled {
            key,
            uid,
            outcome,
            requeue_after,
            ..
        } => class_notice(*outcome, *requeue_after, settings)
            .map(|notice| (class_reference(key, uid.clone()), notice))
            .into_iter()
            .collect(),
        Event::SecretReconciled {
            key,
            uid,
            classes,
            named,
            outcome,
            requeue_after,
            ..
        } => {
            let referrers = Referrers {
                count: *classes,
                named,
            };
            secret_notice(*outcome, referrers, *requeue_after, settings)
                .map(|notice| (secret_reference(key, uid.clone()), notice))
                .into_iter()
                .collect()
        }
        Event::AuditCompleted { violations, .. } => violations
            .iter()
            .filter(|violation| violation.first_found)
            .map(|violation| (audit_reference(violation), audit_notice(violation)))
            .collect(),
        Event::BindingsRejected { rejected } => rejected
            .iter()
            .filter(|rejected| rejected.first_found)
            .map(|rejected| (namespace_reference(rejected), binding_notice(rejected)))
            .collect(),
        Event::AdmissionPolicyProblem {
            kind,
            name,
            uid,
            message,
        } => vec![(
            policy_reference(kind, name, uid),
            Notice::warning("PolicyProblem", "Admit", message.clone()),
        )],
        _ => Vec::new(),
    }
}

/// A cluster-scoped admission policy of the CEL engine (its Event is
/// written in `default`, as Kubernetes does for cluster-scoped objects).
pub fn policy_reference(kind: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("admissionregistration.k8s.io/v1".to_owned()),
        kind: Some(kind.to_owned()),
        namespace: None,
        name: Some(name.to_owned()),
        uid: Some(uid.to_owned()).filter(|uid| !uid.is_empty()),
        field_path: None,
        resource_version: None,
    }
}

/// The Namespace whose labels were rejected; its Event is written in the
/// Namespace itself, where `kubectl describe namespace` finds it.
pub fn namespace_reference(rejected: &RejectedBinding) -> ObjectReference {
    ObjectReference {
        api_version: Some(Namespace::api_version(&()).into_owned()),
        kind: Some(Namespace::kind(&()).into_owned()),
        namespace: Some(rejected.namespace.clone()),
        name: Some(rejected.namespace.clone()),
        uid: Some(rejected.uid.clone()).filter(|uid| !uid.is_empty()),
        field_path: None,
        resource_version: None,
    }
}

/// The Warning for a rejected label binding: why it takes no effect.
pub fn binding_notice(rejected: &RejectedBinding) -> Notice {
    let reason = match rejected.reason {
        BindingRejection::Conflict => "BindingConflict",
        BindingRejection::Excluded => "BindingExcluded",
        BindingRejection::Invalid => "BindingInvalid",
    };
    Notice::warning(
        reason,
        "Bind",
        format!("The namespace's labels bind nothing: {}", rejected.message),
    )
}

/// The Event action of the audit's Warnings.
pub const AUDIT_ACTION: &str = "Audit";

/// The object a violation is about, with its UID (how `kubectl describe`
/// finds its Events).
pub fn audit_reference(violation: &AuditViolation) -> ObjectReference {
    ObjectReference {
        api_version: Some(violation.api_version.to_owned()),
        kind: Some(violation.kind.to_owned()),
        namespace: Some(violation.namespace.clone()),
        name: Some(violation.name.clone()),
        uid: Some(violation.uid.clone()).filter(|uid| !uid.is_empty()),
        field_path: None,
        resource_version: None,
    }
}

/// The Warning for a violation: the validating webhook's reason (as
/// PascalCase) and message, and the binding's mode.
pub fn audit_notice(violation: &AuditViolation) -> Notice {
    let reason = match violation.reason {
        "outside_pool" => "OutsidePool",
        "no_matching_node" => "NoMatchingNode",
        "missing_edge_tolerations" => "MissingEdgeTolerations",
        "label_outside_binding" => "LabelOutsideBinding",
        _ => "PlacementViolation",
    };
    Notice::warning(
        reason,
        AUDIT_ACTION,
        format!("{} (binding mode {})", violation.message, violation.mode),
    )
}

/// The `regarding` reference of a MachineClass. `kubectl describe` finds
/// an object's Events by its UID, so it is left out only for a class that
/// is already gone. No resourceVersion: repetitions must regard the same
/// reference to form a series.
pub fn class_reference(key: &ObjectKey, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(MachineClass::api_version(&()).into_owned()),
        kind: Some(MachineClass::kind(&()).into_owned()),
        namespace: key.namespace.clone(),
        name: Some(key.name.clone()),
        uid,
        field_path: None,
        resource_version: None,
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
pub(crate) mod tests {
    use poolkeeper_bus::{Change, IntoEnumIterator, Requeue, ResourceKind};
    use poolkeeper_config::Config;

    use super::*;

    fn settings() -> RecorderSettings {
        let mut config = Config::default();
        config.machine_classes.finalizer = "example.com/protect".to_owned();
        RecorderSettings::from(&config)
    }

    fn reconciled(outcome: ClassOutcome, requeue: Requeue, after: Duration) -> Event {
        Event::MachineClassReconciled {
            key: ObjectKey::namespaced("machine-system", "worker"),
            uid: Some("uid-worker".into()),
            outcome,
            requeue,
            requeue_after: after,
            duration: Duration::from_millis(3),
        }
    }

    /// The type, reason and action of an expected Event.
    pub(crate) type Expected = Option<(EventType, &'static str, &'static str)>;

    /// The Event each outcome calls for, for a class and a Secret alike.
    pub(crate) const OUTCOMES: [(ClassOutcome, Expected); 7] = [
        (
            ClassOutcome::FinalizerAdded,
            Some((EventType::Normal, "FinalizerAdded", "AddFinalizer")),
        ),
        (
            ClassOutcome::FinalizerRemoved,
            Some((EventType::Normal, "FinalizerRemoved", "RemoveFinalizer")),
        ),
        (
            ClassOutcome::Error,
            Some((EventType::Warning, "ReconcileFailed", "UpdateFinalizers")),
        ),
        (ClassOutcome::Unchanged, None),
        (ClassOutcome::Unused, None),
        (ClassOutcome::Gone, None),
        (ClassOutcome::Conflict, None),
    ];

    #[test]
    fn each_outcome_maps_to_its_event_or_none() {
        assert_eq!(
            OUTCOMES.len(),
            ClassOutcome::iter().count(),
            "every outcome in the table"
        );
        for (outcome, expected) in OUTCOMES {
            let event = reconciled(outcome, Requeue::Short, Duration::from_secs(5));
            let actual = notices_for(&event, &settings()).pop();
            match (expected, actual) {
                (None, None) => {}
                (Some((type_, reason, action)), Some((regarding, notice))) => {
                    assert_eq!(
                        regarding,
                        class_reference(
                            &ObjectKey::namespaced("machine-system", "worker"),
                            Some("uid-worker".into())
                        ),
                        "the UID comes with the event"
                    );
                    assert_eq!(
                        (notice.type_, notice.reason, notice.action),
                        (type_, reason, action),
                        "{outcome}"
                    );
                }
                (expected, actual) => panic!("{outcome}: expected {expected:?}, got {actual:?}"),
            }
        }
    }

    #[test]
    fn notes_name_the_finalizer_and_the_retry() {
        let settings = settings();
        let added = class_notice(ClassOutcome::FinalizerAdded, Duration::ZERO, &settings).unwrap();
        assert_eq!(
            added.note,
            "Added finalizer example.com/protect: Machines use this MachineClass"
        );
        let removed =
            class_notice(ClassOutcome::FinalizerRemoved, Duration::ZERO, &settings).unwrap();
        assert_eq!(
            removed.note,
            "Removed finalizer example.com/protect: no Machine uses this MachineClass"
        );
        let failed = class_notice(ClassOutcome::Error, Duration::from_secs(5), &settings).unwrap();
        assert!(
            failed
                .note
                .starts_with("Updating finalizer example.com/protect failed")
        );
        assert!(
            failed.note.ends_with("retrying every 5s"),
            "{}",
            failed.note
        );
    }

    #[test]
    fn newly_rejected_label_bindings_get_a_warning_on_their_namespace() {
        let rejected = |namespace: &str, reason, first_found| RejectedBinding {
            namespace: namespace.to_owned(),
            uid: format!("uid-{namespace}"),
            reason,
            message: format!("{namespace} is wrong"),
            first_found,
        };
        let event = Event::BindingsRejected {
            rejected: vec![
                rejected("shop", BindingRejection::Conflict, true),
                rejected("kube-system", BindingRejection::Excluded, true),
                rejected("web", BindingRejection::Invalid, false),
            ],
        };
        let notices: Vec<(String, String, &str, String)> = notices_for(&event, &settings())
            .into_iter()
            .map(|(reference, notice)| {
                assert_eq!(reference.kind.as_deref(), Some("Namespace"));
                assert_eq!(reference.namespace, reference.name);
                assert_eq!(notice.type_, EventType::Warning);
                (
                    reference.name.unwrap(),
                    reference.uid.unwrap(),
                    notice.reason,
                    notice.note,
                )
            })
            .collect();
        assert_eq!(
            notices,
            [
                (
                    "shop".to_owned(),
                    "uid-shop".to_owned(),
                    "BindingConflict",
                    "The namespace's labels bind nothing: shop is wrong".to_owned()
                ),
                (
                    "kube-system".to_owned(),
                    "uid-kube-system".to_owned(),
                    "BindingExcluded",
                    "The namespace's labels bind nothing: kube-system is wrong".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn an_admission_policy_problem_gets_a_warning_on_the_policy() {
        for (uid, expected_uid) in [("uid-1", Some("uid-1")), ("", None)] {
            let event = Event::AdmissionPolicyProblem {
                kind: "ValidatingAdmissionPolicy".to_owned(),
                name: "poolkeeper-placement-enforce".to_owned(),
                uid: uid.to_owned(),
                message: "spec.validations[0].expression: undefined field 'nodeNam'".to_owned(),
            };
            let notices = notices_for(&event, &settings());
            assert_eq!(notices.len(), 1);
            let (reference, notice) = &notices[0];
            assert_eq!(
                reference.api_version.as_deref(),
                Some("admissionregistration.k8s.io/v1")
            );
            assert_eq!(reference.kind.as_deref(), Some("ValidatingAdmissionPolicy"));
            assert_eq!(
                reference.name.as_deref(),
                Some("poolkeeper-placement-enforce")
            );
            assert_eq!(reference.namespace, None);
            assert_eq!(reference.uid.as_deref(), expected_uid);
            assert_eq!(notice.type_, EventType::Warning);
            assert_eq!(notice.reason, "PolicyProblem");
            assert!(notice.note.contains("nodeNam"), "{}", notice.note);
        }
    }

    #[test]
    fn other_bus_events_call_for_nothing() {
        let key = ObjectKey::namespaced("machine-system", "worker");
        let events = [
            Event::ResourceChanged {
                kind: ResourceKind::MachineClass,
                key: key.clone(),
                change: Change::Updated,
                initial: false,
                related: Vec::new(),
            },
            Event::MachinesEnqueued {
                class: key,
                reason: poolkeeper_bus::EnqueueReason::FinalizerAdded,
                machines: 2,
            },
            Event::ReconciliationCompleted {
                pass: 1,
                duration: Duration::ZERO,
                writes: 1,
                failed: 1,
            },
            Event::LeadershipChanged { leader: true },
        ];
        for event in events {
            assert_eq!(notices_for(&event, &settings()), [], "{}", event.name());
        }
    }

    #[test]
    fn class_reference_has_the_identity_kubectl_matches() {
        let key = ObjectKey::namespaced("machine-system", "worker");
        let reference = class_reference(&key, Some("0f3c".to_owned()));
        assert_eq!(
            reference,
            ObjectReference {
                api_version: Some("machine.sapcloud.io/v1alpha1".to_owned()),
                kind: Some("MachineClass".to_owned()),
                namespace: Some("machine-system".to_owned()),
                name: Some("worker".to_owned()),
                uid: Some("0f3c".to_owned()),
                field_path: None,
                resource_version: None,
            }
        );
        assert_eq!(class_reference(&key, None).uid, None);
    }

    #[test]
    fn notes_are_cut_to_the_api_limit_at_a_character_boundary() {
        let short = Notice::warning("R", "A", "fine");
        assert_eq!(short.to_kube().note.as_deref(), Some("fine"));
        // 'é' is two bytes: 1023 of them would end mid-character at 1024.
        let long = Notice::warning("R", "A", "x".to_owned() + &"é".repeat(1023));
        let note = long.to_kube().note.unwrap();
        assert_eq!(note.len(), 1023);
        assert!(note.starts_with('x') && note.ends_with('é'));
        let kube = long.to_kube();
        assert_eq!(
            (
                kube.type_,
                kube.reason.as_str(),
                kube.action.as_str(),
                kube.secondary
            ),
            (EventType::Warning, "R", "A", None)
        );
    }
}
