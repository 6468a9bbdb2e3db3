//! Fencing of the objects poolkeeper alone owns, pure: the leader's term
//! epoch (the Lease's `leaseTransitions`) kept in the annotation
//! [`LEADER_EPOCH_ANNOTATION`] and tested by every JSON patch, so that the API
//! server itself refuses a write a deposed leader had in flight.
//!
//! A Lease alone does not fence: a leader paused or cut off past its term may
//! still have a request on the wire. With the epoch on the object, the first
//! write of a new term *stamps* the new epoch (guarded by what it read), and
//! every later write `test`s it; an older term's write tests an older epoch
//! and fails with 422. A replica that reads an epoch newer than its own does
//! not write at all ([`Deposed`]).
//!
//! Writes that cannot carry a `test` (server-side apply, replace, delete) are
//! fenced by the resourceVersion instead ([`version_precondition`]): the object
//! as this term last read or wrote it, whose epoch is not newer than the term's,
//! and whose applied content [`stamp`]s the term's epoch. A newer term's first
//! write stamps its epoch, which changes the resourceVersion: the older term's
//! late apply, replace or delete then fails with 409. An object read as absent
//! is fenced by its name alone: only a create (`AlreadyExists`) is refused once
//! a newer term created it.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// The annotation holding the epoch of the last term that wrote the object.
pub const LEADER_EPOCH_ANNOTATION: &str = "poolkeeper.io/leader-epoch";

/// The object carries a newer leader's epoch: this replica was deposed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the object carries leader epoch {stored}, newer than this replica's {ours}: \
     a newer leader owns it"
)]
pub struct Deposed {
    pub stored: i64,
    pub ours: i64,
}

/// The preconditions (and, in a term's first write, the stamp) of one
/// patch of a fenced object.
#[derive(Clone, Debug, PartialEq)]
pub struct Fence {
    ops: Vec<PatchOperation>,
    /// The operations write the epoch: the object must be patched even when
    /// nothing else of it changes, so that older terms are locked out.
    stamps: bool,
}

impl Fence {
    /// The fence for a patch by the term `epoch` of an object read with
    /// `annotations` at `resource_version`.
    pub fn new(
        annotations: Option<&BTreeMap<String, String>>,
        resource_version: Option<&str>,
        epoch: i64,
    ) -> Result<Self, Deposed> {
        let stored = annotations.and_then(|a| a.get(LEADER_EPOCH_ANNOTATION));
        not_newer(annotations, epoch)?;
        let ours = Value::String(epoch.to_string());
        let annotation = pointer(&["metadata", "annotations", LEADER_EPOCH_ANNOTATION]);
        let Some(stored) = stored else {
            // A `test` cannot match a missing member: the resourceVersion
            // guards the first stamp instead.
            let mut ops: Vec<PatchOperation> = resource_version
                .map(|version| test(pointer(&["metadata", "resourceVersion"]), version.into()))
                .into_iter()
                .collect();
            ops.push(match annotations {
                Some(_) => add(annotation, ours),
                None => add(
                    pointer(&["metadata", "annotations"]),
                    serde_json::json!({ LEADER_EPOCH_ANNOTATION: ours }),
                ),
            });
            return Ok(Self { ops, stamps: true });
        };
        match stored_epoch(annotations) {
            Some(stored) if stored == epoch => Ok(Self {
                ops: vec![test(annotation, ours)],
                stamps: false,
            }),
            _ => Ok(Self {
                ops: vec![
                    test(annotation.clone(), Value::String(stored.clone())),
                    add(annotation, ours),
                ],
                stamps: true,
            }),
        }
    }

    /// Whether this fence writes the epoch (the term's first write).
    pub fn stamps(&self) -> bool {
        self.stamps
    }

    /// `changes` behind the fence: the patch to send, or `None` when there
    /// is neither a change nor an epoch to stamp.
    pub fn around(self, changes: Option<Patch>) -> Option<Patch> {
        if changes.is_none() && !self.stamps {
            return None;
        }
        let mut ops = self.ops;
        ops.extend(changes.into_iter().flat_map(|patch| patch.0));
        Some(Patch(ops))
    }
}

/// The epoch stored in `annotations`, if readable: an unreadable one is no
/// newer term's, and is stamped over.
fn stored_epoch(annotations: Option<&BTreeMap<String, String>>) -> Option<i64> {
    annotations
        .and_then(|a| a.get(LEADER_EPOCH_ANNOTATION))
        .and_then(|stored| stored.trim().parse::<i64>().ok())
}

