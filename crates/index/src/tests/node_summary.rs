//! The Node the watchers decode: it projects as the full Node does, and
//! decodes or fails where the full Node's projected fields do.

use k8s_openapi::api::core::v1 as core;
use kube::Resource;
use serde_json::{Value, json};

use crate::{Index, IndexResource, Node, NodeSummary, ObjectKey, Taint};

use super::POOL;

const HEARTBEAT: &str = include_str!("../../fixtures/node-heartbeat.json");

/// The projection through the watchers' decode.
fn summary_projection(value: &Value) -> Node {
    Node::from(serde_json::from_value::<NodeSummary>(value.clone()).expect("summary decodes"))
}

/// The projection of a full Node.
fn full_projection(value: &Value) -> Node {
    let node: core::Node = serde_json::from_value(value.clone()).expect("Node decodes");
    Node::from(NodeSummary::from(node))
}

fn node(name: &str, labels: &[(&str, &str)], taints: Vec<Taint>, ready: bool) -> Node {
    Node {
        name: name.into(),
        labels: labels.iter().copied().collect(),
        taints,
        ready,
    }
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        value: value.map(str::to_owned),
        effect: effect.to_owned(),
    }
}

#[test]
fn the_summary_projects_as_the_full_node() {
    let ready = |status: &str| json!({"conditions": [{"type": "Ready", "status": status}]});
    let cases = [
        (
            "no spec, no status",
            json!({"metadata": {"name": "n1"}}),
            node("n1", &[], vec![], false),
        ),
        (
            "labels, ready",
            json!({"metadata": {"name": "n1", "labels": {POOL: "hangzhou", "zone": "a"}},
                   "status": ready("True")}),
            node("n1", &[(POOL, "hangzhou"), ("zone", "a")], vec![], true),
        ),
        (
            "not ready",
            json!({"metadata": {"name": "n1"}, "status": ready("False")}),
            node("n1", &[], vec![], false),
        ),
        (
            "unknown",
            json!({"metadata": {"name": "n1"}, "status": ready("Unknown")}),
            node("n1", &[], vec![], false),
        ),
        (
            "other conditions only",
            json!({"metadata": {"name": "n1"},
                   "status": {"conditions": [{"type": "DiskPressure", "status": "True"}]}}),
            node("n1", &[], vec![], false),
        ),
        (
            "the first Ready condition decides",
            json!({"metadata": {"name": "n1"}, "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
                {"type": "Ready", "status": "False"}]}}),
            node("n1", &[], vec![], true),
        ),
        (
            "lower-case true is not True",
            json!({"metadata": {"name": "n1"}, "status": ready("true")}),
            node("n1", &[], vec![], false),
        ),
        (
            "empty taints, no conditions",
            json!({"metadata": {"name": "n1"}, "spec": {"taints": []},
                   "status": {"conditions": []}}),
            node("n1", &[], vec![], false),
        ),
        (
            "taints: an empty value is none",
            json!({"metadata": {"name": "n1"}, "spec": {"taints": [
                {"key": "edge", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "gpu", "effect": "NoExecute",
                 "timeAdded": "2026-01-01T00:00:00Z"},
                {"key": "empty", "value": "", "effect": "PreferNoSchedule"}]}}),
            node(
                "n1",
                &[],
                vec![
                    taint("edge", None, "NoSchedule"),
                    taint("dedicated", Some("gpu"), "NoExecute"),
                    taint("empty", None, "PreferNoSchedule"),
                ],
                false,
            ),
        ),
        (
            "nulls are absent",
            json!({"metadata": {"name": "n1", "labels": null}, "spec": {"taints": null},
                   "status": {"conditions": null}}),
            node("n1", &[], vec![], false),
        ),
        (
            "null sections",
            json!({"metadata": null, "spec": null, "status": null}),
            node("", &[], vec![], false),
        ),
    ];
    for (what, value, expected) in cases {
        assert_eq!(full_projection(&value), expected, "{what}: full Node");
        assert_eq!(summary_projection(&value), expected, "{what}: summary");
    }
}

#[test]
fn a_heartbeat_decodes_into_its_projection() {
    let summary: NodeSummary = serde_json::from_str(HEARTBEAT).expect("fixture decodes");
    let name = "ip-10-1-4-17.eu-west-1.compute.internal";
    // What the watch and the index read of the metadata, nothing else.
    let meta = summary.meta();
    assert_eq!(meta.name.as_deref(), Some(name));
    assert_eq!(meta.resource_version.as_deref(), Some("48213377"));
    assert_eq!(meta.uid, None);
    assert_eq!(meta.annotations, None);
    assert_eq!(meta.managed_fields, None);
    assert_eq!(summary.conditions.len(), 5);
    let projection = Node::from(summary);
    assert_eq!(projection.name, name);
    assert_eq!(projection.labels.len(), 13);
    assert_eq!(
        projection.labels.get(POOL).map(|v| v.as_str()),
        Some("hangzhou")
    );
    assert_eq!(
        projection.taints,
        [
            taint("node-role.kubernetes.io/edge", None, "NoSchedule"),
            taint("dedicated", Some("gpu"), "NoExecute"),
            taint("maintenance", None, "PreferNoSchedule"),
        ]
    );
    assert!(projection.ready);
    let value: Value = serde_json::from_str(HEARTBEAT).expect("fixture is JSON");
    assert_eq!(projection, full_projection(&value));
}

