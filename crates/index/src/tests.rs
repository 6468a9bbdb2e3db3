use std::collections::{BTreeMap, HashSet};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use super::*;

const POOL: &str = "apps.openyurt.io/nodepool";
const NS: &str = "machine-system";

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn node(name: &str, pairs: &[(&str, &str)]) -> Node {
    Node {
        name: name.to_owned(),
        labels: labels(pairs),
        taints: Vec::new(),
        ready: true,
    }
}

fn pool(name: &str, pool_type: PoolType) -> NodePool {
    NodePool {
        name: name.to_owned(),
        pool_type,
        labels: BTreeMap::new(),
        taints: Vec::new(),
    }
}

fn class(namespace: &str, name: &str) -> MachineClass {
    MachineClass {
        key: ObjectKey::namespaced(namespace, name),
        finalizers: Vec::new(),
        deleting: false,
        spec_hash: 1,
        resource_version: "1".to_owned(),
    }
}

fn machine(namespace: &str, name: &str, class_name: &str) -> Machine {
    Machine {
        key: ObjectKey::namespaced(namespace, name),
        class_name: class_name.to_owned(),
        deleting: false,
    }
}

fn names<'a>(nodes: impl Iterator<Item = &'a Node>) -> Vec<String> {
    nodes.map(|n| n.name.clone()).collect()
}

fn machine_names<'a>(machines: impl Iterator<Item = &'a Machine>) -> Vec<String> {
    machines.map(|m| m.key.name.clone()).collect()
}

fn keys(items: &[ObjectKey]) -> HashSet<ObjectKey> {
    items.iter().cloned().collect()
}

/// Nodes and pools:
/// - n1 hangzhou, edge role, zone a
/// - n2 hangzhou, zone b
/// - n3 beijing, edge role
/// - n4 no pool, zone a
fn placement_fixture() -> Index {
    let index = Index::new(POOL);
    index.upsert_node(node(
        "n1",
        &[
            (POOL, "hangzhou"),
            ("node-role.kubernetes.io/edge", ""),
            ("zone", "a"),
        ],
    ));
    index.upsert_node(node("n2", &[(POOL, "hangzhou"), ("zone", "b")]));
    index.upsert_node(node(
        "n3",
        &[(POOL, "beijing"), ("node-role.kubernetes.io/edge", "")],
    ));
    index.upsert_node(node("n4", &[("zone", "a")]));
    index.upsert_node_pool(pool("hangzhou", PoolType::Edge));
    index.upsert_node_pool(pool("beijing", PoolType::Cloud));
    index
}

/// Classes c1, c2 in NS, c1 also in "other"; machines:
/// - NS/m1 -> c1, NS/m2 -> c1, NS/m3 -> c2, NS/m4 -> missing
/// - other/m1 -> c1
fn machines_fixture() -> Index {
    let index = Index::new(POOL);
    index.upsert_machine_class(class(NS, "c1"));
    index.upsert_machine_class(class(NS, "c2"));
    index.upsert_machine_class(class("other", "c1"));
    index.upsert_machine(machine(NS, "m1", "c1"));
    index.upsert_machine(machine(NS, "m2", "c1"));
    index.upsert_machine(machine(NS, "m3", "c2"));
    index.upsert_machine(machine(NS, "m4", "missing"));
    index.upsert_machine(machine("other", "m1", "c1"));
    index
}