/// [`Deposed`] when `annotations` carry an epoch newer than `epoch`.
fn not_newer(annotations: Option<&BTreeMap<String, String>>, epoch: i64) -> Result<(), Deposed> {
    match stored_epoch(annotations) {
        Some(stored) if stored > epoch => Err(Deposed {
            stored,
            ours: epoch,
        }),
        _ => Ok(()),
    }
}

/// The resourceVersion a server-side apply, replace or delete by the term
/// `epoch` must carry as its precondition, for an object this term last read
/// or wrote with `annotations` at `resource_version` (`None`: it was absent,
/// only its name fences it). [`Deposed`] when it carries a newer epoch.
pub fn version_precondition(
    annotations: Option<&BTreeMap<String, String>>,
    resource_version: Option<&str>,
    epoch: i64,
) -> Result<Option<String>, Deposed> {
    not_newer(annotations, epoch)?;
    Ok(resource_version.map(str::to_owned))
}

/// Writes the term `epoch` into the object's metadata, and the precondition
/// `resource_version` (see [`version_precondition`]): the content of a
/// fenced apply or replace.
pub fn stamp(metadata: &mut ObjectMeta, epoch: i64, resource_version: Option<String>) {
    metadata
        .annotations
        .get_or_insert_default()
        .insert(LEADER_EPOCH_ANNOTATION.to_owned(), epoch.to_string());
    metadata.resource_version = resource_version;
}

