//! JSON patches (RFC 6902) that change only `metadata.finalizers`.
//!
//! Each patch first tests the finalizer list as the index saw it. If another
//! writer changed it since, the API server rejects the patch (422 for a failed
//! test) instead of clobbering that writer; the executor retries after
//! `conflictRetry` with fresh index data. Writes to anything else (labels,
//! annotations, status) do not stand in the way. Only the first finalizer of
//! an empty list is guarded by `metadata.resourceVersion`: the API server
//! stores an empty list as no list, which a `test` cannot match.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use poolkeeper_index::MachineClass;
use serde_json::Value;

use crate::decision::FinalizerPatch;

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn finalizers_list(finalizers: &[String]) -> Value {
    Value::Array(finalizers.iter().cloned().map(Value::String).collect())
}

/// The guarded patch for `change`, or `None` when it would change nothing.
pub fn finalizer_patch(
    class: &MachineClass,
    change: FinalizerPatch,
    finalizer: &str,
) -> Option<Patch> {
    finalizers_patch(
        &class.finalizers,
        &class.resource_version,
        change,
        finalizer,
    )
}

/// [`finalizer_patch`] of any object, from its finalizer list and
/// resourceVersion as the index saw them.
pub(crate) fn finalizers_patch(
    finalizers: &[String],
    resource_version: &str,
    change: FinalizerPatch,
    finalizer: &str,
) -> Option<Patch> {
    let present: Vec<usize> = finalizers
        .iter()
        .enumerate()
        .filter(|(_, f)| *f == finalizer)
        .map(|(i, _)| i)
        .collect();
    let mut ops = Vec::new();
    match change {
        FinalizerPatch::Add if !present.is_empty() => return None,
        // An empty list may be absent from the object altogether, where a
        // test on it would fail; `add` on the member creates or replaces it,
        // and the resourceVersion test guards it instead.
        FinalizerPatch::Add if finalizers.is_empty() => {
            if !resource_version.is_empty() {
                ops.push(PatchOperation::Test(TestOperation {
                    path: pointer(&["metadata", "resourceVersion"]),
                    value: Value::String(resource_version.to_owned()),
                }));
            }
            ops.push(PatchOperation::Add(AddOperation {
                path: pointer(&["metadata", "finalizers"]),
                value: Value::Array(vec![Value::String(finalizer.to_owned())]),
            }));
        }
        FinalizerPatch::Add => {
            ops.push(test_finalizers(finalizers));
            ops.push(PatchOperation::Add(AddOperation {
                path: pointer(&["metadata", "finalizers", "-"]),
                value: Value::String(finalizer.to_owned()),
            }));
        }
        FinalizerPatch::Remove if present.is_empty() => return None,
        FinalizerPatch::Remove => {
            ops.push(test_finalizers(finalizers));
            // Highest index first, so that earlier removals do not shift the
            // positions of later ones.
            for i in present.into_iter().rev() {
                ops.push(PatchOperation::Remove(RemoveOperation {
                    path: pointer(&["metadata", "finalizers", &i.to_string()]),
                }));
            }
        }
    }
    Some(Patch(ops))
}

fn test_finalizers(finalizers: &[String]) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path: pointer(&["metadata", "finalizers"]),
        value: finalizers_list(finalizers),
    })
}

#[cfg(test)]
mod tests {
    use poolkeeper_bus::ObjectKey;
    use serde_json::json;

    use super::*;

    const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

    fn class(finalizers: &[&str], resource_version: &str) -> MachineClass {
        MachineClass {
            key: ObjectKey::namespaced("machine-system", "class-a"),
            uid: "uid-class-a".into(),
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            deleting: false,
            spec_hash: 0,
            resource_version: resource_version.into(),
        }
    }

