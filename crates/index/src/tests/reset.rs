//! Relists: `retain` after objects applied one by one, and `reset` with the
//! whole list at once.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1 as core;
use poolkeeper_api as api;

use crate::{Change, Changed, Index, IndexResource, ObjectKey, ResourceKind};

use super::{
    NS, POOL, config_map, counts, fill_machines, key_set, machine, machine_names, machines_fixture,
    node, placement_fixture,
};

fn deleted(keys: &[ObjectKey]) -> Vec<(ObjectKey, Change)> {
    keys.iter()
        .map(|key| (key.clone(), Change::Deleted))
        .collect()
}

fn keys_and_changes(changes: Vec<Changed>) -> Vec<(ObjectKey, Change)> {
    changes.into_iter().map(|c| (c.key, c.change)).collect()
}

/// Every kind filled: the placement fixture, the machines fixture and the
/// placement ConfigMap.
fn full_index() -> Index {
    let index = placement_fixture();
    fill_machines(&index);
    index.apply(config_map(
        "poolkeeper-system",
        "placement",
        &[("placement.yaml", "bindings: []")],
    ));
    index
}

fn retain(index: &Index, kind: ResourceKind, keep: &HashSet<ObjectKey>) -> Vec<Changed> {
    match kind {
        ResourceKind::Node => IndexResource::<core::Node>::retain(index, keep),
        ResourceKind::NodePool => IndexResource::<api::NodePool>::retain(index, keep),
        ResourceKind::ConfigMap => IndexResource::<core::ConfigMap>::retain(index, keep),
        ResourceKind::MachineClass => IndexResource::<api::MachineClass>::retain(index, keep),
        ResourceKind::Machine => IndexResource::<api::Machine>::retain(index, keep),
        ResourceKind::Secret => {
            IndexResource::<kube::core::PartialObjectMeta<core::Secret>>::retain(index, keep)
        }
        ResourceKind::Namespace => IndexResource::<core::Namespace>::retain(index, keep),
        ResourceKind::PlacementException => {
            IndexResource::<api::PlacementException>::retain(index, keep)
        }
    }
}

#[test]
fn retain_removes_missing_keys() {
    struct Case {
        what: &'static str,
        kind: ResourceKind,
        keep: Vec<ObjectKey>,
        removed: Vec<ObjectKey>,
        left: usize,
    }
    let cluster = |names: &[&str]| -> Vec<ObjectKey> {
        names.iter().map(|name| ObjectKey::cluster(*name)).collect()
    };
    let cases = [
        Case {
            what: "nodes",
            kind: ResourceKind::Node,
            keep: cluster(&["n1", "n9"]),
            removed: cluster(&["n2", "n3", "n4"]),
            left: 1,
        },
        Case {
            what: "nodes keyed with a namespace do not match",
            kind: ResourceKind::Node,
            keep: vec![ObjectKey::namespaced("x", "n1")],
            removed: cluster(&["n1", "n2", "n3", "n4"]),
            left: 0,
        },
        Case {
            what: "all nodes kept",
            kind: ResourceKind::Node,
            keep: cluster(&["n1", "n2", "n3", "n4"]),
            removed: vec![],
            left: 4,
        },
        Case {
            what: "pools",
            kind: ResourceKind::NodePool,
            keep: cluster(&["beijing"]),
            removed: cluster(&["hangzhou"]),
            left: 1,
        },
        Case {
            what: "machines",
            kind: ResourceKind::Machine,
            keep: vec![
                ObjectKey::namespaced(NS, "m2"),
                ObjectKey::namespaced("other", "m1"),
            ],
            removed: vec![
                ObjectKey::namespaced(NS, "m1"),
                ObjectKey::namespaced(NS, "m3"),
                ObjectKey::namespaced(NS, "m4"),
            ],
            left: 2,
        },
        Case {
            what: "classes",
            kind: ResourceKind::MachineClass,
            keep: vec![ObjectKey::namespaced(NS, "c2")],
            removed: vec![
                ObjectKey::namespaced(NS, "c1"),
                ObjectKey::namespaced("other", "c1"),
            ],
            left: 1,
        },
        Case {
            what: "config maps",
            kind: ResourceKind::ConfigMap,
            keep: vec![],
            removed: vec![ObjectKey::namespaced("poolkeeper-system", "placement")],
            left: 0,
        },
    ];
    for case in cases {
        let index = full_index();
        let before: BTreeMap<ResourceKind, usize> = counts(&index);
        let removed = retain(&index, case.kind, &key_set(&case.keep));
        assert_eq!(
            keys_and_changes(removed),
            deleted(&case.removed),
            "{}",
            case.what
        );
        let after = counts(&index);
        assert_eq!(after[&case.kind], case.left, "{}", case.what);
        for (kind, count) in &after {
            if *kind != case.kind {
                assert_eq!(*count, before[kind], "{}: {kind} untouched", case.what);
            }
        }
        // Removed keys are gone from the secondary indexes too.
        assert_eq!(
            index.machines.read().class_index_entries(),
            after[&ResourceKind::Machine],
            "{}",
            case.what
        );
        let label_entries: usize = index.placement().nodes().map(|n| n.labels.len()).sum();
        assert_eq!(
            index.placement.read().label_index_entries(),
            label_entries,
            "{}",
            case.what
        );
        // A second retain with the same set removes nothing.
        assert!(retain(&index, case.kind, &key_set(&case.keep)).is_empty());
    }
}