/// Whether `error` is the API server refusing a fenced write: a failed `test`
/// (422) or a resourceVersion that changed (409). The writer re-reads the
/// object: a newer epoch on it means it was deposed and must stop writing.
pub fn refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409 || status.code == 422)
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn test(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path, value })
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stored(annotations: Option<Value>) -> Value {
        let mut object = json!({
            "metadata": {"name": "poolkeeper", "resourceVersion": "41"},
            "webhooks": [{"name": "mutate-pods.poolkeeper.io"}],
        });
        if let Some(annotations) = annotations {
            object["metadata"]["annotations"] = annotations;
        }
        object
    }

    fn annotations_of(object: &Value) -> Option<BTreeMap<String, String>> {
        object["metadata"]
            .get("annotations")
            .map(|a| serde_json::from_value(a.clone()).unwrap())
    }

    fn fence_for(object: &Value, epoch: i64) -> Result<Fence, Deposed> {
        Fence::new(
            annotations_of(object).as_ref(),
            object["metadata"]["resourceVersion"].as_str(),
            epoch,
        )
    }

    fn apply(object: &Value, patch: &Patch) -> Result<Value, json_patch::PatchError> {
        let mut object = object.clone();
        json_patch::patch(&mut object, patch)?;
        // What the API server does on every write.
        object["metadata"]["resourceVersion"] = json!("42");
        Ok(object)
    }

    fn change() -> Option<Patch> {
        Some(Patch(vec![add(
            pointer(&["webhooks", "0", "objectSelector"]),
            json!({"matchLabels": {"a": "b"}}),
        )]))
    }

    /// (name, stored annotations, our epoch, stamps, epoch stored after).
    #[test]
    fn each_stored_epoch_is_fenced() {
        let cases = [
            ("no annotations at all", None, 3, true, "3"),
            (
                "annotations without the epoch",
                Some(json!({"team": "x"})),
                3,
                true,
                "3",
            ),
            (
                "an older term's epoch",
                Some(json!({LEADER_EPOCH_ANNOTATION: "2"})),
                3,
                true,
                "3",
            ),
            (
                "our own epoch",
                Some(json!({LEADER_EPOCH_ANNOTATION: "3"})),
                3,
                false,
                "3",
            ),
            (
                "a garbled epoch",
                Some(json!({LEADER_EPOCH_ANNOTATION: "three"})),
                3,
                true,
                "3",
            ),
        ];
        for (name, annotations, epoch, stamps, after) in cases {
            let object = stored(annotations.clone());
            let fence = fence_for(&object, epoch).unwrap();
            assert_eq!(fence.stamps(), stamps, "{name}");
            let patch = fence.around(change()).unwrap();
            let written = apply(&object, &patch).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                written["metadata"]["annotations"][LEADER_EPOCH_ANNOTATION], after,
                "{name}"
            );
            if let Some(Value::Object(before)) = annotations {
                for (key, value) in before.iter().filter(|(k, _)| *k != LEADER_EPOCH_ANNOTATION) {
                    assert_eq!(
                        &written["metadata"]["annotations"][key], value,
                        "{name}: {key} kept"
                    );
                }
            }
            assert_eq!(
                written["webhooks"][0]["objectSelector"],
                json!({"matchLabels": {"a": "b"}}),
                "{name}"
            );
        }
    }

    /// (name, stored annotations, resourceVersion read, our epoch, the
    /// precondition wanted, or the newer epoch that deposes us).
    #[test]
    fn each_stored_epoch_gives_its_version_precondition() {
        let cases = [
            ("absent", None, None, 3, Ok(None)),
            (
                "no epoch yet",
                Some(json!({"team": "x"})),
                Some("41"),
                3,
                Ok(Some("41")),
            ),
            ("no annotations", None, Some("41"), 3, Ok(Some("41"))),
            (
                "an older term's",
                Some(json!({LEADER_EPOCH_ANNOTATION: "2"})),
                Some("41"),
                3,
                Ok(Some("41")),
            ),
            (
                "our own",
                Some(json!({LEADER_EPOCH_ANNOTATION: "3"})),
                Some("41"),
                3,
                Ok(Some("41")),
            ),
            (
                "a garbled epoch",
                Some(json!({LEADER_EPOCH_ANNOTATION: "x"})),
                Some("41"),
                3,
                Ok(Some("41")),
            ),
            (
                "a newer term's",
                Some(json!({LEADER_EPOCH_ANNOTATION: "4"})),
                Some("41"),
                3,
                Err(4),
            ),
        ];
        for (name, annotations, version, epoch, want) in cases {
            let annotations: Option<BTreeMap<String, String>> =
                annotations.map(|a| serde_json::from_value(a).unwrap());
            let got = version_precondition(annotations.as_ref(), version, epoch);
            let want = want
                .map(|v| v.map(str::to_owned))
                .map_err(|stored| Deposed {
                    stored,
                    ours: epoch,
                });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_stamp_keeps_other_annotations_and_sets_the_precondition() {
        let mut metadata = ObjectMeta {
            annotations: Some(BTreeMap::from([("team".to_owned(), "x".to_owned())])),
            resource_version: Some("stale".to_owned()),
            ..ObjectMeta::default()
        };
        stamp(&mut metadata, 7, Some("41".to_owned()));
        let annotations = metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[LEADER_EPOCH_ANNOTATION], "7");
        assert_eq!(annotations["team"], "x");
        assert_eq!(metadata.resource_version.as_deref(), Some("41"));
        stamp(&mut metadata, 8, None);
        assert_eq!(
            metadata.resource_version, None,
            "an absent object: no precondition"
        );
    }

    #[test]
    fn only_conflicts_and_failed_tests_are_the_fence() {
        for (code, fenced) in [
            (409, true),
            (422, true),
            (404, false),
            (500, false),
            (403, false),
        ] {
            let error = kube::Error::Api(Box::new(
                kube::core::Status::failure("refused", "Conflict").with_code(code),
            ));
            assert_eq!(refused(&error), fenced, "{code}");
        }
    }

    #[test]
    fn a_newer_epoch_means_deposed() {
        let object = stored(Some(json!({LEADER_EPOCH_ANNOTATION: "5"})));
        assert_eq!(fence_for(&object, 4), Err(Deposed { stored: 5, ours: 4 }));
        assert_eq!(
            Deposed { stored: 5, ours: 4 }.to_string(),
            "the object carries leader epoch 5, newer than this replica's 4: a newer leader owns it"
        );
    }

    #[test]
    fn nothing_to_send_once_stamped_and_in_step() {
        let object = stored(Some(json!({LEADER_EPOCH_ANNOTATION: "3"})));
        assert_eq!(fence_for(&object, 3).unwrap().around(None), None);
        let fresh = stored(None);
        let stamp = fence_for(&fresh, 3).unwrap().around(None);
        assert!(stamp.is_some(), "a new term stamps even without a change");
    }

    /// The old leader computed its write against the object before the new
    /// leader's stamp; applied after it, as the API server would, it fails.
    #[test]
    fn a_deposed_leaders_late_write_is_refused() {
        let object = stored(Some(json!({LEADER_EPOCH_ANNOTATION: "3"})));
        let late = fence_for(&object, 3).unwrap().around(change()).unwrap();
        let stamp = fence_for(&object, 4).unwrap().around(None).unwrap();
        let stamped = apply(&object, &stamp).unwrap();
        assert!(
            apply(&stamped, &late).is_err(),
            "the late write tests epoch 3"
        );

        // The same from an object that had no epoch yet: the stamp changed
        // the resourceVersion the late write tests.
        let fresh = stored(None);
        let late = fence_for(&fresh, 3).unwrap().around(change()).unwrap();
        let stamped = apply(&fresh, &fence_for(&fresh, 4).unwrap().around(None).unwrap()).unwrap();
        assert!(
            apply(&stamped, &late).is_err(),
            "the late write tests resourceVersion 41"
        );
        assert_eq!(fence_for(&stamped, 3), Err(Deposed { stored: 4, ours: 3 }));
    }
}
