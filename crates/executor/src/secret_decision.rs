//! What to do with one Secret of the MachineClasses' namespace, decided from
//! the index alone: machine-controller-manager's Secret protection
//! (`secret.go`), as a sibling of the MachineClass decision.

use json_patch::Patch;
use poolkeeper_bus::{ClassOutcome, Requeue};
use poolkeeper_index::Secret;

use crate::decision::{ClassDecision, FinalizerPatch};
use crate::patch::finalizers_patch;
use crate::settings::Retries;

/// machine-controller-manager's Secret reconciliation, as a pure function of
/// the Secret's metadata and how many MachineClasses reference it
/// (`secretRef` or `credentialsSecretRef`; a class being deleted still
/// does: it may still need the credentials to delete its machines). A
/// Secret is never written but for its finalizer, and nothing is enqueued.
/// Secrets with the finalizer, or referenced, are looked at again after
/// `longRetry`, as machine-controller-manager does (a class change dirties
/// its Secrets before that). Any other Secret of the namespace is
/// forgotten: only an event can give it something to do (a class that comes
/// to reference it, a change of its own), and each of those dirties it, so
/// the namespace's other Secrets cost no periodic work.
pub(crate) fn decide_secret(
    secret: &Secret,
    referencing_classes: usize,
    finalizer: &str,
    retries: &Retries,
) -> ClassDecision {
    let has_finalizer = secret.finalizers.iter().any(|f| f == finalizer);
    let (patch, outcome, requeue) = match (referencing_classes > 0, secret.deleting) {
        // Referenced: protect it, so that deleting it waits for the classes.
        (true, false) if !has_finalizer => {
            let add = Some(FinalizerPatch::Add);
            (add, ClassOutcome::FinalizerAdded, Requeue::Long)
        }
        // Referenced and protected; or being deleted, when the finalizer is
        // kept and none is added (a deleting object accepts no new ones).
        (true, _) => (None, ClassOutcome::Unchanged, Requeue::Long),
        // No class references it any more: release it, which lets a
        // pending deletion complete.
        (false, _) if has_finalizer => {
            let remove = Some(FinalizerPatch::Remove);
            (remove, ClassOutcome::FinalizerRemoved, Requeue::Long)
        }
        (false, _) => (None, ClassOutcome::Unused, Requeue::Never),
    };
    ClassDecision {
        patch,
        enqueue: None,
        requeue,
        requeue_after: retries.period(requeue),
        outcome,
    }
}

/// The guarded finalizer-only JSON patch of a Secret for `change` (the same
/// guards as a class's: the finalizer list, or the resourceVersion for the
/// first finalizer), or `None` when it would change nothing.
pub(crate) fn secret_patch(
    secret: &Secret,
    change: FinalizerPatch,
    finalizer: &str,
) -> Option<Patch> {
    finalizers_patch(
        &secret.finalizers,
        &secret.resource_version,
        change,
        finalizer,
    )
}

#[cfg(test)]
mod tests {
    use poolkeeper_bus::ObjectKey;
    use poolkeeper_config::Config;
    use serde_json::{Value, json};

    use super::*;
    use crate::settings::ExecutorSettings;

    const FINALIZER: &str = "machine.sapcloud.io/machine-controller";
    const CLASS_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

    fn retries() -> Retries {
        ExecutorSettings::from(&Config::default()).retries
    }

    fn secret(finalizers: &[&str], deleting: bool, resource_version: &str) -> Secret {
        Secret {
            key: ObjectKey::namespaced("machine-system", "cloud"),
            uid: "uid-cloud".into(),
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            deleting,
            resource_version: resource_version.into(),
        }
    }

