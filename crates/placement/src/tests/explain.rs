//! Explanations over the test cluster (see `cluster()`).

use serde_json::json;

use super::{POOL, cluster, expr, labelled_pod, pod, policy, required};
use crate::{BindingSource, Mode, PlacementPolicy, explain, mutate, validate};

#[test]
fn names_the_binding_the_node_sets_and_the_verdicts() {
    let index = cluster();
    let view = index.placement();
    let pod = pod(json!({
        "nodeSelector": {"zone": "a"},
        "affinity": required(json!([
            {"matchExpressions": [expr("disk", "In", &["ssd"])]},
            {"matchExpressions": [expr("zone", "Bogus", &["a"])]},
            {}
        ]))["affinity"].clone()
    }));
    let policy = policy();
    let explained = explain(&pod, "shop-hangzhou", &view, &policy);
    assert_eq!(explained.pod, "shop-hangzhou/p");
    let binding = explained.binding.as_ref().unwrap();
    assert_eq!(
        (binding.pool.as_str(), binding.source, binding.by.as_str()),
        ("hangzhou", BindingSource::Namespace, "shop-hangzhou")
    );
    assert_eq!(binding.mode, Mode::Enforce);
    assert!(binding.pool_exists);
    assert_eq!((binding.pool_type, binding.pool_nodes), (Some("Edge"), 3));
    assert_eq!(explained.nodes, 7);

    let sets: Vec<(&str, usize, Vec<&str>)> = explained
        .node_sets
        .iter()
        .map(|s| {
            (
                s.constraint.as_str(),
                s.count,
                s.names.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        sets[0],
        (
            "nodeSelector zone=a",
            5,
            vec!["bj-1", "bj-2", "free-1", "hz-1", "hz-2"]
        )
    );
    assert_eq!(
        sets[1],
        (
            "required node affinity term 0: disk In (ssd)",
            3,
            vec!["bj-1", "hz-1", "hz-3"]
        )
    );
    assert_eq!(sets[2].1, 0);
    assert!(explained.node_sets[1].problems.is_empty());
    assert!(explained.node_sets[2].problems[0].contains("Unsupported value: \"Bogus\""));
    assert_eq!(
        explained.node_sets[3].constraint,
        "required node affinity term 2: (empty)"
    );
    assert_eq!(explained.node_sets[3].problems.len(), 1);

    assert_eq!(explained.intersection.names, ["bj-1", "hz-1"]);
    let outside = explained.outside_pool.as_ref().unwrap();
    assert_eq!(
        (outside.count, outside.names.clone()),
        (1, vec!["bj-1".to_owned()])
    );
    assert_eq!(explained.missing_tolerations.len(), 2);
    assert_eq!(
        explained.validate,
        validate(&pod, "shop-hangzhou", &view, &policy).into()
    );
    assert_eq!(
        explained.mutate,
        mutate(&pod, "shop-hangzhou", &view, &policy).into()
    );
    assert_eq!(explained.validate.reason, "missing_edge_tolerations");
}

#[test]
fn unbound_labelled_unconstrained_and_missing_pools() {
    let index = cluster();
    let view = index.placement();
    let policy = PlacementPolicy::parse_with_default_mode(
        "bindings: [{namespace: shop-gone, nodePool: gone, mode: warn}]",
        Mode::Dryrun,
    )
    .unwrap();

    let unbound = explain(&pod(json!({})), "default", &view, &policy);
    assert_eq!(unbound.binding, None);
    assert_eq!(unbound.outside_pool, None);
    assert!(unbound.node_sets.is_empty());
    assert_eq!(unbound.intersection.count, 7);
    assert_eq!(unbound.validate.reason, "unbound");

    let labelled = labelled_pod(json!({(POOL): "beijing"}), json!({"nodeName": "bj-2"}));
    let explained = explain(&labelled, "default", &view, &policy);
    let binding = explained.binding.as_ref().unwrap();
    assert_eq!(binding.source, BindingSource::PodLabel);
    assert_eq!(binding.by, format!("{POOL}=beijing"));
    assert_eq!(
        binding.mode,
        Mode::Dryrun,
        "no namespace binding: the default mode"
    );
    assert_eq!(explained.node_sets[0].constraint, "nodeName \"bj-2\"");
    assert_eq!(explained.outside_pool.as_ref().unwrap().count, 0);
    assert_eq!(explained.validate.reason, "in_pool");

    let missing = explain(&pod(json!({})), "shop-gone", &view, &policy);
    let binding = missing.binding.as_ref().unwrap();
    assert!(!binding.pool_exists);
    assert_eq!(binding.mode, Mode::Warn);
    assert_eq!(missing.outside_pool, None);
    assert_eq!(missing.validate.reason, "pool_missing");
    assert_eq!(missing.validate.warnings.len(), 1);

    let json = serde_json::to_value(&explained).unwrap();
    assert_eq!(json["binding"]["source"], "podLabel");
    assert_eq!(json["validate"]["mode"], "dryrun");
    assert_eq!(json["nodeSets"][0]["count"], 1);
}

#[test]
fn pods_from_manifests() {
    let pod = crate::PodPlacement::from_yaml(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  nodeSelector: {zone: a}\n  containers: [{name: c, image: nginx}]\n",
    )
    .unwrap();
    assert_eq!((pod.namespace.as_str(), pod.name.as_str()), ("shop", "web"));
    for (yaml, message) in [
        (
            "kind: Node\napiVersion: v1\n",
            "expected one Pod (kind: Pod, apiVersion: v1) or workload (Deployment, ReplicaSet, \
             StatefulSet, DaemonSet, Job, CronJob, ReplicationController), found kind \"Node\", \
             apiVersion \"v1\"",
        ),
        ("", "found 0 documents"),
        (
            "kind: Pod\napiVersion: v1\n---\nkind: Pod\napiVersion: v1\n",
            "found 2 documents",
        ),
        (
            "kind: Pod\napiVersion: v1\nspec: {nodeName: [a]}\n",
            "pod manifest: invalid Pod",
        ),
        ("kind: [\n", "pod manifest: "),
    ] {
        let error = crate::PodPlacement::from_yaml(yaml)
            .unwrap_err()
            .to_string();
        assert!(error.contains(message), "{yaml:?}: {error}");
    }
}