#[test]
fn node_queries() {
    let index = placement_fixture();
    let view = index.placement();
    type Query = fn(&PlacementView<'_>) -> Vec<String>;
    let cases: &[(&str, Query, &[&str])] = &[
        ("all nodes", |v| names(v.nodes()), &["n1", "n2", "n3", "n4"]),
        (
            "label key and value",
            |v| names(v.nodes_with_label("zone", "a")),
            &["n1", "n4"],
        ),
        (
            "label value nobody has",
            |v| names(v.nodes_with_label("zone", "c")),
            &[],
        ),
        (
            "label key nobody has",
            |v| names(v.nodes_with_label("missing", "a")),
            &[],
        ),
        (
            "empty label value",
            |v| names(v.nodes_with_label("node-role.kubernetes.io/edge", "")),
            &["n1", "n3"],
        ),
        (
            "label key, grouped by value",
            |v| names(v.nodes_with_label_key("zone")),
            &["n1", "n4", "n2"],
        ),
        (
            "label key nobody has",
            |v| names(v.nodes_with_label_key("missing")),
            &[],
        ),
        (
            "pool label key",
            |v| names(v.nodes_with_label_key(POOL)),
            &["n3", "n1", "n2"],
        ),
        (
            "nodes in pool",
            |v| names(v.nodes_in_pool("hangzhou")),
            &["n1", "n2"],
        ),
        (
            "nodes in other pool",
            |v| names(v.nodes_in_pool("beijing")),
            &["n3"],
        ),
        (
            "nodes in unknown pool",
            |v| names(v.nodes_in_pool("shanghai")),
            &[],
        ),
        (
            "label values",
            |v| v.label_values("zone").map(str::to_owned).collect(),
            &["a", "b"],
        ),
    ];
    for (what, query, expected) in cases {
        assert_eq!(query(&view), *expected, "{what}");
    }
}

#[test]
fn node_lookups() {
    let index = placement_fixture();
    let view = index.placement();
    let cases: &[(&str, Option<&str>, bool)] = &[
        // node, its pool, node exists
        ("n1", Some("hangzhou"), true),
        ("n3", Some("beijing"), true),
        ("n4", None, true),
        ("nope", None, false),
    ];
    for (name, expected_pool, exists) in cases {
        assert_eq!(view.pool_of_node(name), *expected_pool, "pool of {name}");
        assert_eq!(view.node(name).is_some(), *exists, "node {name}");
    }
    assert_eq!(view.node_count(), 4);
    assert_eq!(view.pool_label(), POOL);
}

#[test]
fn pool_queries() {
    let index = placement_fixture();
    let view = index.placement();
    let cases: &[(&str, Option<PoolType>)] = &[
        ("hangzhou", Some(PoolType::Edge)),
        ("beijing", Some(PoolType::Cloud)),
        ("shanghai", None),
    ];
    for (name, expected) in cases {
        assert_eq!(
            view.node_pool(name).map(|p| p.pool_type),
            *expected,
            "{name}"
        );
    }
    let all: Vec<&str> = view.node_pools().map(|p| p.name.as_str()).collect();
    assert_eq!(all, ["beijing", "hangzhou"]);
    assert_eq!(view.node_pool_count(), 2);
}

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
    let referenced: Vec<&str> = {
        let mut r: Vec<&str> = view.referenced_classes(NS).collect();
        r.sort_unstable();
        r
    };
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
    assert_eq!(view.machine_class_count(), 3);
    assert_eq!(view.machine_count(), 5);
    assert_eq!(view.machines().count(), 5);
}

#[test]
fn machine_moved_between_classes() {
    let index = machines_fixture();
    assert_eq!(
        index.upsert_machine(machine(NS, "m1", "c2")),
        Upsert::Updated
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
    index.upsert_machine(machine(NS, "m2", "c2"));
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
    deleting.deleting = true;
    assert_eq!(index.upsert_machine(deleting), Upsert::Updated);
    let view = index.machines();
    let of_c1: Vec<(String, bool)> = view
        .machines_of_class(NS, "c1")
        .map(|m| (m.key.name.clone(), m.deleting))
        .collect();
    assert_eq!(of_c1, [("m1".to_owned(), true), ("m2".to_owned(), false)]);
}

#[test]
fn deletes_clean_secondary_indexes() {
    let index = machines_fixture();
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
        assert_eq!(index.remove_machine(key), *removed, "remove {key}");
        assert!(index.machines().machine(key).is_none());
    }
    assert_eq!(index.count(ResourceKind::Machine), 0);
    let state = index.machines.read();
    assert_eq!(state.class_index_entries(), 0);
    assert_eq!(state.class_index_sets(), 0, "no empty sets left behind");
    drop(state);

    let index = placement_fixture();
    for name in ["n1", "n2", "n3", "n4"] {
        assert!(index.remove_node(name), "remove {name}");
        assert!(!index.remove_node(name), "remove {name} twice");
    }
    let state = index.placement.read();
    assert_eq!(state.label_index_entries(), 0);
    assert_eq!(state.label_index_keys(), 0, "no empty maps left behind");
    drop(state);

    let cases: &[(&str, bool)] = &[("hangzhou", true), ("hangzhou", false), ("nope", false)];
    let index = placement_fixture();
    for (name, removed) in cases {
        assert_eq!(index.remove_node_pool(name), *removed, "remove pool {name}");
    }
    assert_eq!(index.count(ResourceKind::NodePool), 1);

    let index = machines_fixture();
    let key = ObjectKey::namespaced(NS, "c1");
    assert!(index.remove_machine_class(&key));
    assert!(!index.remove_machine_class(&key));
    // Machines keep referencing a class that is gone.
    assert_eq!(index.machines().machines_of_class(NS, "c1").count(), 2);
}