    #[test]
    fn every_branch() {
        use ClassOutcome as O;
        use FinalizerPatch::{Add, Remove};
        // (what, finalizers, deleting, referencing classes, patch, outcome)
        type Case = (
            &'static str,
            &'static [&'static str],
            bool,
            usize,
            Option<FinalizerPatch>,
            ClassOutcome,
        );
        let cases: [Case; 11] = [
            (
                "referenced, no finalizers: add",
                &[],
                false,
                1,
                Some(Add),
                O::FinalizerAdded,
            ),
            (
                "referenced twice, other finalizers: add ours",
                &["a/b"],
                false,
                2,
                Some(Add),
                O::FinalizerAdded,
            ),
            (
                "referenced and protected: nothing",
                &["a/b", FINALIZER],
                false,
                1,
                None,
                O::Unchanged,
            ),
            (
                "the class finalizer is not the Secret's",
                &[CLASS_FINALIZER],
                false,
                1,
                Some(Add),
                O::FinalizerAdded,
            ),
            (
                "referenced, being deleted, protected: kept",
                &[FINALIZER],
                true,
                1,
                None,
                O::Unchanged,
            ),
            (
                "referenced, being deleted, unprotected: never added to a deleting object",
                &["a/b"],
                true,
                3,
                None,
                O::Unchanged,
            ),
            (
                "unreferenced, protected: release it",
                &[FINALIZER],
                false,
                0,
                Some(Remove),
                O::FinalizerRemoved,
            ),
            (
                "unreferenced, protected among others: release ours",
                &["a/b", FINALIZER, "c/d"],
                false,
                0,
                Some(Remove),
                O::FinalizerRemoved,
            ),
            (
                "unreferenced and being deleted: release it so the deletion completes",
                &[FINALIZER],
                true,
                0,
                Some(Remove),
                O::FinalizerRemoved,
            ),
            (
                "unreferenced, unprotected: nothing",
                &[],
                false,
                0,
                None,
                O::Unused,
            ),
            (
                "unreferenced, only other finalizers: nothing",
                &["a/b"],
                true,
                0,
                None,
                O::Unused,
            ),
        ];
        let retries = retries();
        for (what, finalizers, deleting, classes, patch, outcome) in cases {
            let decision = decide_secret(
                &secret(finalizers, deleting, "7"),
                classes,
                FINALIZER,
                &retries,
            );
            // Only a Secret with nothing to do is forgotten.
            let requeue = if outcome == O::Unused {
                Requeue::Never
            } else {
                Requeue::Long
            };
            let expected = ClassDecision {
                patch,
                enqueue: None,
                requeue,
                requeue_after: retries.period(requeue),
                outcome,
            };
            assert_eq!(decision, expected, "{what}");
        }
    }

    /// A Secret as the API server holds it, with data.
    fn object(finalizers: Option<&[&str]>, resource_version: &str) -> Value {
        let mut object = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "cloud", "namespace": "machine-system", "resourceVersion": resource_version},
            "type": "Opaque",
            "data": {"accessKeyID": "QUtJQQ==", "secretAccessKey": "c2VjcmV0"},
        });
        if let Some(finalizers) = finalizers {
            object["metadata"]["finalizers"] = json!(finalizers);
        }
        object
    }

    fn without_finalizers(mut object: Value) -> Value {
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("finalizers");
        }
        object
    }

    /// Each patch changes the finalizers as asked and nothing else of the
    /// Secret (its data least of all).
    #[test]
    fn patches_touch_only_the_finalizers() {
        type Case = (
            &'static [&'static str],
            Option<&'static [&'static str]>,
            FinalizerPatch,
            &'static [&'static str],
        );
        let cases: [Case; 4] = [
            (&[], None, FinalizerPatch::Add, &[FINALIZER]),
            (
                &["a/b"],
                Some(&["a/b"]),
                FinalizerPatch::Add,
                &["a/b", FINALIZER],
            ),
            (
                &[FINALIZER],
                Some(&[FINALIZER]),
                FinalizerPatch::Remove,
                &[],
            ),
            (
                &["a/b", FINALIZER],
                Some(&["a/b", FINALIZER]),
                FinalizerPatch::Remove,
                &["a/b"],
            ),
        ];
        for (seen, stored, change, after) in cases {
            let patch =
                secret_patch(&secret(seen, false, "5"), change, FINALIZER).expect("a change");
            let before = object(stored, "5");
            let mut patched = before.clone();
            json_patch::patch(&mut patched, &patch).expect("the patch applies");
            assert_eq!(
                patched["metadata"]["finalizers"],
                json!(after),
                "{seen:?} {change:?}"
            );
            assert_eq!(
                without_finalizers(patched),
                without_finalizers(before),
                "{seen:?} {change:?}"
            );
        }
    }

    #[test]
    fn a_stale_index_fails_the_patch_instead_of_clobbering() {
        // The index saw no finalizers; another writer has added one since.
        let patch = secret_patch(&secret(&[], false, "5"), FinalizerPatch::Add, FINALIZER).unwrap();
        let mut stored = object(Some(&["a/b"]), "6");
        let error = json_patch::patch(&mut stored, &patch).unwrap_err();
        assert!(matches!(error.kind, json_patch::PatchErrorKind::TestFailed));
        // The index saw [ours, a/b]; a/b has gone since.
        let patch = secret_patch(
            &secret(&[FINALIZER, "a/b"], false, "5"),
            FinalizerPatch::Remove,
            FINALIZER,
        )
        .unwrap();
        let mut stored = object(Some(&[FINALIZER]), "6");
        let error = json_patch::patch(&mut stored, &patch).unwrap_err();
        assert!(matches!(error.kind, json_patch::PatchErrorKind::TestFailed));
    }

    #[test]
    fn nothing_to_change_means_no_patch() {
        assert!(
            secret_patch(
                &secret(&[FINALIZER], false, "1"),
                FinalizerPatch::Add,
                FINALIZER
            )
            .is_none()
        );
        assert!(
            secret_patch(
                &secret(&["a/b"], false, "1"),
                FinalizerPatch::Remove,
                FINALIZER
            )
            .is_none()
        );
    }
}
