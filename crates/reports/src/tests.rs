//! Table tests of the pure core.

use std::collections::BTreeMap;

use poolkeeper_bus::{AuditCount, AuditViolation, Mode};
use serde_json::json;

use crate::{CONTENT_HASH, Write, desired_reports, plan, result_of};

fn violation(namespace: &str, name: &str, reason: &'static str, mode: Mode) -> AuditViolation {
    AuditViolation {
        namespace: namespace.to_owned(),
        pod: name.to_owned(),
        kind: "Pod",
        api_version: "v1",
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        mode,
        first_found: false,
        pool: "hangzhou".to_owned(),
        reason,
        node: Some("edge-1".to_owned()),
        message: format!("pod {name} is outside node pool \"hangzhou\""),
    }
}

fn count(namespace: &str, reason: &'static str, pods: usize) -> AuditCount {
    AuditCount {
        namespace: namespace.to_owned(),
        pool: "hangzhou".to_owned(),
        reason,
        pods,
    }
}

#[test]
fn the_mode_decides_fail_or_warn() {
    let cases = [
        (Mode::Enforce, "fail"),
        (Mode::Warn, "warn"),
        (Mode::Dryrun, "warn"),
    ];
    for (mode, expected) in cases {
        assert_eq!(result_of(mode), expected, "{mode:?}");
    }
}

#[test]
fn one_report_per_namespace_with_violations_one_result_each() {
    let results = [
        violation("shop", "web-2", "outside_pool", Mode::Enforce),
        violation("lab", "probe", "missing_edge_tolerations", Mode::Warn),
        violation("shop", "web-1", "outside_pool", Mode::Enforce),
    ];
    let counts = [
        count("shop", "outside_pool", 2),
        count("lab", "missing_edge_tolerations", 1),
    ];
    let reports = desired_reports(&counts, &results);
    assert_eq!(reports.keys().collect::<Vec<_>>(), ["lab", "shop"]);

    let shop = &reports["shop"].object;
    assert_eq!(shop["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(shop["kind"], "Report");
    assert_eq!(shop["metadata"]["name"], "poolkeeper-placement");
    assert_eq!(shop["metadata"]["namespace"], "shop");
    assert_eq!(
        shop["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "poolkeeper"
    );
    assert_eq!(
        shop["metadata"]["annotations"][CONTENT_HASH],
        json!(reports["shop"].hash)
    );
    assert_eq!(
        shop["summary"],
        json!({"pass": 0, "fail": 2, "warn": 0, "error": 0, "skip": 0})
    );
    let names: Vec<_> = shop["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resources"][0]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web-1", "web-2"], "results are sorted");
    assert_eq!(
        shop["results"][0],
        json!({
            "policy": "poolkeeper-placement",
            "rule": "outside_pool",
            "result": "fail",
            "message": "pod web-1 is outside node pool \"hangzhou\"",
            "source": "poolkeeper",
            "category": "placement",
            "properties": {"pool": "hangzhou", "mode": "enforce", "node": "edge-1"},
            "resources": [{
                "apiVersion": "v1", "kind": "Pod", "namespace": "shop",
                "name": "web-1", "uid": "uid-web-1",
            }],
        })
    );
    let lab = &reports["lab"].object;
    assert_eq!(lab["summary"]["warn"], 1);
    assert_eq!(lab["summary"]["fail"], 0);
    assert_eq!(lab["results"][0]["result"], "warn");
}

#[test]
fn the_summary_counts_violations_beyond_the_results_kept() {
    let results = [violation("shop", "web-1", "outside_pool", Mode::Enforce)];
    let counts = [
        count("shop", "outside_pool", 1500),
        count("shop", "no_matching_node", 7),
    ];
    let reports = desired_reports(&counts, &results);
    assert_eq!(reports["shop"].object["summary"]["fail"], 1507);
    assert_eq!(
        reports["shop"].object["configuration"]["limits"]["maxResults"],
        1000
    );
    assert_eq!(
        reports["shop"].object["results"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn the_hash_follows_the_content_and_not_the_order_found() {
    let a = violation("shop", "web-1", "outside_pool", Mode::Enforce);
    let b = violation("shop", "web-2", "outside_pool", Mode::Enforce);
    let counts = [count("shop", "outside_pool", 2)];
    let one = desired_reports(&counts, &[a.clone(), b.clone()]);
    let other = desired_reports(&counts, &[b.clone(), a.clone()]);
    assert_eq!(one["shop"].hash, other["shop"].hash);
    let mut moved = b;
    moved.node = Some("edge-2".to_owned());
    let changed = desired_reports(&counts, &[a, moved]);
    assert_ne!(one["shop"].hash, changed["shop"].hash);
}

#[test]
fn writes_only_what_differs() {
    let desired = desired_reports(
        &[
            count("shop", "outside_pool", 1),
            count("lab", "outside_pool", 1),
        ],
        &[
            violation("shop", "web-1", "outside_pool", Mode::Enforce),
            violation("lab", "probe", "outside_pool", Mode::Enforce),
        ],
    );
    let hash = |namespace: &str| desired[namespace].hash.clone();
    let stored = |entries: &[(&str, String)]| -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(namespace, hash)| ((*namespace).to_owned(), hash.clone()))
            .collect()
    };
    // (namespace, whether it is an apply)
    type Writes = Vec<(String, bool)>;
    let namespaces = |writes: Vec<Write>| -> Writes {
        writes
            .into_iter()
            .map(|w| (w.namespace().to_owned(), matches!(w, Write::Apply { .. })))
            .collect()
    };
    let cases: [(&str, BTreeMap<String, String>, Writes); 4] = [
        (
            "nothing stored",
            stored(&[]),
            vec![("lab".into(), true), ("shop".into(), true)],
        ),
        (
            "in step",
            stored(&[("lab", hash("lab")), ("shop", hash("shop"))]),
            vec![],
        ),
        (
            "one changed, one fixed",
            stored(&[
                ("shop", "old".into()),
                ("lab", hash("lab")),
                ("gone", "x".into()),
            ]),
            vec![("shop".into(), true), ("gone".into(), false)],
        ),
        (
            "a report stored without a hash is rewritten",
            stored(&[("lab", String::new()), ("shop", hash("shop"))]),
            vec![("lab".into(), true)],
        ),
    ];
    for (name, stored, expected) in cases {
        assert_eq!(namespaces(plan(&stored, &desired)), expected, "{name}");
    }
    assert!(
        plan(&stored(&[("gone", "x".into())]), &BTreeMap::new())
            .iter()
            .all(|w| matches!(w, Write::Delete { .. }))
    );
}
