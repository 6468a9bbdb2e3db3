//! Secrets: the metadata projection, the references of MachineClasses, and
//! the Secrets a class write reports as related.

use k8s_openapi::api::core::v1 as core;
use kube::core::PartialObjectMeta;
use poolkeeper_api as api;
use poolkeeper_bus::Change;
use serde_json::{Value, json};

use crate::{Index, IndexResource, ObjectKey, Secret, secret_references};

use super::{NS, POOL, key_set, parse, secret_meta};

/// A MachineClass of NS with the given `secretRef` and
/// `credentialsSecretRef` (each `(namespace, name)`, `None` for absent).
fn class_with(
    name: &str,
    secret_ref: Option<Value>,
    credentials_secret_ref: Option<Value>,
) -> api::MachineClass {
    let mut class = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
        "providerSpec": {"image": "ubuntu"},
    });
    if let Some(reference) = secret_ref {
        class["secretRef"] = reference;
    }
    if let Some(reference) = credentials_secret_ref {
        class["credentialsSecretRef"] = reference;
    }
    parse(class)
}

fn reference(name: &str) -> Option<Value> {
    Some(json!({"name": name, "namespace": NS}))
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced(NS, name)
}

fn keys(names: &[&str]) -> Vec<ObjectKey> {
    names.iter().map(|name| key(name)).collect()
}

/// What, `secretRef`, `credentialsSecretRef`, the Secrets referenced.
type Case = (
    &'static str,
    Option<Value>,
    Option<Value>,
    &'static [&'static str],
);

#[test]
fn references_of_a_class() {
    let cases: [Case; 9] = [
        ("none", None, None, &[]),
        ("secretRef only", reference("cloud"), None, &["cloud"]),
        (
            "credentialsSecretRef only",
            None,
            reference("creds"),
            &["creds"],
        ),
        (
            "both, in order",
            reference("cloud"),
            reference("creds"),
            &["cloud", "creds"],
        ),
        (
            "both the same Secret: once",
            reference("cloud"),
            reference("cloud"),
            &["cloud"],
        ),
        (
            "no namespace: the class's own",
            Some(json!({"name": "cloud"})),
            Some(json!({"name": "creds", "namespace": ""})),
            &["cloud", "creds"],
        ),
        (
            "another namespace is not managed",
            Some(json!({"name": "cloud", "namespace": "kube-system"})),
            reference("creds"),
            &["creds"],
        ),
        (
            "no name references nothing",
            Some(json!({"namespace": NS})),
            Some(json!({"name": "", "namespace": NS})),
            &[],
        ),
        (
            "an empty reference object references nothing",
            Some(json!({})),
            None,
            &[],
        ),
    ];
    for (what, secret_ref, credentials, expected) in cases {
        let class = class_with("c", secret_ref, credentials);
        assert_eq!(secret_references(&class), keys(expected), "{what}");
    }
}

#[test]
fn the_projection_keeps_no_content() {
    let meta: PartialObjectMeta<core::Secret> = parse(json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {
            "name": "cloud", "namespace": NS, "uid": "u-1", "resourceVersion": "42",
            "finalizers": ["a/b"], "deletionTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"team": "infra"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{}}"},
        },
    }));
    assert_eq!(
        Secret::from(&meta),
        Secret {
            key: key("cloud"),
            uid: "u-1".into(),
            finalizers: vec!["a/b".into()],
            deleting: true,
            resource_version: "42".into(),
        }
    );
}