/// A summary is a Node to the API machinery: the watch lists and watches
/// `/api/v1/nodes`.
#[test]
fn the_summary_is_a_cluster_scoped_v1_node() {
    assert_eq!(NodeSummary::kind(&()), "Node");
    assert_eq!(NodeSummary::group(&()), "");
    assert_eq!(NodeSummary::version(&()), "v1");
    assert_eq!(NodeSummary::api_version(&()), "v1");
    assert_eq!(NodeSummary::url_path(&(), None), "/api/v1/nodes");
    assert_eq!(
        <NodeSummary as Resource>::url_path(&(), None),
        <core::Node as Resource>::url_path(&(), None)
    );
}

/// Odd objects: where the full Node decodes, the summary decodes into the
/// same projection; where it fails on a projected field, the summary fails
/// too. Only oddities in fields the summary skips decode now.
#[test]
fn odd_nodes_decode_or_fail_as_the_full_node() {
    let with = |spec: Value, status: Value| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
               "spec": spec, "status": status})
    };
    let cases = [
        (
            "condition without status",
            with(json!({}), json!({"conditions": [{"type": "Ready"}]})),
            true,
        ),
        (
            "condition without type",
            with(json!({}), json!({"conditions": [{"status": "True"}]})),
            true,
        ),
        (
            "condition with a null status",
            with(
                json!({}),
                json!({"conditions": [{"type": "Ready", "status": null}]}),
            ),
            true,
        ),
        (
            "taint without effect",
            with(json!({"taints": [{"key": "edge"}]}), json!({})),
            true,
        ),
        (
            "taint without key",
            with(json!({"taints": [{"effect": "NoSchedule"}]}), json!({})),
            true,
        ),
        (
            "unknown fields",
            with(
                json!({"future": {"a": [1, 2]}, "taints": [{"key": "k", "effect": "NoSchedule", "x": 1}]}),
                json!({"conditions": [{"type": "Ready", "status": "True", "severity": "low"}]}),
            ),
            true,
        ),
        (
            "taint with a bad timeAdded",
            with(
                json!({"taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "yesterday"}]}),
                json!({}),
            ),
            false,
        ),
        (
            "status that is not a string",
            with(
                json!({}),
                json!({"conditions": [{"type": "Ready", "status": true}]}),
            ),
            false,
        ),
        (
            "conditions that are no list",
            with(json!({}), json!({"conditions": {"Ready": "True"}})),
            false,
        ),
        (
            "a label value that is no string",
            json!({"metadata": {"name": "n1", "labels": {"zone": 1}}}),
            false,
        ),
        (
            "another kind",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n1"}}),
            false,
        ),
        (
            "another version",
            json!({"apiVersion": "v2", "kind": "Node", "metadata": {"name": "n1"}}),
            false,
        ),
        (
            "a null kind",
            json!({"kind": null, "metadata": {"name": "n1"}}),
            false,
        ),
    ];
    for (what, value, decodes) in cases {
        let full = serde_json::from_value::<core::Node>(value.clone());
        let summary = serde_json::from_value::<NodeSummary>(value.clone());
        assert_eq!(full.is_ok(), decodes, "{what}: full Node {full:?}");
        assert_eq!(summary.is_ok(), decodes, "{what}: summary {summary:?}");
        if let (Ok(full), Ok(summary)) = (full, summary) {
            assert_eq!(
                Node::from(NodeSummary::from(full)),
                Node::from(summary),
                "{what}"
            );
        }
    }
}

#[test]
fn oddities_in_skipped_fields_no_longer_stop_the_watch() {
    let value = json!({"metadata": {"name": "n1", "creationTimestamp": "not a time",
                                    "managedFields": "not a list"},
                       "status": {"images": 7, "conditions": [{"type": "Ready", "status": "True"}]}});
    assert!(serde_json::from_value::<core::Node>(value.clone()).is_err());
    assert_eq!(summary_projection(&value), node("n1", &[], vec![], true));
}

/// Full Nodes (the offline objects file) and summaries (the watchers) are
/// one kind in the index: either writes, and an equal projection through the
/// other is no change.
#[test]
fn full_nodes_and_summaries_write_the_same_nodes() {
    let index = Index::new(POOL);
    let value: Value = serde_json::from_str(HEARTBEAT).expect("fixture is JSON");
    let full: core::Node = serde_json::from_value(value.clone()).expect("Node decodes");
    let summary: NodeSummary = serde_json::from_value(value).expect("summary decodes");
    assert!(index.apply(full).is_some());
    assert_eq!(index.apply(summary.clone()), None);
    let key = ObjectKey::cluster("ip-10-1-4-17.eu-west-1.compute.internal");
    assert!(IndexResource::<core::Node>::delete(&index, &key).is_some());
    assert!(index.apply(summary).is_some());
    let view = index.placement();
    let written = view.node(&key.name).expect("written");
    assert_eq!(
        written.labels.get(POOL).map(|v| v.as_str()),
        Some("hangzhou")
    );
}
