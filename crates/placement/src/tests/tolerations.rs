//! Toleration semantics: one toleration against one taint, and whether a
//! Pod's tolerations already cover a required toleration.

use k8s_openapi::api::core::v1::Toleration;
use serde_json::json;

use super::taint;
use crate::tolerations::{
    describe_toleration, tolerates, toleration_tolerates_taint, tolerations_cover,
};

fn tol(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Toleration {
        key: opt(key),
        operator: opt(operator),
        value: opt(value),
        effect: opt(effect),
        toleration_seconds: None,
    }
}

#[test]
fn one_toleration_against_one_taint() {
    // (case, toleration, taint (key, value, effect), tolerated)
    let cases = [
        (
            "exists, empty key: every taint",
            tol("", "Exists", "", ""),
            ("a", Some("x"), "NoSchedule"),
            true,
        ),
        (
            "exists, empty key: NoExecute too",
            tol("", "Exists", "", ""),
            ("b", None, "NoExecute"),
            true,
        ),
        (
            "exists, empty key, effect: same effect",
            tol("", "Exists", "", "NoSchedule"),
            ("a", Some("x"), "NoSchedule"),
            true,
        ),
        (
            "exists, empty key, effect: other effect",
            tol("", "Exists", "", "NoSchedule"),
            ("a", Some("x"), "NoExecute"),
            false,
        ),
        (
            "exists: any value",
            tol("k", "Exists", "", "NoSchedule"),
            ("k", Some("whatever"), "NoSchedule"),
            true,
        ),
        (
            "exists: no value",
            tol("k", "Exists", "", "NoSchedule"),
            ("k", None, "NoSchedule"),
            true,
        ),
        (
            "exists: value ignored",
            tol("k", "Exists", "other", ""),
            ("k", Some("v"), "NoSchedule"),
            true,
        ),
        (
            "exists: other key",
            tol("k", "Exists", "", ""),
            ("j", None, "NoSchedule"),
            false,
        ),
        (
            "equal: same value",
            tol("k", "Equal", "v", "NoSchedule"),
            ("k", Some("v"), "NoSchedule"),
            true,
        ),
        (
            "equal: other value",
            tol("k", "Equal", "v", "NoSchedule"),
            ("k", Some("w"), "NoSchedule"),
            false,
        ),
        (
            "equal: taint without value",
            tol("k", "Equal", "v", ""),
            ("k", None, "NoSchedule"),
            false,
        ),
        (
            "equal: empty value, taint without value",
            tol("k", "Equal", "", ""),
            ("k", None, "NoSchedule"),
            true,
        ),
        (
            "equal: empty value, taint with empty value",
            tol("k", "Equal", "", ""),
            ("k", Some(""), "PreferNoSchedule"),
            true,
        ),
        (
            "equal: other key",
            tol("k", "Equal", "v", ""),
            ("j", Some("v"), "NoSchedule"),
            false,
        ),
        (
            "equal: values are case sensitive",
            tol("k", "Equal", "V", ""),
            ("k", Some("v"), "NoSchedule"),
            false,
        ),
        (
            "operator omitted means Equal",
            tol("k", "", "v", ""),
            ("k", Some("v"), "NoExecute"),
            true,
        ),
        (
            "operator omitted, other value",
            tol("k", "", "v", ""),
            ("k", Some("w"), "NoExecute"),
            false,
        ),
        (
            "empty effect: NoSchedule",
            tol("k", "Exists", "", ""),
            ("k", None, "NoSchedule"),
            true,
        ),
        (
            "empty effect: PreferNoSchedule",
            tol("k", "Exists", "", ""),
            ("k", None, "PreferNoSchedule"),
            true,
        ),
        (
            "empty effect: NoExecute",
            tol("k", "Exists", "", ""),
            ("k", None, "NoExecute"),
            true,
        ),
        (
            "effect NoExecute vs NoSchedule",
            tol("k", "Exists", "", "NoExecute"),
            ("k", None, "NoSchedule"),
            false,
        ),
        (
            "effect PreferNoSchedule vs NoSchedule",
            tol("k", "Exists", "", "PreferNoSchedule"),
            ("k", None, "NoSchedule"),
            false,
        ),
        (
            "effect NoExecute matches",
            tol("k", "Equal", "v", "NoExecute"),
            ("k", Some("v"), "NoExecute"),
            true,
        ),
        (
            "unknown operator",
            tol("k", "Gt", "1", ""),
            ("k", Some("2"), "NoSchedule"),
            false,
        ),
        (
            "lowercase operator",
            tol("k", "exists", "", ""),
            ("k", None, "NoSchedule"),
            false,
        ),
        // API validation forbids an empty key with Equal; the Kubernetes code
        // then compares values only.
        (
            "empty key, equal, same value",
            tol("", "Equal", "v", ""),
            ("any", Some("v"), "NoSchedule"),
            true,
        ),
        (
            "empty key, equal, other value",
            tol("", "Equal", "v", ""),
            ("any", Some("w"), "NoSchedule"),
            false,
        ),
    ];
    for (name, toleration, (key, value, effect), expected) in cases {
        let t = taint(key, value, effect);
        assert_eq!(
            toleration_tolerates_taint(&toleration, &t),
            expected,
            "case {name:?}"
        );
        assert_eq!(
            tolerates(std::slice::from_ref(&toleration), &t),
            expected,
            "case {name:?}"
        );
    }
}

