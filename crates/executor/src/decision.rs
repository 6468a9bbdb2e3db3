//! What to do with one MachineClass, decided from the index alone.

use std::time::Duration;

use poolkeeper_bus::{ClassOutcome, EnqueueReason, Requeue};
use poolkeeper_index::MachineClass;

use crate::settings::Retries;
use crate::writer::WriteError;

/// The change to the class's finalizers, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerPatch {
    Add,
    Remove,
}

/// The outcome of [`decide`]: at most one write, at most one round of
/// Machine enqueues, and when to look at the class again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassDecision {
    pub patch: Option<FinalizerPatch>,
    pub enqueue: Option<EnqueueReason>,
    pub requeue: Requeue,
    pub requeue_after: Duration,
    /// What the reconciliation did once the patch (if any) is written.
    pub outcome: ClassOutcome,
}

impl ClassDecision {
    fn new(
        patch: Option<FinalizerPatch>,
        enqueue: Option<EnqueueReason>,
        requeue: Requeue,
        outcome: ClassOutcome,
        retries: &Retries,
    ) -> Self {
        Self {
            patch,
            enqueue,
            requeue,
            requeue_after: retries.period(requeue),
            outcome,
        }
    }
}

/// machine-controller-manager's MachineClass reconciliation, as a pure
/// function of the class, how many Machines reference it, whether its spec
/// changed since this executor last saw it, and whether its Machines were
/// already enqueued for its deletion.
pub fn decide(
    class: &MachineClass,
    machines_in_use: usize,
    finalizer: &str,
    (spec_changed, deletion_enqueued): (bool, bool),
    retries: &Retries,
) -> ClassDecision {
    let has_finalizer = class.finalizers.iter().any(|f| f == finalizer);
    match (machines_in_use > 0, class.deleting) {
        // In use: protect the class. The Machines only need another look
        // when the class just became protected or its spec changed.
        (true, false) if !has_finalizer => ClassDecision::new(
            Some(FinalizerPatch::Add),
            Some(EnqueueReason::FinalizerAdded),
            Requeue::Long,
            ClassOutcome::FinalizerAdded,
            retries,
        ),
        (true, false) => ClassDecision::new(
            None,
            spec_changed.then_some(EnqueueReason::ClassSpecChanged),
            Requeue::Long,
            ClassOutcome::Unchanged,
            retries,
        ),
        // Being deleted while still in use: keep the finalizer (a deleting
        // object accepts no new finalizers, so none is added either) and look
        // again soon. The Machines are told once, when the deletion is first
        // seen, not on every short retry (machine-controller-manager's PR 1056).
        (true, true) => ClassDecision::new(
            None,
            (!deletion_enqueued).then_some(EnqueueReason::ClassDeleting),
            Requeue::Short,
            ClassOutcome::Unchanged,
            retries,
        ),
        // Unused: release the class, which lets a pending deletion proceed.
        (false, _) if has_finalizer => ClassDecision::new(
            Some(FinalizerPatch::Remove),
            None,
            Requeue::Long,
            ClassOutcome::FinalizerRemoved,
            retries,
        ),
        (false, _) => ClassDecision::new(None, None, Requeue::Long, ClassOutcome::Unused, retries),
    }
}

/// The outcome and retry of a reconciliation whose write failed. Nothing
/// is enqueued: the decision did not take effect.
pub(crate) fn after_write_error(error: &WriteError, retries: &Retries) -> ClassDecision {
    let (requeue, outcome) = match error {
        WriteError::Conflict(_) => (Requeue::Conflict, ClassOutcome::Conflict),
        WriteError::Api(_) | WriteError::Timeout(_) | WriteError::NotNamespaced(_) => {
            (Requeue::Short, ClassOutcome::Error)
        }
        // Leadership is being given up: the component stops before the
        // retry is due, and the next leader reconciles every class anyway.
        WriteError::NotLeader(_) => (Requeue::Short, ClassOutcome::Error),
        // The index still has it: check again soon, by then the watch has
        // most likely removed it.
        WriteError::NotFound => (Requeue::Short, ClassOutcome::Gone),
    };
    ClassDecision::new(None, None, requeue, outcome, retries)
}

#[cfg(test)]
mod tests {
    use poolkeeper_bus::ObjectKey;
    use poolkeeper_config::Config;

