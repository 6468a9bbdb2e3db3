//! What `apply` and `delete` report, and that deletes leave the secondary
//! indexes clean.

use k8s_openapi::api::core::v1 as core;
use poolkeeper_api as api;
use serde_json::json;

use crate::{Change, Index, IndexResource, ObjectKey, ResourceKind};

use super::{
    NS, POOL, counts, machine, machine_class, machines_fixture, node, node_pool, parse,
    placement_fixture,
};

#[test]
fn only_a_changed_projection_is_reported() {
    let index = placement_fixture();
    type Reported = Option<(ObjectKey, Change)>;
    type Write = Box<dyn Fn(&Index) -> Reported>;
    fn report<K: kube::Resource>(index: &Index, object: K) -> Reported
    where
        Index: IndexResource<K>,
    {
        index
            .apply(object)
            .map(|changed| (changed.key, changed.change))
    }
    let n2 = || node("n2", &[(POOL, "hangzhou"), ("zone", "b")]);
    let class_with_finalizer = |spec: &str| {
        let mut class = machine_class(NS, "c1");
        class.metadata.finalizers = Some(vec![
            "machine.sapcloud.io/machine-controller-manager".into(),
        ]);
        class.metadata.resource_version = Some("2".into());
        class.provider_spec = json!({"image": spec});
        class
    };
    let node_key = |name: &str| ObjectKey::cluster(name);
    let class_key = ObjectKey::namespaced(NS, "c1");
    let machine_key = ObjectKey::namespaced(NS, "m1");
    let cases: Vec<(&str, Write, Reported)> = vec![
        (
            "node heartbeat: same projection",
            Box::new(move |i| {
                let mut heartbeat = n2();
                heartbeat.metadata.resource_version = Some("99".into());
                report(i, heartbeat)
            }),
            None,
        ),
        (
            "node readiness flips",
            Box::new(move |i| {
                let mut not_ready = n2();
                not_ready.status = Some(parse(
                    json!({"conditions": [{"type": "Ready", "status": "False"}]}),
                ));
                report(i, not_ready)
            }),
            Some((node_key("n2"), Change::Updated)),
        ),
        (
            "node taint added",
            Box::new(move |i| {
                let mut tainted = n2();
                tainted.spec = Some(parse(
                    json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}),
                ));
                report(i, tainted)
            }),
            Some((node_key("n2"), Change::Updated)),
        ),
        (
            "new node",
            Box::new(|i| report(i, node("n9", &[]))),
            Some((node_key("n9"), Change::Created)),
        ),
        (
            "same pool",
            Box::new(|i| report(i, node_pool("hangzhou", Some("Edge")))),
            None,
        ),
        (
            "same pool, type now defaulted",
            Box::new(|i| report(i, node_pool("hangzhou", None))),
            None,
        ),
        (
            "pool type changes",
            Box::new(|i| report(i, node_pool("hangzhou", Some("Cloud")))),
            Some((node_key("hangzhou"), Change::Updated)),
        ),
        (
            "new pool",
            Box::new(|i| report(i, node_pool("shanghai", None))),
            Some((node_key("shanghai"), Change::Created)),
        ),
        (
            "new class",
            Box::new(|i| report(i, machine_class(NS, "c1"))),
            Some((class_key.clone(), Change::Created)),
        ),
        (
            "same class",
            Box::new(|i| report(i, machine_class(NS, "c1"))),
            None,
        ),
        (
            "class finalizer added",
            Box::new(move |i| report(i, class_with_finalizer("ubuntu"))),
            Some((class_key.clone(), Change::Updated)),
        ),
        (
            "class spec changed",
            Box::new(move |i| report(i, class_with_finalizer("debian"))),
            Some((class_key.clone(), Change::Updated)),
        ),
        (
            "another controller labels the class: only its resourceVersion moves",
            Box::new(move |i| {
                let mut labelled = class_with_finalizer("debian");
                labelled.metadata.resource_version = Some("3".into());
                labelled.metadata.labels = Some([("team".into(), "edge".into())].into());
                report(i, labelled)
            }),
            None,
        ),
        (
            "new machine",
            Box::new(|i| report(i, machine(NS, "m1", "c1"))),
            Some((machine_key.clone(), Change::Created)),
        ),
        (
            "same machine",
            Box::new(|i| report(i, machine(NS, "m1", "c1"))),
            None,
        ),
        (
            "machine deleting",
            Box::new(|i| {
                let mut deleting = machine(NS, "m1", "c1");
                deleting.metadata.deletion_timestamp = Some(parse(json!("2024-01-01T00:00:00Z")));
                report(i, deleting)
            }),
            Some((machine_key.clone(), Change::Updated)),
        ),
    ];
    for (what, write, expected) in cases {
        assert_eq!(write(&index), expected, "{what}");
    }
    // The next finalizer patch is guarded by the newest resourceVersion, reported or not.
    let stored = index
        .machines()
        .machine_class(&class_key)
        .map(|class| class.resource_version.clone());
    assert_eq!(stored.as_deref(), Some("3"));
}

