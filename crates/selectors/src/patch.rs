//! The JSON patch (RFC 6902) that brings the managed entries of one stored
//! configuration to the desired selectors: pure, no I/O.
//!
//! The patch tests the resourceVersion it was computed from and the name of
//! each entry at the index it changes, then `add`s (creates or replaces)
//! only the selectors that differ. Everything else of the object — other
//! entries, `clientConfig` and the `caBundle` cert-manager injects, rules,
//! policies — is left alone, and if anything changed since it was read the
//! API server rejects the patch (422) instead of writing over it.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::desired::{DesiredSelectors, EntrySelectors, canonical};
use crate::error::SelectorError;
use crate::settings::ManagedConfiguration;

/// What the keeper reads of a stored configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredConfiguration<'a> {
    pub resource_version: Option<&'a str>,
    /// Its webhook entries, in order.
    pub entries: Vec<StoredEntry<'a>>,
}

/// One webhook entry of a stored configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEntry<'a> {
    pub name: &'a str,
    pub namespace_selector: Option<&'a LabelSelector>,
    pub object_selector: Option<&'a LabelSelector>,
}

/// The patch that gives the managed entries of `stored` the `desired`
/// selectors, or `None` when they have them already (compared as the API
/// server stores them). An entry the configuration lacks is an error: the
/// keeper changes selectors, it does not create webhooks.
pub fn selector_patch(
    stored: &StoredConfiguration<'_>,
    managed: &ManagedConfiguration,
    desired: &DesiredSelectors,
) -> Result<Option<Patch>, SelectorError> {
    let mut changes = Vec::new();
    for (entry_name, selectors) in [
        (&managed.bound_namespaces_entry, &desired.bound_namespaces),
        (&managed.pool_labelled_entry, &desired.pool_labelled),
    ] {
        let (index, entry) = stored
            .entries
            .iter()
            .enumerate()
            .find(|(_, entry)| entry.name == entry_name)
            .ok_or_else(|| SelectorError::EntryMissing {
                kind: managed.kind,
                configuration: managed.name.clone(),
                entry: entry_name.clone(),
            })?;
        changes.extend(entry_changes(index, entry, selectors));
    }
    if changes.is_empty() {
        return Ok(None);
    }
    let mut ops = Vec::with_capacity(changes.len() + 1);
    if let Some(version) = stored.resource_version {
        ops.push(PatchOperation::Test(TestOperation {
            path: pointer(&["metadata", "resourceVersion"]),
            value: Value::String(version.to_owned()),
        }));
    }
    ops.extend(changes);
    Ok(Some(Patch(ops)))
}

