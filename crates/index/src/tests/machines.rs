//! MachineClass and Machine queries, the class index behind them, and the
//! classes a Machine change reports as related.

use poolkeeper_api as api;

use crate::{Change, Changed, Index, IndexResource, ObjectKey};

use super::{NS, POOL, machine, machine_class, machine_names, machines_fixture};

#[test]
fn machine_queries() {
    let index = machines_fixture();
    let view = index.machines();
    let cases: &[(&str, &str, &[&str])] = &[
        (NS, "c1", &["m1", "m2"]),
        (NS, "c2", &["m3"]),
        (NS, "missing", &["m4"]),
        (NS, "unused", &[]),
        ("other", "c1", &["m1"]),
        ("other", "c2", &[]),
        ("nowhere", "c1", &[]),
    ];
    for (namespace, class_name, expected) in cases {
        assert_eq!(
            machine_names(view.machines_of_class(namespace, class_name)),
            *expected,
            "{namespace}/{class_name}"
        );
        assert_eq!(
            view.machine_count_of_class(namespace, class_name),
            expected.len(),
            "count {namespace}/{class_name}"
        );
    }
    let mut referenced: Vec<&str> = view.referenced_classes(NS).collect();
    referenced.sort_unstable();
    assert_eq!(referenced, ["c1", "c2", "missing"]);
}

#[test]
fn machine_and_class_lookups() {
    let index = machines_fixture();
    let view = index.machines();
    let class_cases: &[(ObjectKey, bool)] = &[
        (ObjectKey::namespaced(NS, "c1"), true),
        (ObjectKey::namespaced("other", "c1"), true),
        (ObjectKey::namespaced("other", "c2"), false),
        (ObjectKey::cluster("c1"), false),
    ];
    for (key, exists) in class_cases {
        assert_eq!(view.machine_class(key).is_some(), *exists, "class {key}");
    }
    let machine_cases: &[(ObjectKey, Option<&str>)] = &[
        (ObjectKey::namespaced(NS, "m1"), Some("c1")),
        (ObjectKey::namespaced(NS, "m4"), Some("missing")),
        (ObjectKey::namespaced("other", "m1"), Some("c1")),
        (ObjectKey::namespaced("other", "m2"), None),
    ];
    for (key, class_name) in machine_cases {
        assert_eq!(
            view.machine(key).map(|m| m.class_name.as_str()),
            *class_name,
            "machine {key}"
        );
    }
    let classes: Vec<String> = view.machine_classes().map(|c| c.key.to_string()).collect();
    assert_eq!(
        classes,
        ["machine-system/c1", "machine-system/c2", "other/c1"]
    );
    assert_eq!(view.machines().count(), 5);
}

#[test]
fn machine_moved_between_classes() {
    let index = machines_fixture();
    assert_eq!(
        index.apply(machine(NS, "m1", "c2")).map(|c| c.change),
        Some(Change::Updated)
    );
    {
        let view = index.machines();
        assert_eq!(machine_names(view.machines_of_class(NS, "c1")), ["m2"]);
        assert_eq!(
            machine_names(view.machines_of_class(NS, "c2")),
            ["m1", "m3"]
        );
        // The same name in another namespace is untouched.
        assert_eq!(machine_names(view.machines_of_class("other", "c1")), ["m1"]);
    }
    // Moving the last machine out of a class leaves no empty set behind.
    index.apply(machine(NS, "m2", "c2"));
    let view = index.machines();
    assert_eq!(view.machines_of_class(NS, "c1").count(), 0);
    assert_eq!(view.machine_count_of_class(NS, "c1"), 0);
    assert!(!view.referenced_classes(NS).any(|c| c == "c1"));
    drop(view);
    let state = index.machines.read();
    assert_eq!(state.class_index_entries(), 5);
    assert_eq!(state.class_index_sets(), 3); // NS/c2, NS/missing, other/c1
}