#[test]
fn toleration_seconds_do_not_change_matching() {
    let mut toleration = tol("k", "Exists", "", "NoExecute");
    toleration.toleration_seconds = Some(300);
    assert!(toleration_tolerates_taint(
        &toleration,
        &taint("k", None, "NoExecute")
    ));
    toleration.toleration_seconds = Some(0);
    assert!(toleration_tolerates_taint(
        &toleration,
        &taint("k", None, "NoExecute")
    ));
}

#[test]
fn any_toleration_of_a_list() {
    let list = [
        tol("a", "Exists", "", "NoSchedule"),
        tol("b", "Equal", "v", ""),
    ];
    assert!(tolerates(&list, &taint("a", None, "NoSchedule")));
    assert!(tolerates(&list, &taint("b", Some("v"), "NoExecute")));
    assert!(!tolerates(&list, &taint("a", None, "NoExecute")));
    assert!(!tolerates(&list, &taint("c", None, "NoSchedule")));
    assert!(!tolerates(&[], &taint("a", None, "NoSchedule")));
}

#[test]
fn coverage_of_a_required_toleration() {
    let edge = tol("edge", "Exists", "", "NoSchedule");
    let edge_all_effects = tol("edge", "Exists", "", "");
    let edge_equal = tol("edge", "Equal", "v", "NoSchedule");
    let everything = tol("", "Exists", "", "");
    // (case, pod tolerations, required, covered)
    let cases = [
        ("nothing covers nothing", vec![], edge.clone(), false),
        ("itself", vec![edge.clone()], edge.clone(), true),
        (
            "same with explicit Equal absent",
            vec![tol("edge", "Exists", "", "NoSchedule")],
            edge.clone(),
            true,
        ),
        (
            "all effects cover one",
            vec![edge_all_effects.clone()],
            edge.clone(),
            true,
        ),
        (
            "tolerate-everything covers",
            vec![everything.clone()],
            edge.clone(),
            true,
        ),
        (
            "empty key with the effect covers",
            vec![tol("", "Exists", "", "NoSchedule")],
            edge.clone(),
            true,
        ),
        (
            "empty key with another effect does not",
            vec![tol("", "Exists", "", "NoExecute")],
            edge.clone(),
            false,
        ),
        (
            "one value does not cover every value",
            vec![edge_equal.clone()],
            edge.clone(),
            false,
        ),
        (
            "other effect does not cover",
            vec![tol("edge", "Exists", "", "NoExecute")],
            edge.clone(),
            false,
        ),
        (
            "other key does not cover",
            vec![tol("cloud", "Exists", "", "")],
            edge.clone(),
            false,
        ),
        (
            "one effect does not cover all",
            vec![edge.clone()],
            edge_all_effects.clone(),
            false,
        ),
        (
            "three effects together cover all",
            vec![
                edge.clone(),
                tol("edge", "Exists", "", "PreferNoSchedule"),
                tol("edge", "Exists", "", "NoExecute"),
            ],
            edge_all_effects.clone(),
            true,
        ),
        (
            "two of three effects do not",
            vec![edge.clone(), tol("edge", "Exists", "", "NoExecute")],
            edge_all_effects.clone(),
            false,
        ),
        (
            "equal covered by same equal",
            vec![edge_equal.clone()],
            edge_equal.clone(),
            true,
        ),
        (
            "equal covered by exists",
            vec![edge.clone()],
            edge_equal.clone(),
            true,
        ),
        (
            "equal not covered by another value",
            vec![tol("edge", "Equal", "w", "NoSchedule")],
            edge_equal.clone(),
            false,
        ),
        (
            "equal covered by operator omitted",
            vec![tol("edge", "", "v", "")],
            edge_equal.clone(),
            true,
        ),
        (
            "empty value equal",
            vec![tol("edge", "Equal", "", "NoSchedule")],
            tol("edge", "", "", "NoSchedule"),
            true,
        ),
        (
            "tolerate-everything needs tolerate-everything",
            vec![edge_all_effects.clone()],
            everything.clone(),
            false,
        ),
        (
            "tolerate-everything covers itself",
            vec![everything.clone()],
            everything.clone(),
            true,
        ),
        (
            "effect-limited everything is not everything",
            vec![tol("", "Exists", "", "NoSchedule")],
            everything.clone(),
            false,
        ),
        (
            "unknown operator on the pod covers nothing",
            vec![tol("edge", "Gt", "1", "")],
            edge.clone(),
            false,
        ),
    ];
    for (name, have, required, expected) in cases {
        assert_eq!(
            tolerations_cover(&have, &required),
            expected,
            "case {name:?}"
        );
    }
}