    use super::*;
    use crate::fake::{bare_unprocessable, status};
    use crate::settings::ExecutorSettings;

    const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

    fn configured_retries() -> Retries {
        ExecutorSettings::from(&Config::default()).retries
    }

    fn class(finalizers: &[&str], deleting: bool) -> MachineClass {
        MachineClass {
            key: ObjectKey::namespaced("machine-system", "class-a"),
            uid: "uid-class-a".into(),
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            deleting,
            spec_hash: 1,
            resource_version: "7".into(),
        }
    }

    struct Case {
        name: &'static str,
        finalizers: &'static [&'static str],
        deleting: bool,
        machines: usize,
        spec_changed: bool,
        patch: Option<FinalizerPatch>,
        enqueue: Option<EnqueueReason>,
        requeue: Requeue,
        outcome: ClassOutcome,
    }

    #[test]
    fn every_branch() {
        use ClassOutcome as O;
        use EnqueueReason as E;
        use FinalizerPatch::{Add, Remove};
        let cases = [
            Case {
                name: "in use, no finalizers at all: add it and enqueue",
                finalizers: &[],
                deleting: false,
                machines: 3,
                spec_changed: false,
                patch: Some(Add),
                enqueue: Some(E::FinalizerAdded),
                requeue: Requeue::Long,
                outcome: O::FinalizerAdded,
            },
            Case {
                name: "in use, only other finalizers: add ours",
                finalizers: &["example.com/other"],
                deleting: false,
                machines: 1,
                spec_changed: false,
                patch: Some(Add),
                enqueue: Some(E::FinalizerAdded),
                requeue: Requeue::Long,
                outcome: O::FinalizerAdded,
            },
            Case {
                name: "in use, finalizer just added and spec changed: one enqueue",
                finalizers: &[],
                deleting: false,
                machines: 1,
                spec_changed: true,
                patch: Some(Add),
                enqueue: Some(E::FinalizerAdded),
                requeue: Requeue::Long,
                outcome: O::FinalizerAdded,
            },
            Case {
                name: "in use, finalizer among others, steady: nothing",
                finalizers: &["a/b", FINALIZER, "c/d"],
                deleting: false,
                machines: 2,
                spec_changed: false,
                patch: None,
                enqueue: None,
                requeue: Requeue::Long,
                outcome: O::Unchanged,
            },
            Case {
                name: "in use, finalizer present, spec changed: enqueue only",
                finalizers: &[FINALIZER],
                deleting: false,
                machines: 2,
                spec_changed: true,
                patch: None,
                enqueue: Some(E::ClassSpecChanged),
                requeue: Requeue::Long,
                outcome: O::Unchanged,
            },
            Case {
                name: "deleting and in use: keep the finalizer, enqueue, short retry",
                finalizers: &[FINALIZER],
                deleting: true,
                machines: 2,
                spec_changed: false,
                patch: None,
                enqueue: Some(E::ClassDeleting),
                requeue: Requeue::Short,
                outcome: O::Unchanged,
            },
            Case {
                name: "deleting and in use without our finalizer: no add to a deleting object",
                finalizers: &["example.com/other"],
                deleting: true,
                machines: 1,
                spec_changed: true,
                patch: None,
                enqueue: Some(E::ClassDeleting),
                requeue: Requeue::Short,
                outcome: O::Unchanged,
            },
            Case {
                name: "unused with the finalizer: remove it",
                finalizers: &[FINALIZER],
                deleting: false,
                machines: 0,
                spec_changed: false,
                patch: Some(Remove),
                enqueue: None,
                requeue: Requeue::Long,
                outcome: O::FinalizerRemoved,
            },
            Case {
                name: "unused, finalizer among others: remove ours",
                finalizers: &["a/b", FINALIZER, "c/d"],
                deleting: false,
                machines: 0,
                spec_changed: true,
                patch: Some(Remove),
                enqueue: None,
                requeue: Requeue::Long,
                outcome: O::FinalizerRemoved,
            },
            Case {
                name: "deleting and unused: remove it so the deletion proceeds",
                finalizers: &[FINALIZER],
                deleting: true,
                machines: 0,
                spec_changed: false,
                patch: Some(Remove),
                enqueue: None,
                requeue: Requeue::Long,
                outcome: O::FinalizerRemoved,
            },
            Case {
                name: "unused, no finalizers at all: no write",
                finalizers: &[],
                deleting: false,
                machines: 0,
                spec_changed: false,
                patch: None,
                enqueue: None,
                requeue: Requeue::Long,
                outcome: O::Unused,
            },
            Case {
                name: "unused, only other finalizers: no write",
                finalizers: &["example.com/other"],
                deleting: true,
                machines: 0,
                spec_changed: false,
                patch: None,
                enqueue: None,
                requeue: Requeue::Long,
                outcome: O::Unused,
            },
            Case {
                name: "a similar finalizer is not ours",
                finalizers: &["machine.sapcloud.io/machine-controller"],
                deleting: false,
                machines: 1,
                spec_changed: false,
                patch: Some(Add),
                enqueue: Some(E::FinalizerAdded),
                requeue: Requeue::Long,
                outcome: O::FinalizerAdded,
            },
        ];
        let retries = configured_retries();
        for case in cases {
            let decision = decide(
                &class(case.finalizers, case.deleting),
                case.machines,
                FINALIZER,
                (case.spec_changed, false),
                &retries,
            );
            let expected = ClassDecision {
                patch: case.patch,
                enqueue: case.enqueue,
                requeue: case.requeue,
                requeue_after: retries.period(case.requeue),
                outcome: case.outcome,
            };
            assert_eq!(decision, expected, "{}", case.name);
        }
    }

    /// A class being deleted while in use keeps its finalizer and is looked
    /// at again after the short retry; its Machines are enqueued once.
    #[test]
    fn a_deleting_class_enqueues_its_machines_once() {
        let retries = configured_retries();
        let deleting = class(&[FINALIZER], true);
        let first = decide(&deleting, 2, FINALIZER, (false, false), &retries);
        assert_eq!(first.enqueue, Some(EnqueueReason::ClassDeleting));
        for spec_changed in [false, true] {
            let again = decide(&deleting, 2, FINALIZER, (spec_changed, true), &retries);
            assert_eq!(again.enqueue, None);
            assert_eq!(again.patch, None);
            assert_eq!(again.requeue, Requeue::Short);
        }
    }

    #[test]
    fn requeue_periods_follow_the_settings() {
        let retries = Retries {
            short_retry: Duration::from_secs(1),
            long_retry: Duration::from_secs(2),
            conflict_retry: Duration::from_secs(3),
        };
        let in_use = decide(
            &class(&[FINALIZER], false),
            1,
            FINALIZER,
            (false, false),
            &retries,
        );
        assert_eq!(in_use.requeue_after, Duration::from_secs(2));
        let deleting = decide(
            &class(&[FINALIZER], true),
            1,
            FINALIZER,
            (false, false),
            &retries,
        );
        assert_eq!(deleting.requeue_after, Duration::from_secs(1));
        let conflict = after_write_error(&WriteError::Conflict(bare_unprocessable()), &retries);
        assert_eq!(conflict.requeue_after, Duration::from_secs(3));
    }

    #[test]
    fn write_errors_map_to_retries() {
        let retries = configured_retries();
        let cases = [
            (
                WriteError::Conflict(bare_unprocessable()),
                Requeue::Conflict,
                ClassOutcome::Conflict,
            ),
            (
                WriteError::Api(kube::Error::Api(status(500, "InternalError", "etcd down"))),
                Requeue::Short,
                ClassOutcome::Error,
            ),
            (
                WriteError::Timeout(Duration::from_secs(30)),
                Requeue::Short,
                ClassOutcome::Error,
            ),
            (
                WriteError::NotNamespaced(ObjectKey::cluster("class-a")),
                Requeue::Short,
                ClassOutcome::Error,
            ),
            (WriteError::NotFound, Requeue::Short, ClassOutcome::Gone),
            (
                WriteError::NotLeader(poolkeeper_supervisor::NotLeader::NoTerm),
                Requeue::Short,
                ClassOutcome::Error,
            ),
        ];
        for (error, requeue, outcome) in cases {
            let decision = after_write_error(&error, &retries);
            assert_eq!(
                decision,
                ClassDecision {
                    patch: None,
                    enqueue: None,
                    requeue,
                    requeue_after: retries.period(requeue),
                    outcome,
                },
                "{error}"
            );
        }
    }
}
