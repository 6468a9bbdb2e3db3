//! Node and NodePool queries and the label index behind them.

use k8s_openapi::api::core::v1 as core;

use crate::{IndexResource, ObjectKey, PlacementView, PoolType};

use super::{EDGE_ROLE, POOL, names, node, node_pool, placement_fixture};

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
            |v| names(v.nodes_with_label(EDGE_ROLE, "")),
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
    assert_eq!(index.pool_label(), POOL);
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
        let changed = index.apply(node("n1", case.labels));
        assert!(changed.is_some(), "{}", case.what);
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
    assert!(!view.nodes_with_label_key(EDGE_ROLE).any(|n| n.name == "n1"));
    drop(view);
    // n1: pool; n2: pool, zone; n3: pool, edge; n4: zone
    assert_eq!(index.placement.read().label_index_entries(), 6);
}

#[test]
fn label_counts_agree_with_the_node_sets() {
    let index = placement_fixture();
    index.apply(node("n2", &[(POOL, "hangzhou"), ("zone", "a")]));
    IndexResource::<core::Node>::delete(&index, &ObjectKey::cluster("n4"));
    let view = index.placement();
    for (key, value, expected) in [
        ("zone", "a", 2),
        ("zone", "b", 0),
        ("missing", "a", 0),
        (EDGE_ROLE, "", 2),
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
    index.apply(node("n2", &[(POOL, "hangzhou"), ("zone", "a")]));
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
fn pool_type_change_is_seen() {
    let index = placement_fixture();
    index.apply(node_pool("hangzhou", Some("Cloud")));
    assert_eq!(
        index.placement().node_pool("hangzhou").map(|p| p.pool_type),
        Some(PoolType::Cloud)
    );
}

const HOSTNAME: &str = "kubernetes.io/hostname";

#[derive(Clone, Copy)]
enum Write {
    Apply(&'static str, &'static [(&'static str, &'static str)]),
    Delete(&'static str),
}

/// What, the writes, the distinct strings stored after each.
type SharingCase = (&'static str, &'static [Write], &'static [usize]);

const SHARING: &[SharingCase] = {
    use Write::{Apply, Delete};
    &[
        (
            "first node: name (= hostname), 2 keys, pool",
            &[Apply("n1", &[(POOL, "p1"), (HOSTNAME, "n1")])],
            &[4],
        ),
        (
            "second node: its name, same keys and pool",
            &[
                Apply("n1", &[(POOL, "p1"), (HOSTNAME, "n1")]),
                Apply("n2", &[(POOL, "p1"), (HOSTNAME, "n2")]),
            ],
            &[4, 5],
        ),
        (
            "a changed value releases the old one with its last Node",
            &[
                Apply("n1", &[(POOL, "p1"), (HOSTNAME, "n1")]),
                Apply("n2", &[(POOL, "p1"), (HOSTNAME, "n2")]),
                Apply("n2", &[(POOL, "p2"), (HOSTNAME, "n2")]),
                Apply("n1", &[(POOL, "p2"), (HOSTNAME, "n1")]),
            ],
            &[4, 5, 6, 5],
        ),
        (
            "a dropped key is released with its last Node",
            &[
                Apply("n1", &[(POOL, "p1"), ("gpu", "")]),
                Apply("n2", &[(POOL, "p1"), ("gpu", "")]),
                Apply("n1", &[(POOL, "p1")]),
                Apply("n2", &[(POOL, "p1")]),
            ],
            &[5, 6, 6, 4],
        ),
        (
            "an unchanged update keeps everything",
            &[Apply("n1", &[(POOL, "p1")]), Apply("n1", &[(POOL, "p1")])],
            &[3, 3],
        ),
        (
            "deletes release names, then everything",
            &[
                Apply("n1", &[(POOL, "p1"), (HOSTNAME, "n1")]),
                Apply("n2", &[(POOL, "p1"), (HOSTNAME, "n2")]),
                Delete("n1"),
                Delete("n2"),
                Delete("n2"),
            ],
            &[4, 5, 4, 0, 0],
        ),
    ]
};

/// Node names, label keys and values are stored once however many Nodes
/// have them, and forgotten with the last Node that had them.
#[test]
fn node_strings_are_shared_and_released() {
    for (what, writes, stored) in SHARING {
        let index = crate::Index::new(POOL);
        let mut seen = Vec::new();
        for write in *writes {
            match *write {
                Write::Apply(name, labels) => {
                    index.apply(node(name, labels));
                }
                Write::Delete(name) => {
                    IndexResource::<core::Node>::delete(&index, &ObjectKey::cluster(name));
                }
            }
            seen.push(index.placement.read().shared_strings());
        }
        assert_eq!(seen, *stored, "{what}");
    }
}

#[test]
fn equal_strings_are_one_allocation() {
    let index = crate::Index::new(POOL);
    index.apply(node("n1", &[(POOL, "p1"), (HOSTNAME, "n1")]));
    index.apply(node("n2", &[(POOL, "p1"), (HOSTNAME, "n2")]));
    let view = index.placement();
    let (n1, n2) = (view.node("n1").unwrap(), view.node("n2").unwrap());
    let value = |node: &crate::Node, key: &str| node.labels.get(key).unwrap().as_ptr();
    assert_eq!(value(n1, POOL), value(n2, POOL), "one copy of the pool");
    assert_eq!(
        n1.name.as_ptr(),
        value(n1, HOSTNAME),
        "the hostname is the name"
    );
    let keys = |node: &crate::Node| node.labels.keys().map(|k| k.as_ptr()).collect::<Vec<_>>();
    assert_eq!(keys(n1), keys(n2), "one copy of each key");
}