    /// A MachineClass as the API server holds it.
    fn object(finalizers: Option<&[&str]>, resource_version: &str) -> Value {
        let mut object = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {
                "name": "class-a",
                "namespace": "machine-system",
                "resourceVersion": resource_version,
                "labels": {"team": "infra"},
            },
            "providerSpec": {"machineType": "m5.large"},
            "secretRef": {"name": "cloud", "namespace": "machine-system"},
        });
        if let Some(finalizers) = finalizers {
            object["metadata"]["finalizers"] = json!(finalizers);
        }
        object
    }

    fn apply(patch: &Patch, mut object: Value) -> Result<Value, json_patch::PatchError> {
        json_patch::patch(&mut object, patch)?;
        Ok(object)
    }

    fn without_finalizers(mut object: Value) -> Value {
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("finalizers");
        }
        object
    }

    #[test]
    fn add_creates_the_array_when_finalizers_are_absent() {
        let patch = finalizer_patch(&class(&[], "7"), FinalizerPatch::Add, FINALIZER).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        );
        let patched = apply(&patch, object(None, "7")).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!([FINALIZER]));
        let patched = apply(&patch, object(Some(&[]), "7")).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!([FINALIZER]));
    }

    #[test]
    fn add_appends_after_the_other_finalizers() {
        let patch = finalizer_patch(&class(&["a/b"], "7"), FinalizerPatch::Add, FINALIZER).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["a/b"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ])
        );
        let patched = apply(&patch, object(Some(&["a/b"]), "7")).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!(["a/b", FINALIZER]));
    }

    #[test]
    fn remove_keeps_the_other_finalizers_in_order() {
        let current = ["a/b", FINALIZER, "c/d"];
        let patch =
            finalizer_patch(&class(&current, "9"), FinalizerPatch::Remove, FINALIZER).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
        let patched = apply(&patch, object(Some(&current), "9")).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!(["a/b", "c/d"]));
    }

    /// A deposed leader's late patch, computed from what it last read, meets
    /// the object after the new leader wrote it: the finalizer `test` (or
    /// the resourceVersion `test` of a first finalizer) refuses it. Where
    /// the new leader left the list as the old one read it, the test passes:
    /// the finalizers are not fenced by the leader's epoch (poolkeeper owns
    /// only its finalizer on these objects), so that window is closed by the
    /// term guard alone, which stops sending before another replica leads.
    #[test]
    fn a_deposed_leaders_stale_patch_is_refused_once_the_list_moved_on() {
        // The old leader saw no Machine of the class and removes the finalizer;
        // the new leader meanwhile saw one, and another controller's finalizer
        // came: the list the old leader tested is gone.
        let stale =
            finalizer_patch(&class(&[FINALIZER], "9"), FinalizerPatch::Remove, FINALIZER).unwrap();
        let now = object(Some(&[FINALIZER, "c/d"]), "10");
        assert!(apply(&stale, now).is_err(), "the stale removal is refused");

        // A stale first finalizer after the new leader's own write.
        let stale = finalizer_patch(&class(&[], "7"), FinalizerPatch::Add, FINALIZER).unwrap();
        let written = object(Some(&[FINALIZER]), "8");
        assert!(
            apply(&stale, without_finalizers(written)).is_err(),
            "resourceVersion moved on"
        );

        // The list as the old leader read it: the test cannot tell.
        let stale =
            finalizer_patch(&class(&[FINALIZER], "9"), FinalizerPatch::Remove, FINALIZER).unwrap();
        let unchanged = object(Some(&[FINALIZER]), "12");
        assert!(
            apply(&stale, unchanged).is_ok(),
            "unfenced: the term guard's to prevent"
        );
    }

    #[test]
    fn remove_drops_every_copy() {
        let current = [FINALIZER, "a/b", FINALIZER];
        let patch =
            finalizer_patch(&class(&current, "9"), FinalizerPatch::Remove, FINALIZER).unwrap();
        let patched = apply(&patch, object(Some(&current), "9")).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!(["a/b"]));
    }

    #[test]
    fn remove_of_the_only_finalizer_leaves_an_empty_list() {
        let patch =
            finalizer_patch(&class(&[FINALIZER], "9"), FinalizerPatch::Remove, FINALIZER).unwrap();
        let patched = apply(&patch, object(Some(&[FINALIZER]), "9")).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn nothing_to_change_means_no_patch() {
        assert!(
            finalizer_patch(&class(&[FINALIZER], "1"), FinalizerPatch::Add, FINALIZER).is_none()
        );
        assert!(
            finalizer_patch(&class(&["a/b"], "1"), FinalizerPatch::Remove, FINALIZER).is_none()
        );
        assert!(finalizer_patch(&class(&[], "1"), FinalizerPatch::Remove, FINALIZER).is_none());
    }

    #[test]
    fn only_the_finalizers_change() {
        let cases = [
            (class(&[], "3"), FinalizerPatch::Add, object(None, "3")),
            (
                class(&["a/b"], "3"),
                FinalizerPatch::Add,
                object(Some(&["a/b"]), "3"),
            ),
            (
                class(&[FINALIZER, "a/b"], "3"),
                FinalizerPatch::Remove,
                object(Some(&[FINALIZER, "a/b"]), "3"),
            ),
        ];
        for (class, change, before) in cases {
            let patch = finalizer_patch(&class, change, FINALIZER).unwrap();
            let after = apply(&patch, before.clone()).unwrap();
            assert_eq!(without_finalizers(after), without_finalizers(before));
        }
    }

    #[test]
    fn the_first_finalizer_fails_on_a_changed_resource_version() {
        // Another writer may have added its own finalizer since: `add` of the
        // whole list would drop it.
        let patch = finalizer_patch(&class(&[], "3"), FinalizerPatch::Add, FINALIZER).unwrap();
        let err = apply(&patch, object(Some(&["a/b"]), "4")).unwrap_err();
        assert!(matches!(err.kind, json_patch::PatchErrorKind::TestFailed));
    }

    #[test]
    fn other_writes_since_the_read_do_not_fail_a_guarded_list() {
        // Labels or status written since: a new resourceVersion, the same list.
        let cases = [
            (
                class(&["a/b"], "3"),
                FinalizerPatch::Add,
                ["a/b"].as_slice(),
            ),
            (
                class(&[FINALIZER], "3"),
                FinalizerPatch::Remove,
                [FINALIZER].as_slice(),
            ),
        ];
        for (class, change, stored) in cases {
            let patch = finalizer_patch(&class, change, FINALIZER).unwrap();
            assert!(
                apply(&patch, object(Some(stored), "4")).is_ok(),
                "{change:?}"
            );
        }
    }

    #[test]
    fn a_changed_finalizer_list_fails_the_patch() {
        // The index saw ["a/b", ours]; another writer has removed "a/b" since.
        let patch = finalizer_patch(
            &class(&["a/b", FINALIZER], "3"),
            FinalizerPatch::Remove,
            FINALIZER,
        )
        .unwrap();
        let err = apply(&patch, object(Some(&[FINALIZER]), "3")).unwrap_err();
        assert!(matches!(err.kind, json_patch::PatchErrorKind::TestFailed));
    }

    #[test]
    fn finalizers_with_slashes_and_tildes_are_values_not_paths() {
        let odd = "example.com/a~b";
        let patch = finalizer_patch(&class(&[odd], "1"), FinalizerPatch::Add, FINALIZER).unwrap();
        let patched = apply(&patch, object(Some(&[odd]), "1")).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!([odd, FINALIZER]));
    }

    #[test]
    fn without_a_resource_version_the_first_finalizer_is_added_unguarded() {
        let patch = finalizer_patch(&class(&[], ""), FinalizerPatch::Add, FINALIZER).unwrap();
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            ops,
            json!([{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}])
        );
    }
}