/// The operations for one entry: a test of its name at `index`, then one
/// `add` per selector that differs; nothing when none does.
fn entry_changes(
    index: usize,
    entry: &StoredEntry<'_>,
    desired: &EntrySelectors,
) -> Vec<PatchOperation> {
    let position = index.to_string();
    let mut ops = Vec::new();
    for (field, stored, wanted) in [
        (
            "namespaceSelector",
            entry.namespace_selector,
            &desired.namespace_selector,
        ),
        (
            "objectSelector",
            entry.object_selector,
            &desired.object_selector,
        ),
    ] {
        if canonical(stored) != canonical(Some(wanted)) {
            ops.push(PatchOperation::Add(AddOperation {
                path: pointer(&["webhooks", &position, field]),
                value: serde_json::to_value(wanted).unwrap_or_default(),
            }));
        }
    }
    if !ops.is_empty() {
        ops.insert(
            0,
            PatchOperation::Test(TestOperation {
                path: pointer(&["webhooks", &position, "name"]),
                value: Value::String(entry.name.to_owned()),
            }),
        );
    }
    ops
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

#[cfg(test)]
mod tests {
    use poolkeeper_config::Config;
    use serde_json::json;

    use super::*;
    use crate::desired::desired_selectors;
    use crate::settings::SelectorSettings;

    const POOL_LABEL: &str = "apps.openyurt.io/nodepool";

    fn settings() -> SelectorSettings {
        SelectorSettings::from(&Config::default())
    }

    fn desired(bound: &[&str]) -> DesiredSelectors {
        let excluded = ["kube-system".to_owned(), "poolkeeper-system".to_owned()];
        desired_selectors(bound.iter().copied(), POOL_LABEL, &excluded.into())
    }

    /// A stored MutatingWebhookConfiguration as JSON: an unmanaged entry
    /// first, then the two managed ones with the given selectors, and a
    /// caBundle on every entry.
    fn stored_object(bound: Option<Value>, labelled: Option<Value>) -> Value {
        let mut entries = vec![json!({
            "name": "other.example.com",
            "clientConfig": {"caBundle": "Q0E="},
            "namespaceSelector": {"matchLabels": {"team": "x"}},
        })];
        for (name, selectors) in [
            ("mutate-pods.poolkeeper.io", bound),
            ("mutate-labelled-pods.poolkeeper.io", labelled),
        ] {
            let mut entry = json!({"name": name, "clientConfig": {"caBundle": "Q0E="}});
            if let Some(Value::Object(selectors)) = selectors {
                entry.as_object_mut().unwrap().extend(selectors);
            }
            entries.push(entry);
        }
        json!({
            "metadata": {"name": "poolkeeper", "resourceVersion": "41"},
            "webhooks": entries,
        })
    }

    /// Name, namespaceSelector and objectSelector of one entry.
    type EntryView = (String, Option<LabelSelector>, Option<LabelSelector>);

    /// What `selector_patch` reads of `object`.
    fn stored_view(object: &Value) -> (Option<String>, Vec<EntryView>) {
        let version = object["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned);
        let entries = object["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| {
                let selector = |field: &str| {
                    entry
                        .get(field)
                        .map(|v| serde_json::from_value::<LabelSelector>(v.clone()).unwrap())
                };
                (
                    entry["name"].as_str().unwrap().to_owned(),
                    selector("namespaceSelector"),
                    selector("objectSelector"),
                )
            })
            .collect();
        (version, entries)
    }

    fn patch_for(
        object: &Value,
        desired: &DesiredSelectors,
    ) -> Result<Option<Patch>, SelectorError> {
        let (version, entries) = stored_view(object);
        let stored = StoredConfiguration {
            resource_version: version.as_deref(),
            entries: entries
                .iter()
                .map(|(name, namespace_selector, object_selector)| StoredEntry {
                    name,
                    namespace_selector: namespace_selector.as_ref(),
                    object_selector: object_selector.as_ref(),
                })
                .collect(),
        };
        selector_patch(&stored, &settings().mutating, desired)
    }

    fn selectors_json(selectors: &EntrySelectors) -> Value {
        json!({
            "namespaceSelector": selectors.namespace_selector,
            "objectSelector": selectors.object_selector,
        })
    }

    #[test]
    fn initial_manifest_selectors_get_the_bindings() {
        let manifest = desired(&[]);
        let object = stored_object(
            Some(selectors_json(&manifest.bound_namespaces)),
            Some(selectors_json(&manifest.pool_labelled)),
        );
        let wanted = desired(&["shop", "lab"]);
        let patch = patch_for(&object, &wanted)
            .unwrap()
            .expect("selectors differ");
        // The object selector of the bound entry (`{}`) and the pool label
        // requirement are right already: only the namespace selectors change.
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                {"op": "test", "path": "/webhooks/1/name", "value": "mutate-pods.poolkeeper.io"},
                {"op": "add", "path": "/webhooks/1/namespaceSelector",
                 "value": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["lab", "shop"]}]}},
                {"op": "test", "path": "/webhooks/2/name", "value": "mutate-labelled-pods.poolkeeper.io"},
                {"op": "add", "path": "/webhooks/2/namespaceSelector",
                 "value": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "lab", "poolkeeper-system", "shop"]}]}},
            ])
        );

        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(
            patch_for(&patched, &wanted).unwrap(),
            None,
            "in step after the patch"
        );
        for i in 0..3 {
            assert_eq!(
                patched["webhooks"][i]["clientConfig"],
                object["webhooks"][i]["clientConfig"]
            );
        }
        assert_eq!(
            patched["webhooks"][0], object["webhooks"][0],
            "unmanaged entry untouched"
        );
    }

    #[test]
    fn selectors_in_step_need_no_patch() {
        for bound in [&[][..], &["shop"], &["a", "b", "c"]] {
            let wanted = desired(bound);
            let object = stored_object(
                Some(selectors_json(&wanted.bound_namespaces)),
                Some(selectors_json(&wanted.pool_labelled)),
            );
            assert_eq!(patch_for(&object, &wanted).unwrap(), None, "{bound:?}");
        }
    }

    #[test]
    fn absent_selectors_are_added() {
        let object = stored_object(None, None);
        let wanted = desired(&["shop"]);
        let patch = patch_for(&object, &wanted).unwrap().unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(
            patched["webhooks"][2]["objectSelector"],
            json!({"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]})
        );
        assert_eq!(patch_for(&patched, &wanted).unwrap(), None);
        // An absent objectSelector is the API server's `{}`: the bound
        // entry's is right already and is not written.
        assert!(
            !serde_json::to_string(&patch)
                .unwrap()
                .contains("/webhooks/1/objectSelector"),
            "{patch:?}"
        );
    }

    /// As the API server stores what the installer ships: no selectors
    /// (stored `{}`) and its `matchConditions` entry, which the patch leaves
    /// alone.
    #[test]
    fn the_shipped_shape_gets_the_selectors_and_keeps_its_match_conditions() {
        let empty = json!({"namespaceSelector": {}, "objectSelector": {}});
        let mut object = stored_object(Some(empty.clone()), Some(empty));
        let condition = json!([{"name": "poolkeeper.io/not-excluded", "expression": "true"}]);
        for i in 1..3 {
            object["webhooks"][i]["matchConditions"] = condition.clone();
        }
        let wanted = desired(&[]);
        let patch = patch_for(&object, &wanted)
            .unwrap()
            .expect("selectors differ");
        assert!(
            !serde_json::to_string(&patch)
                .unwrap()
                .contains("matchConditions"),
            "{patch:?}"
        );
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(patch_for(&patched, &wanted).unwrap(), None);
        for i in 1..3 {
            assert_eq!(patched["webhooks"][i]["matchConditions"], condition);
        }
    }

    #[test]
    fn a_foreign_object_selector_on_the_bound_entry_is_reset() {
        let wanted = desired(&["shop"]);
        let mut bound = selectors_json(&wanted.bound_namespaces);
        bound["objectSelector"] = json!({"matchLabels": {"team": "x"}});
        let object = stored_object(Some(bound), Some(selectors_json(&wanted.pool_labelled)));
        let patch = patch_for(&object, &wanted).unwrap().unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                {"op": "test", "path": "/webhooks/1/name", "value": "mutate-pods.poolkeeper.io"},
                {"op": "add", "path": "/webhooks/1/objectSelector", "value": {}},
            ])
        );
    }

    #[test]
    fn the_patch_is_rejected_once_the_object_changed() {
        let object = stored_object(None, None);
        let patch = patch_for(&object, &desired(&["shop"])).unwrap().unwrap();

        let mut newer = object.clone();
        newer["metadata"]["resourceVersion"] = json!("42");
        assert!(
            json_patch::patch(&mut newer, &patch).is_err(),
            "resourceVersion tested"
        );

        let mut reordered = object.clone();
        reordered["webhooks"].as_array_mut().unwrap().swap(1, 2);
        assert!(
            json_patch::patch(&mut reordered, &patch).is_err(),
            "entry names tested"
        );
    }

    #[test]
    fn a_missing_entry_is_an_error() {
        let mut object = stored_object(None, None);
        object["webhooks"].as_array_mut().unwrap().remove(2);
        let error = patch_for(&object, &desired(&["shop"])).unwrap_err();
        assert!(
            matches!(&error, SelectorError::EntryMissing { entry, .. } if entry == "mutate-labelled-pods.poolkeeper.io"),
            "{error:?}"
        );
        assert!(!error.is_retryable());
        assert_eq!(
            error.to_string(),
            r#"MutatingWebhookConfiguration poolkeeper has no webhook entry named "mutate-labelled-pods.poolkeeper.io""#
        );
    }

    #[test]
    fn without_a_resource_version_nothing_is_tested_but_the_names() {
        let mut object = stored_object(None, None);
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        let patch = patch_for(&object, &desired(&[])).unwrap().unwrap();
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/webhooks/1/name", "value": "mutate-pods.poolkeeper.io"})
        );
    }
}