#[test]
fn node_label_change_moves_between_pools() {
    struct Case {
        what: &'static str,
        labels: &'static [(&'static str, &'static str)],
        hangzhou: &'static [&'static str],
        beijing: &'static [&'static str],
        pool_of_n1: Option<&'static str>,
    }
    let cases = [
        Case {
            what: "moved to beijing",
            labels: &[(POOL, "beijing")],
            hangzhou: &["n2"],
            beijing: &["n1", "n3"],
            pool_of_n1: Some("beijing"),
        },
        Case {
            what: "pool label removed",
            labels: &[("zone", "a")],
            hangzhou: &["n2"],
            beijing: &["n3"],
            pool_of_n1: None,
        },
        Case {
            what: "back to hangzhou",
            labels: &[(POOL, "hangzhou")],
            hangzhou: &["n1", "n2"],
            beijing: &["n3"],
            pool_of_n1: Some("hangzhou"),
        },
    ];
    let index = placement_fixture();
    for case in cases {
        assert_eq!(
            index.upsert_node(node("n1", case.labels)),
            Upsert::Updated,
            "{}",
            case.what
        );
        let view = index.placement();
        assert_eq!(
            names(view.nodes_in_pool("hangzhou")),
            case.hangzhou,
            "{}",
            case.what
        );
        assert_eq!(
            names(view.nodes_in_pool("beijing")),
            case.beijing,
            "{}",
            case.what
        );
        assert_eq!(view.pool_of_node("n1"), case.pool_of_n1, "{}", case.what);
        // Every label of the new set answers, none of the old ones linger.
        for (key, value) in case.labels {
            assert!(
                view.nodes_with_label(key, value).any(|n| n.name == "n1"),
                "{}: {key}={value}",
                case.what
            );
        }
    }
    let view = index.placement();
    assert!(!view.nodes_with_label("zone", "a").any(|n| n.name == "n1"));
    assert!(
        !view
            .nodes_with_label_key("node-role.kubernetes.io/edge")
            .any(|n| n.name == "n1")
    );
    drop(view);
    // n1: pool; n2: pool, zone; n3: pool, edge; n4: zone
    assert_eq!(index.placement.read().label_index_entries(), 6);
}

#[test]
fn label_counts_agree_with_the_node_sets() {
    let index = placement_fixture();
    index.upsert_node(node("n2", &[(POOL, "hangzhou"), ("zone", "a")]));
    index.remove_node("n4");
    let view = index.placement();
    for (key, value, expected) in [
        ("zone", "a", 2),
        ("zone", "b", 0),
        ("missing", "a", 0),
        ("node-role.kubernetes.io/edge", "", 2),
        (POOL, "hangzhou", 2),
    ] {
        assert_eq!(view.label_count(key, value), expected, "{key}={value}");
        assert_eq!(
            view.label_count(key, value),
            view.nodes_with_label(key, value).count(),
            "{key}={value}"
        );
    }
    for (key, expected) in [("zone", 2), ("missing", 0), (POOL, 3)] {
        assert_eq!(view.label_key_count(key), expected, "{key}");
        assert_eq!(
            view.label_key_count(key),
            view.nodes_with_label_key(key).count(),
            "{key}"
        );
    }
}