/// Coverage agrees with toleration of concrete taints: covered exactly when
/// every sample taint the required toleration tolerates is tolerated too.
#[test]
fn coverage_is_consistent_with_taints() {
    let keys = ["", "edge", "cloud"];
    let operators = ["", "Equal", "Exists"];
    let values = ["", "v", "w"];
    let effects = ["", "NoSchedule", "PreferNoSchedule", "NoExecute"];
    let mut all = Vec::new();
    for key in keys {
        for operator in operators {
            for value in values {
                for effect in effects {
                    all.push(tol(key, operator, value, effect));
                }
            }
        }
    }
    let taints: Vec<_> = ["edge", "cloud", "other"]
        .into_iter()
        .flat_map(|k| [None, Some("v"), Some("w"), Some("z")].map(move |v| (k, v)))
        .flat_map(|(k, v)| {
            ["NoSchedule", "PreferNoSchedule", "NoExecute"].map(move |e| taint(k, v, e))
        })
        .collect();
    for required in &all {
        for have in &all {
            let list = std::slice::from_ref(have);
            let witness = taints.iter().find(|t| {
                toleration_tolerates_taint(required, t) && !toleration_tolerates_taint(have, t)
            });
            if tolerations_cover(list, required) {
                assert!(
                    witness.is_none(),
                    "{have:?} claims to cover {required:?} but misses {witness:?}"
                );
            } else {
                assert!(
                    witness.is_some(),
                    "{have:?} covers {required:?} on every sample taint"
                );
            }
        }
        // Every toleration covers itself (needed for idempotent mutation).
        assert!(
            tolerations_cover(std::slice::from_ref(required), required),
            "{required:?}"
        );
    }
}

#[test]
fn descriptions() {
    assert_eq!(
        describe_toleration(&tol(
            "node-role.kubernetes.io/edge",
            "Exists",
            "",
            "NoSchedule"
        )),
        "{key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}"
    );
    let t: Toleration = serde_json::from_value(
        json!({"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30}),
    )
    .unwrap();
    assert_eq!(
        describe_toleration(&t),
        "{key: k, operator: Equal, value: v, effect: NoExecute, tolerationSeconds: 30}"
    );
}