#[test]
fn deletes_clean_secondary_indexes() {
    let index = machines_fixture();
    let delete_machine = |key: &ObjectKey| IndexResource::<api::Machine>::delete(&index, key);
    let cases: &[(ObjectKey, bool)] = &[
        (ObjectKey::namespaced(NS, "m1"), true),
        (ObjectKey::namespaced(NS, "m1"), false),
        (ObjectKey::namespaced(NS, "m2"), true),
        (ObjectKey::namespaced(NS, "m3"), true),
        (ObjectKey::namespaced(NS, "m4"), true),
        (ObjectKey::namespaced("other", "m1"), true),
        (ObjectKey::namespaced("other", "m1"), false),
    ];
    for (key, removed) in cases {
        let changed = delete_machine(key);
        assert_eq!(
            changed.map(|c| (c.key, c.change)),
            removed.then(|| (key.clone(), Change::Deleted)),
            "delete {key}"
        );
        assert!(index.machines().machine(key).is_none());
    }
    assert_eq!(counts(&index)[&ResourceKind::Machine], 0);
    let state = index.machines.read();
    assert_eq!(state.class_index_entries(), 0);
    assert_eq!(state.class_index_sets(), 0, "no empty sets left behind");
    drop(state);

    let index = placement_fixture();
    for name in ["n1", "n2", "n3", "n4"] {
        let key = ObjectKey::cluster(name);
        let delete = || IndexResource::<core::Node>::delete(&index, &key);
        assert!(delete().is_some(), "remove {name}");
        assert!(delete().is_none(), "remove {name} twice");
    }
    let state = index.placement.read();
    assert_eq!(state.label_index_entries(), 0);
    assert_eq!(state.label_index_keys(), 0, "no empty maps left behind");
}

#[test]
fn cluster_scoped_kinds_ignore_namespaced_keys() {
    let index = placement_fixture();
    let cases: &[(&str, ObjectKey, bool)] = &[
        ("pool", ObjectKey::cluster("hangzhou"), true),
        ("pool again", ObjectKey::cluster("hangzhou"), false),
        ("unknown pool", ObjectKey::cluster("nope"), false),
        (
            "pool with a namespace",
            ObjectKey::namespaced("x", "beijing"),
            false,
        ),
    ];
    for (what, key, removed) in cases {
        let changed = IndexResource::<api::NodePool>::delete(&index, key);
        assert_eq!(changed.is_some(), *removed, "{what}");
    }
    assert_eq!(counts(&index)[&ResourceKind::NodePool], 1);
    let node = ObjectKey::namespaced("x", "n1");
    assert_eq!(IndexResource::<core::Node>::delete(&index, &node), None);
    assert!(index.placement().node("n1").is_some());
}