#[test]
fn label_value_change_within_key() {
    let index = placement_fixture();
    index.upsert_node(node("n2", &[(POOL, "hangzhou"), ("zone", "a")]));
    let view = index.placement();
    assert_eq!(
        names(view.nodes_with_label("zone", "a")),
        ["n1", "n2", "n4"]
    );
    assert_eq!(view.nodes_with_label("zone", "b").count(), 0);
    assert_eq!(view.label_values("zone").collect::<Vec<_>>(), ["a"]);
    assert_eq!(names(view.nodes_with_label_key("zone")), ["n1", "n2", "n4"]);
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
    let cases = [
        Case {
            what: "nodes",
            kind: ResourceKind::Node,
            keep: vec![ObjectKey::cluster("n1"), ObjectKey::cluster("n9")],
            removed: vec![
                ObjectKey::cluster("n2"),
                ObjectKey::cluster("n3"),
                ObjectKey::cluster("n4"),
            ],
            left: 1,
        },
        Case {
            what: "nodes keyed with a namespace do not match",
            kind: ResourceKind::Node,
            keep: vec![ObjectKey::namespaced("x", "n1")],
            removed: ["n1", "n2", "n3", "n4"]
                .into_iter()
                .map(ObjectKey::cluster)
                .collect(),
            left: 0,
        },
        Case {
            what: "all nodes kept",
            kind: ResourceKind::Node,
            keep: ["n1", "n2", "n3", "n4"]
                .into_iter()
                .map(ObjectKey::cluster)
                .collect(),
            removed: vec![],
            left: 4,
        },
        Case {
            what: "pools",
            kind: ResourceKind::NodePool,
            keep: vec![ObjectKey::cluster("beijing")],
            removed: vec![ObjectKey::cluster("hangzhou")],
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
        let index = placement_fixture();
        index.upsert_machine_class(class(NS, "c1"));
        index.upsert_machine_class(class(NS, "c2"));
        index.upsert_machine_class(class("other", "c1"));
        for (ns, name, class_name) in [
            (NS, "m1", "c1"),
            (NS, "m2", "c1"),
            (NS, "m3", "c2"),
            (NS, "m4", "missing"),
            ("other", "m1", "c1"),
        ] {
            index.upsert_machine(machine(ns, name, class_name));
        }
        index.upsert_config_map(
            ObjectKey::namespaced("poolkeeper-system", "placement"),
            labels(&[("placement.yaml", "bindings: []")]),
        );
        let before: BTreeMap<ResourceKind, usize> = ResourceKind::ALL
            .into_iter()
            .map(|k| (k, index.count(k)))
            .collect();

        let removed = index.retain(case.kind, &keys(&case.keep));
        assert_eq!(removed, case.removed, "{}", case.what);
        assert_eq!(index.count(case.kind), case.left, "{}", case.what);
        for kind in ResourceKind::ALL.into_iter().filter(|k| *k != case.kind) {
            assert_eq!(
                index.count(kind),
                before[&kind],
                "{}: {kind} untouched",
                case.what
            );
        }
        // Removed keys are gone from the secondary indexes too.
        assert_eq!(
            index.machines.read().class_index_entries(),
            index.count(ResourceKind::Machine),
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
        assert!(index.retain(case.kind, &keys(&case.keep)).is_empty());
    }
}

#[test]
fn retain_machines_updates_class_index() {
    let index = machines_fixture();
    index.retain(
        ResourceKind::Machine,
        &keys(&[ObjectKey::namespaced(NS, "m3")]),
    );
    let view = index.machines();
    assert_eq!(view.machines_of_class(NS, "c1").count(), 0);
    assert_eq!(view.machines_of_class("other", "c1").count(), 0);
    assert_eq!(machine_names(view.machines_of_class(NS, "c2")), ["m3"]);
    assert_eq!(view.referenced_classes("other").count(), 0);
}

#[test]
fn config_map_generation_bumps_on_every_change() {
    let key = ObjectKey::namespaced("poolkeeper-system", "placement");
    let other = ObjectKey::namespaced("poolkeeper-system", "other");
    let index = Index::new(POOL);
    enum Op {
        Upsert(ObjectKey, &'static [(&'static str, &'static str)]),
        Remove(ObjectKey),
        Retain(Vec<ObjectKey>),
    }
    let cases: Vec<(&str, Op, u64)> = vec![
        ("start", Op::Retain(vec![]), 0),
        ("create", Op::Upsert(key.clone(), &[("a", "1")]), 1),
        ("same data", Op::Upsert(key.clone(), &[("a", "1")]), 1),
        ("new value", Op::Upsert(key.clone(), &[("a", "2")]), 2),
        (
            "new key",
            Op::Upsert(key.clone(), &[("a", "2"), ("b", "")]),
            3,
        ),
        ("empty data", Op::Upsert(key.clone(), &[]), 4),
        ("empty again", Op::Upsert(key.clone(), &[]), 4),
        ("second map", Op::Upsert(other.clone(), &[("x", "y")]), 5),
        ("remove", Op::Remove(key.clone()), 6),
        ("remove missing", Op::Remove(key.clone()), 6),
        ("retain keeping all", Op::Retain(vec![other.clone()]), 6),
        ("retain removing", Op::Retain(vec![]), 7),
    ];
    for (what, op, generation) in cases {
        match op {
            Op::Upsert(key, data) => {
                index.upsert_config_map(key, labels(data));
            }
            Op::Remove(key) => {
                index.remove_config_map(&key);
            }
            Op::Retain(keep) => {
                index.retain(ResourceKind::ConfigMap, &keys(&keep));
            }
        }
        assert_eq!(
            index.placement().config_maps_generation(),
            generation,
            "{what}"
        );
    }
}

#[test]
fn config_map_reads() {
    let index = Index::new(POOL);
    let key = ObjectKey::namespaced("poolkeeper-system", "placement");
    let data = labels(&[("placement.yaml", "bindings: []")]);
    assert_eq!(
        index.upsert_config_map(key.clone(), data.clone()),
        Upsert::Created
    );
    let view = index.placement();
    assert_eq!(view.config_map(&key), Some(&data));
    assert_eq!(
        view.config_map(&ObjectKey::namespaced("default", "placement")),
        None
    );
}

#[test]
fn unchanged_projection_is_detected() {
    let index = placement_fixture();
    type Op = Box<dyn Fn(&Index) -> Upsert>;
    let mut cases: Vec<(&str, Op, Upsert)> = Vec::new();
    cases.push((
        "node heartbeat: same projection",
        Box::new(|i| i.upsert_node(node("n2", &[(POOL, "hangzhou"), ("zone", "b")]))),
        Upsert::Unchanged,
    ));
    cases.push((
        "node readiness flips",
        Box::new(|i| {
            let mut n = node("n2", &[(POOL, "hangzhou"), ("zone", "b")]);
            n.ready = false;
            i.upsert_node(n)
        }),
        Upsert::Updated,
    ));
    cases.push((
        "node taint added",
        Box::new(|i| {
            let mut n = node("n2", &[(POOL, "hangzhou"), ("zone", "b")]);
            n.taints.push(Taint {
                key: "k".into(),
                value: None,
                effect: "NoSchedule".into(),
            });
            i.upsert_node(n)
        }),
        Upsert::Updated,
    ));
    cases.push((
        "new node",
        Box::new(|i| i.upsert_node(node("n9", &[]))),
        Upsert::Created,
    ));
    cases.push((
        "same pool",
        Box::new(|i| i.upsert_node_pool(pool("hangzhou", PoolType::Edge))),
        Upsert::Unchanged,
    ));
    cases.push((
        "pool type changes",
        Box::new(|i| i.upsert_node_pool(pool("hangzhou", PoolType::Cloud))),
        Upsert::Updated,
    ));
    cases.push((
        "new pool",
        Box::new(|i| i.upsert_node_pool(pool("shanghai", PoolType::Edge))),
        Upsert::Created,
    ));
    cases.push((
        "new class",
        Box::new(|i| i.upsert_machine_class(class(NS, "c1"))),
        Upsert::Created,
    ));
    cases.push((
        "same class",
        Box::new(|i| i.upsert_machine_class(class(NS, "c1"))),
        Upsert::Unchanged,
    ));
    cases.push((
        "class finalizer added",
        Box::new(|i| {
            let mut c = class(NS, "c1");
            c.finalizers
                .push("machine.sapcloud.io/machine-controller-manager".into());
            c.resource_version = "2".into();
            i.upsert_machine_class(c)
        }),
        Upsert::Updated,
    ));
    cases.push((
        "class spec changed",
        Box::new(|i| {
            let mut c = class(NS, "c1");
            c.finalizers
                .push("machine.sapcloud.io/machine-controller-manager".into());
            c.resource_version = "2".into();
            c.spec_hash = 2;
            i.upsert_machine_class(c)
        }),
        Upsert::Updated,
    ));
    cases.push((
        "new machine",
        Box::new(|i| i.upsert_machine(machine(NS, "m1", "c1"))),
        Upsert::Created,
    ));
    cases.push((
        "same machine",
        Box::new(|i| i.upsert_machine(machine(NS, "m1", "c1"))),
        Upsert::Unchanged,
    ));
    cases.push((
        "machine deleting",
        Box::new(|i| {
            let mut m = machine(NS, "m1", "c1");
            m.deleting = true;
            i.upsert_machine(m)
        }),
        Upsert::Updated,
    ));
    for (what, op, expected) in cases {
        assert_eq!(op(&index), expected, "{what}");
    }
}

#[test]
fn upsert_maps_to_bus_change() {
    use poolkeeper_bus::Change;
    let cases = [
        (Upsert::Created, Some(Change::Created), true),
        (Upsert::Updated, Some(Change::Updated), true),
        (Upsert::Unchanged, None, false),
    ];
    for (upsert, change, changed) in cases {
        assert_eq!(upsert.change(), change, "{upsert:?}");
        assert_eq!(upsert.is_changed(), changed, "{upsert:?}");
    }
}

#[test]
fn counts_and_keys_per_kind() {
    let index = placement_fixture();
    index.upsert_machine_class(class(NS, "c1"));
    index.upsert_machine(machine(NS, "m1", "c1"));
    let cases = [
        (ResourceKind::Node, 4, "n1"),
        (ResourceKind::NodePool, 2, "beijing"),
        (ResourceKind::MachineClass, 1, "machine-system/c1"),
        (ResourceKind::Machine, 1, "machine-system/m1"),
        (ResourceKind::ConfigMap, 0, ""),
    ];
    for (kind, count, first) in cases {
        assert_eq!(index.count(kind), count, "{kind}");
        let keys = index.keys(kind);
        assert_eq!(keys.len(), count, "{kind}");
        assert_eq!(
            keys.first().map(ToString::to_string).unwrap_or_default(),
            first,
            "{kind}"
        );
    }
}

#[test]
fn metrics_follow_counts() {
    let index = placement_fixture();
    let mut registry = Registry::default();
    index.register_metrics(&mut registry);
    index.upsert_machine(machine(NS, "m1", "c1"));
    index.remove_node("n4");
    index.retain(
        ResourceKind::NodePool,
        &keys(&[ObjectKey::cluster("beijing")]),
    );
    let mut text = String::new();
    encode(&mut text, &registry).expect("encoding metrics");
    let cases = [
        r#"poolkeeper_index_objects{kind="Node"} 3"#,
        r#"poolkeeper_index_objects{kind="NodePool"} 1"#,
        r#"poolkeeper_index_objects{kind="Machine"} 1"#,
        r#"poolkeeper_index_objects{kind="MachineClass"} 0"#,
        r#"poolkeeper_index_objects{kind="ConfigMap"} 0"#,
    ];
    for line in cases {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}

#[test]
fn halves_lock_independently() {
    let index = placement_fixture();
    // A placement reader must not keep machine writers waiting, and the
    // reverse: with one lock these writes would deadlock this thread.
    let placement = index.placement();
    assert_eq!(
        index.upsert_machine(machine(NS, "m1", "c1")),
        Upsert::Created
    );
    let machines = index.machines();
    assert!(index.placement.try_write().is_none());
    drop(placement);
    assert_eq!(index.upsert_node(node("n9", &[])), Upsert::Created);
    assert_eq!(machines.machine_count(), 1);
}

#[test]
fn index_is_shareable() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Index>();
    let index = placement_fixture();
    assert!(format!("{index:?}").contains("Node: 4"));
}
