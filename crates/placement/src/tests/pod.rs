//! The Pod projection, read from JSON and built from a `k8s_openapi` Pod.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::PodPlacement;

fn full_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "shop", "uid": "u-1", "generateName": "web-",
            "labels": {"app": "web"}, "annotations": {"a": "b"},
            "managedFields": [{"manager": "kubectl", "operation": "Update"}]
        },
        "spec": {
            "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}],
            "nodeName": "n1",
            "nodeSelector": {"zone": "a"},
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
                ]},
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "k", "operator": "Exists"}]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [{"key": "p", "operator": "Exists"}]}}
                    ]
                }
            },
            "tolerations": [{"key": "t", "operator": "Exists"}]
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1"}
    })
}

#[test]
fn reads_what_placement_needs_and_nothing_else() {
    let pod: PodPlacement = serde_json::from_value(full_pod()).unwrap();
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
        ("shop", "web-0", "u-1")
    );
    assert_eq!(pod.generate_name, "web-");
    assert_eq!(pod.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(pod.node_name(), Some("n1"));
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_selector.as_ref().unwrap()["zone"], "a");
    let required = pod.required_node_affinity().unwrap();
    assert_eq!(required.node_selector_terms.len(), 1);
    assert_eq!(pod.tolerations().len(), 1);
    assert_eq!(pod.display_name("shop"), "shop/web-0");

    let k8s: Pod = serde_json::from_value(full_pod()).unwrap();
    assert_eq!(PodPlacement::from(&k8s), pod);
    assert_eq!(PodPlacement::from(k8s), pod);
}

#[test]
fn absent_and_empty_fields() {
    let bare: PodPlacement = serde_json::from_value(json!({})).unwrap();
    assert_eq!(bare, PodPlacement::default());
    let nulls: PodPlacement =
        serde_json::from_value(json!({"metadata": null, "spec": null})).unwrap();
    assert_eq!(nulls, PodPlacement::default());

    let empty: PodPlacement = serde_json::from_value(json!({
        "metadata": {"generateName": "job-"},
        "spec": {"nodeName": "", "affinity": {"podAffinity": {}}, "tolerations": []}
    }))
    .unwrap();
    assert_eq!(empty.node_name(), None, "an empty nodeName is none");
    let spec = empty.spec.as_ref().unwrap();
    assert!(
        spec.affinity.as_ref().unwrap().node_affinity.is_none(),
        "affinity present, nodeAffinity absent: the patch path depends on it"
    );
    assert_eq!(spec.tolerations.as_deref(), Some(&[][..]));
    assert_eq!(empty.display_name("ns"), "ns/job-*");
    assert_eq!(empty.display_name(""), "job-*");
}

#[test]
fn wrong_types_fail_only_where_read() {
    let unread = json!({"spec": {"containers": "not a list", "nodeName": "n1"}, "status": 5});
    let pod: PodPlacement = serde_json::from_value(unread).unwrap();
    assert_eq!(pod.node_name(), Some("n1"));
    for read in [
        json!({"spec": {"nodeName": 5}}),
        json!({"spec": {"nodeSelector": ["a"]}}),
        json!({"metadata": {"labels": {"a": 1}}}),
        json!({"spec": {"tolerations": {"key": "a"}}}),
        json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}}}),
    ] {
        assert!(
            serde_json::from_value::<PodPlacement>(read.clone()).is_err(),
            "{read}"
        );
    }
}