#[test]
fn retained_machines_leave_the_class_index() {
    let index = machines_fixture();
    let removed =
        IndexResource::<api::Machine>::retain(&index, &key_set(&[ObjectKey::namespaced(NS, "m3")]));
    // Each delete names the class the Machine referenced.
    let related: Vec<Vec<ObjectKey>> = removed.into_iter().map(|c| c.related).collect();
    assert_eq!(
        related,
        [
            vec![ObjectKey::namespaced(NS, "c1")],
            vec![ObjectKey::namespaced(NS, "c1")],
            vec![ObjectKey::namespaced(NS, "missing")],
            vec![ObjectKey::namespaced("other", "c1")],
        ]
    );
    let view = index.machines();
    assert_eq!(view.machines_of_class(NS, "c1").count(), 0);
    assert_eq!(view.machines_of_class("other", "c1").count(), 0);
    assert_eq!(machine_names(view.machines_of_class(NS, "c2")), ["m3"]);
    assert_eq!(view.referenced_classes("other").count(), 0);
}

#[test]
fn reset_applies_the_list_then_removes_what_it_lacks() {
    let index = placement_fixture();
    // n1 unchanged, n2 relabelled, n5 new; n3 and n4 gone.
    let changes = index.reset(vec![
        node(
            "n1",
            &[(POOL, "hangzhou"), (super::EDGE_ROLE, ""), ("zone", "a")],
        ),
        node("n5", &[(POOL, "beijing")]),
        node("n2", &[(POOL, "beijing"), ("zone", "b")]),
    ]);
    assert_eq!(
        keys_and_changes(changes),
        [
            (ObjectKey::cluster("n5"), Change::Created),
            (ObjectKey::cluster("n2"), Change::Updated),
            (ObjectKey::cluster("n3"), Change::Deleted),
            (ObjectKey::cluster("n4"), Change::Deleted),
        ]
    );
    let names: Vec<String> = super::names(index.placement().nodes_in_pool("beijing"));
    assert_eq!(names, ["n2", "n5"]);
    let emptied = index.reset(Vec::<core::Node>::new());
    let left = ["n1", "n2", "n5"].map(ObjectKey::cluster);
    assert_eq!(keys_and_changes(emptied), deleted(&left));
    assert_eq!(counts(&index)[&ResourceKind::Node], 0);
}

#[test]
fn reset_of_an_empty_index_is_every_object_created() {
    let index = Index::new(POOL);
    let changes = index.reset(vec![machine(NS, "m1", "c1"), machine(NS, "m2", "c2")]);
    assert_eq!(
        changes,
        [
            Changed {
                key: ObjectKey::namespaced(NS, "m1"),
                change: Change::Created,
                related: vec![ObjectKey::namespaced(NS, "c1")],
            },
            Changed {
                key: ObjectKey::namespaced(NS, "m2"),
                change: Change::Created,
                related: vec![ObjectKey::namespaced(NS, "c2")],
            },
        ]
    );
}