#[test]
fn machine_deletion_flag_keeps_class_entry() {
    let index = machines_fixture();
    let mut deleting = machine(NS, "m1", "c1");
    deleting.metadata.deletion_timestamp =
        Some(super::parse(serde_json::json!("2024-01-01T00:00:00Z")));
    assert_eq!(
        index.apply(deleting).map(|c| c.change),
        Some(Change::Updated)
    );
    let view = index.machines();
    let of_c1: Vec<(String, bool)> = view
        .machines_of_class(NS, "c1")
        .map(|m| (m.key.name.clone(), m.deleting))
        .collect();
    assert_eq!(of_c1, [("m1".to_owned(), true), ("m2".to_owned(), false)]);
}

#[test]
fn a_deleted_class_leaves_its_machines() {
    let index = machines_fixture();
    let key = ObjectKey::namespaced(NS, "c1");
    let delete = |index: &Index| IndexResource::<api::MachineClass>::delete(index, &key);
    assert_eq!(
        delete(&index),
        Some(Changed {
            key: key.clone(),
            change: Change::Deleted,
            related: vec![],
        })
    );
    assert_eq!(delete(&index), None);
    assert_eq!(index.machines().machines_of_class(NS, "c1").count(), 2);
}

/// Every Machine write reports the classes it referenced before and after.
#[test]
fn machine_changes_name_their_classes() {
    let class = |name: &str| ObjectKey::namespaced(NS, name);
    type Write = fn(&Index) -> Option<Changed>;
    type Reported = Option<(Change, Vec<ObjectKey>)>;
    let cases: &[(&str, Write, Reported)] = &[
        (
            "created",
            |i| i.apply(machine(NS, "m9", "c1")),
            Some((Change::Created, vec![class("c1")])),
        ),
        ("unchanged", |i| i.apply(machine(NS, "m1", "c1")), None),
        (
            "moved: old class, then new",
            |i| i.apply(machine(NS, "m1", "c2")),
            Some((Change::Updated, vec![class("c1"), class("c2")])),
        ),
        (
            "updated in place: one class",
            |i| {
                let mut m = machine(NS, "m3", "c2");
                m.spec.provider_id = Some("aws:///i-1".into());
                m.metadata.deletion_timestamp =
                    Some(super::parse(serde_json::json!("2024-01-01T00:00:00Z")));
                i.apply(m)
            },
            Some((Change::Updated, vec![class("c2")])),
        ),
        (
            "class name cleared: only the old class",
            |i| i.apply(machine(NS, "m2", "")),
            Some((Change::Updated, vec![class("c1")])),
        ),
        (
            "created without a class",
            |i| i.apply(machine(NS, "m8", "")),
            Some((Change::Created, vec![])),
        ),
        (
            "deleted",
            |i| IndexResource::<api::Machine>::delete(i, &ObjectKey::namespaced(NS, "m4")),
            Some((Change::Deleted, vec![class("missing")])),
        ),
        (
            "deleted twice",
            |i| IndexResource::<api::Machine>::delete(i, &ObjectKey::namespaced(NS, "m4")),
            None,
        ),
        (
            "another namespace",
            |i| i.apply(machine("other", "m1", "c2")),
            Some((
                Change::Updated,
                vec![
                    ObjectKey::namespaced("other", "c1"),
                    ObjectKey::namespaced("other", "c2"),
                ],
            )),
        ),
    ];
    let index = machines_fixture();
    for (what, write, expected) in cases {
        let changed = write(&index);
        assert_eq!(
            changed.as_ref().map(|c| (c.change, c.related.clone())),
            *expected,
            "{what}"
        );
    }
}

#[test]
fn class_projection_changes_are_reported() {
    let index = Index::new(POOL);
    let key = ObjectKey::namespaced(NS, "c1");
    let created = index.apply(machine_class(NS, "c1"));
    assert_eq!(
        created.map(|c| (c.key, c.change)),
        Some((key, Change::Created))
    );
    assert_eq!(index.apply(machine_class(NS, "c1")), None);
}
