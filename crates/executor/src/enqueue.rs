//! Which Machines a MachineClass reconciliation hands on, and when:
//! machine-controller-manager's enqueue semantics since its PR 1056, pure.
//!
//! - Machines with a deletionTimestamp are not enqueued, but still keep
//!   their class in use (deleting a machine needs its class).
//! - A class being deleted while in use is requeued after `shortRetry`; its
//!   Machines are enqueued once, when the deletion is first seen, not on
//!   every retry.

use poolkeeper_bus::EnqueueReason;

use crate::decision::ClassDecision;

/// How the Machines that reference a class use it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MachineUse {
    /// Machines referencing the class, being deleted or not.
    pub(crate) in_use: usize,
    /// Those an enqueue hands on: the ones not being deleted.
    pub(crate) enqueueable: usize,
}

impl MachineUse {
    /// From the deletion flag of each Machine that references the class.
    pub(crate) fn of(deleting: impl IntoIterator<Item = bool>) -> Self {
        deleting
            .into_iter()
            .fold(Self::default(), |counted, deleting| Self {
                in_use: counted.in_use + 1,
                enqueueable: counted.enqueueable + usize::from(!deleting),
            })
    }
}

/// What the reconciliation hands on (one `MachinesEnqueued`): the reason and
/// how many Machines, or nothing when the decision enqueues nothing or every
/// Machine is being deleted.
pub(crate) fn machines_to_enqueue(
    decision: &ClassDecision,
    machines: MachineUse,
) -> Option<(EnqueueReason, usize)> {
    let reason = decision.enqueue?;
    (machines.enqueueable > 0).then_some((reason, machines.enqueueable))
}

/// Whether the Machines have been told of the class's deletion once this
/// reconciliation is done: for as long as the class is being deleted, from
/// the reconciliation whose decision enqueued `ClassDeleting` (even if every
/// Machine was being deleted and none was handed on). A class no longer being
/// deleted (recreated under the same name) starts over.
pub(crate) fn deletion_announced(
    class_deleting: bool,
    announced_before: bool,
    decision: &ClassDecision,
) -> bool {
    class_deleting && (announced_before || decision.enqueue == Some(EnqueueReason::ClassDeleting))
}

#[cfg(test)]
mod tests {
    use poolkeeper_bus::ObjectKey;
    use poolkeeper_config::Config;
    use poolkeeper_index::MachineClass;

    use super::*;
    use crate::decision::decide;
    use crate::settings::ExecutorSettings;

    const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

    fn class(finalizers: &[&str], deleting: bool) -> MachineClass {
        MachineClass {
            key: ObjectKey::namespaced("machine-system", "a"),
            uid: "uid-a".into(),
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            deleting,
            spec_hash: 1,
            resource_version: "3".into(),
        }
    }

    #[test]
    fn machines_being_deleted_keep_the_class_in_use_but_are_not_handed_on() {
        let cases: [(&[bool], MachineUse); 5] = [
            (
                &[],
                MachineUse {
                    in_use: 0,
                    enqueueable: 0,
                },
            ),
            (
                &[false],
                MachineUse {
                    in_use: 1,
                    enqueueable: 1,
                },
            ),
            (
                &[true],
                MachineUse {
                    in_use: 1,
                    enqueueable: 0,
                },
            ),
            (
                &[false, true, false],
                MachineUse {
                    in_use: 3,
                    enqueueable: 2,
                },
            ),
            (
                &[true, true],
                MachineUse {
                    in_use: 2,
                    enqueueable: 0,
                },
            ),
        ];
        for (deleting, expected) in cases {
            assert_eq!(
                MachineUse::of(deleting.iter().copied()),
                expected,
                "{deleting:?}"
            );
        }
    }

    /// One reconciliation of class `a`: what it hands on, and whether the
    /// deletion counts as announced afterwards.
    #[test]
    fn what_one_reconciliation_hands_on() {
        use EnqueueReason as E;
        struct Case {
            what: &'static str,
            finalizers: &'static [&'static str],
            class_deleting: bool,
            /// Deletion flag of each Machine of the class.
            machines: &'static [bool],
            spec_changed: bool,
            announced_before: bool,
            enqueued: Option<(EnqueueReason, usize)>,
            announced_after: bool,
        }
        let cases = [
            Case {
                what: "finalizer just added: the Machines not being deleted",
                finalizers: &[],
                class_deleting: false,
                machines: &[false, true, false],
                spec_changed: false,
                announced_before: false,
                enqueued: Some((E::FinalizerAdded, 2)),
                announced_after: false,
            },
            Case {
                what: "finalizer just added, every Machine being deleted: nothing",
                finalizers: &[],
                class_deleting: false,
                machines: &[true, true],
                spec_changed: false,
                announced_before: false,
                enqueued: None,
                announced_after: false,
            },
            Case {
                what: "steady class: nothing",
                finalizers: &[FINALIZER],
                class_deleting: false,
                machines: &[false],
                spec_changed: false,
                announced_before: false,
                enqueued: None,
                announced_after: false,
            },
            Case {
                what: "spec changed: the Machines not being deleted",
                finalizers: &[FINALIZER],
                class_deleting: false,
                machines: &[false, true],
                spec_changed: true,
                announced_before: false,
                enqueued: Some((E::ClassSpecChanged, 1)),
                announced_after: false,
            },
            Case {
                what: "deletion first seen: enqueued once, announced",
                finalizers: &[FINALIZER],
                class_deleting: true,
                machines: &[false, false, true],
                spec_changed: false,
                announced_before: false,
                enqueued: Some((E::ClassDeleting, 2)),
                announced_after: true,
            },
            Case {
                what: "every shortRetry after: nothing more",
                finalizers: &[FINALIZER],
                class_deleting: true,
                machines: &[false, false, true],
                spec_changed: true,
                announced_before: true,
                enqueued: None,
                announced_after: true,
            },
            Case {
                what: "deletion first seen, every Machine being deleted: announced without an event",
                finalizers: &[FINALIZER],
                class_deleting: true,
                machines: &[true],
                spec_changed: false,
                announced_before: false,
                enqueued: None,
                announced_after: true,
            },
            Case {
                what: "deleting and unused: released, nothing handed on",
                finalizers: &[FINALIZER],
                class_deleting: true,
                machines: &[],
                spec_changed: false,
                announced_before: true,
                enqueued: None,
                announced_after: true,
            },
            Case {
                what: "no longer deleting (recreated): the announcement is forgotten",
                finalizers: &[FINALIZER],
                class_deleting: false,
                machines: &[false],
                spec_changed: false,
                announced_before: true,
                enqueued: None,
                announced_after: false,
            },
        ];
        let retries = ExecutorSettings::from(&Config::default()).retries;
        for case in cases {
            let machines = MachineUse::of(case.machines.iter().copied());
            let decision = decide(
                &class(case.finalizers, case.class_deleting),
                machines.in_use,
                FINALIZER,
                (case.spec_changed, case.announced_before),
                &retries,
            );
            assert_eq!(
                machines_to_enqueue(&decision, machines),
                case.enqueued,
                "{}",
                case.what
            );
            assert_eq!(
                deletion_announced(case.class_deleting, case.announced_before, &decision),
                case.announced_after,
                "{}",
                case.what
            );
        }
    }
}