#[test]
fn only_finalizer_and_deletion_changes_are_reported() {
    let index = Index::new(POOL);
    let created = index.apply(secret_meta(NS, "cloud", &[]));
    assert_eq!(created.map(|c| c.change), Some(Change::Created));
    // A data write: a new resourceVersion, kept for the patch guard, no news.
    let mut rewritten = secret_meta(NS, "cloud", &[]);
    rewritten.metadata.resource_version = Some("2".into());
    rewritten.metadata.labels = Some([("rotated".to_owned(), "yes".to_owned())].into());
    assert_eq!(index.apply(rewritten), None);
    assert_eq!(
        index
            .secrets()
            .secret(&key("cloud"))
            .unwrap()
            .resource_version,
        "2"
    );
    let finalized = index.apply(secret_meta(NS, "cloud", &["x/y"]));
    assert_eq!(finalized.map(|c| c.change), Some(Change::Updated));
    let deleted = IndexResource::<PartialObjectMeta<core::Secret>>::delete(&index, &key("cloud"));
    assert_eq!(deleted.map(|c| c.change), Some(Change::Deleted));
    assert!(index.secrets().secret(&key("cloud")).is_none());
}

/// What a sequence of class writes leaves: each step, the related Secrets
/// it reports, then the referrers of each Secret.
#[test]
fn class_writes_move_the_references() {
    let index = Index::new(POOL);
    let related = |changed: Option<crate::Changed>| changed.map(|c| c.related);
    let referrers = |index: &Index, secret: &str| -> Vec<String> {
        index
            .secrets()
            .referrers(&key(secret))
            .map(|class| class.name.clone())
            .collect()
    };

    let a = class_with("a", reference("cloud"), reference("creds"));
    assert_eq!(
        related(index.apply(a.clone())),
        Some(keys(&["cloud", "creds"]))
    );
    assert_eq!(related(index.apply(a)), None, "unchanged: nothing reported");
    let b = class_with("b", reference("cloud"), None);
    assert_eq!(related(index.apply(b)), Some(keys(&["cloud"])));
    assert_eq!(referrers(&index, "cloud"), ["a", "b"]);
    assert_eq!(referrers(&index, "creds"), ["a"]);

    // a changes its secretRef: the old and the new Secret are related.
    let a = class_with("a", reference("cloud-v2"), reference("creds"));
    assert_eq!(
        related(index.apply(a)),
        Some(keys(&["cloud", "creds", "cloud-v2"]))
    );
    assert_eq!(referrers(&index, "cloud"), ["b"]);
    assert_eq!(referrers(&index, "cloud-v2"), ["a"]);
    assert_eq!(
        index.secrets().references_of(&key("a")),
        keys(&["cloud-v2", "creds"])
    );

    // a goes: its Secrets are related, and no empty entry is left.
    let deleted = IndexResource::<api::MachineClass>::delete(&index, &key("a"));
    assert_eq!(related(deleted), Some(keys(&["cloud-v2", "creds"])));
    let referenced: Vec<ObjectKey> = index.secrets().referenced().cloned().collect();
    assert_eq!(referenced, keys(&["cloud"]));
    assert_eq!(index.secrets().referrer_count(&key("creds")), 0);

    // A relist without b: its Secret is related to the reported delete.
    let removed = IndexResource::<api::MachineClass>::retain(&index, &key_set(&[]));
    let removed: Vec<(ObjectKey, Vec<ObjectKey>)> =
        removed.into_iter().map(|c| (c.key, c.related)).collect();
    assert_eq!(removed, [(key("b"), keys(&["cloud"]))]);
    assert_eq!(index.secrets().referenced().count(), 0);
}

#[test]
fn a_relist_of_secrets_reports_what_it_lacked() {
    let index = Index::new(POOL);
    let listed = vec![secret_meta(NS, "a", &[]), secret_meta(NS, "b", &[])];
    assert_eq!(index.reset(listed).len(), 2);
    let again = index.reset(vec![secret_meta(NS, "b", &[])]);
    let changes: Vec<(ObjectKey, Change)> = again.into_iter().map(|c| (c.key, c.change)).collect();
    assert_eq!(changes, [(key("a"), Change::Deleted)]);
    let left: Vec<String> = index
        .secrets()
        .secrets()
        .map(|s| s.key.name.clone())
        .collect();
    assert_eq!(left, ["b"]);
}
