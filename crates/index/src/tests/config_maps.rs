//! ConfigMaps: data reads and the generation readers cache by.

use k8s_openapi::api::core::v1 as core;

use crate::{Change, Index, IndexResource, ObjectKey};

use super::{POOL, config_map, key_set, label_map};

#[test]
fn generation_bumps_on_every_change() {
    let key = ObjectKey::namespaced("poolkeeper-system", "placement");
    let other = ObjectKey::namespaced("poolkeeper-system", "other");
    let index = Index::new(POOL);
    enum Op {
        Apply(&'static str, &'static [(&'static str, &'static str)]),
        Delete(ObjectKey),
        Retain(Vec<ObjectKey>),
    }
    let cases: Vec<(&str, Op, u64)> = vec![
        ("start", Op::Retain(vec![]), 0),
        ("create", Op::Apply("placement", &[("a", "1")]), 1),
        ("same data", Op::Apply("placement", &[("a", "1")]), 1),
        ("new value", Op::Apply("placement", &[("a", "2")]), 2),
        (
            "new key",
            Op::Apply("placement", &[("a", "2"), ("b", "")]),
            3,
        ),
        ("empty data", Op::Apply("placement", &[]), 4),
        ("empty again", Op::Apply("placement", &[]), 4),
        ("second map", Op::Apply("other", &[("x", "y")]), 5),
        ("delete", Op::Delete(key.clone()), 6),
        ("delete missing", Op::Delete(key.clone()), 6),
        ("retain keeping all", Op::Retain(vec![other.clone()]), 6),
        ("retain removing", Op::Retain(vec![]), 7),
    ];
    for (what, op, generation) in cases {
        match op {
            Op::Apply(name, data) => {
                index.apply(config_map("poolkeeper-system", name, data));
            }
            Op::Delete(key) => {
                IndexResource::<core::ConfigMap>::delete(&index, &key);
            }
            Op::Retain(keep) => {
                IndexResource::<core::ConfigMap>::retain(&index, &key_set(&keep));
            }
        }
        assert_eq!(index.placement().policy_generation(), generation, "{what}");
    }
}

#[test]
fn data_is_read_by_key() {
    let index = Index::new(POOL);
    let key = ObjectKey::namespaced("poolkeeper-system", "placement");
    let data = [("placement.yaml", "bindings: []")];
    let created = index.apply(config_map("poolkeeper-system", "placement", &data));
    assert_eq!(
        created.map(|c| (c.key, c.change, c.related)),
        Some((key.clone(), Change::Created, vec![]))
    );
    let view = index.placement();
    assert_eq!(view.config_map(&key), Some(&label_map(&data)));
    assert_eq!(
        view.config_map(&ObjectKey::namespaced("default", "placement")),
        None
    );
}
