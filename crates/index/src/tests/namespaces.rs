//! Namespaces: what a label binding is read from, and the policy generation
//! they share with ConfigMaps.

use k8s_openapi::api::core::v1 as core;
use serde_json::json;

use crate::{Change, Index, IndexResource, ObjectKey};

use super::{POOL, config_map, key_set, label_map, parse};

fn namespace(name: &str, labels: &[(&str, &str)]) -> core::Namespace {
    parse(json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": label_map(labels)},
        "status": {"phase": "Active"},
    }))
}

#[test]
fn namespaces_keep_name_uid_and_labels() {
    let index = Index::new(POOL);
    let created = index.apply(namespace("shop", &[(POOL, "hangzhou")]));
    assert_eq!(
        created.map(|c| (c.key, c.change)),
        Some((ObjectKey::cluster("shop"), Change::Created))
    );
    let view = index.placement();
    let stored: Vec<_> = view.namespaces().collect();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].name, "shop");
    assert_eq!(stored[0].uid, "uid-shop");
    assert_eq!(stored[0].labels, label_map(&[(POOL, "hangzhou")]));
}

#[test]
fn policy_generation_follows_namespaces_and_config_maps() {
    let index = Index::new(POOL);
    enum Op {
        Namespace(&'static str, &'static [(&'static str, &'static str)]),
        ConfigMap(&'static str),
        Delete(&'static str),
        Retain(&'static [&'static str]),
    }
    let cases: Vec<(&str, Op, u64)> = vec![
        ("labelled", Op::Namespace("shop", &[(POOL, "a")]), 1),
        ("same labels", Op::Namespace("shop", &[(POOL, "a")]), 1),
        ("relabelled", Op::Namespace("shop", &[(POOL, "b")]), 2),
        ("second", Op::Namespace("web", &[(POOL, "a")]), 3),
        ("config map", Op::ConfigMap("x: y"), 4),
        ("unlabelled (deleted from the watch)", Op::Delete("shop"), 5),
        ("delete missing", Op::Delete("shop"), 5),
        ("retain keeping all", Op::Retain(&["web"]), 5),
        ("retain removing", Op::Retain(&[]), 6),
    ];
    for (what, op, generation) in cases {
        match op {
            Op::Namespace(name, labels) => {
                index.apply(namespace(name, labels));
            }
            Op::ConfigMap(data) => {
                index.apply(config_map("poolkeeper-system", "placement", &[("p", data)]));
            }
            Op::Delete(name) => {
                IndexResource::<core::Namespace>::delete(&index, &ObjectKey::cluster(name));
            }
            Op::Retain(keep) => {
                let keep: Vec<ObjectKey> = keep.iter().map(|n| ObjectKey::cluster(*n)).collect();
                IndexResource::<core::Namespace>::retain(&index, &key_set(&keep));
            }
        }
        assert_eq!(index.placement().policy_generation(), generation, "{what}");
    }
    assert_eq!(index.placement().namespaces().count(), 0);
}

#[test]
fn a_namespaced_key_names_no_namespace() {
    let index = Index::new(POOL);
    index.apply(namespace("shop", &[(POOL, "a")]));
    let key = ObjectKey::namespaced("shop", "shop");
    assert_eq!(IndexResource::<core::Namespace>::delete(&index, &key), None);
    assert_eq!(index.placement().namespaces().count(), 1);
}
