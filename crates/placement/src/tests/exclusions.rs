//! Namespaces that are never bound, and mirror Pods that are never denied.

use serde_json::json;

use super::{POOL, cluster, labelled_pod, pod_json, to_pod};
use crate::{PlacementPolicy, PolicySource, Reason, audit, mutate, validate};

#[test]
fn a_binding_of_an_excluded_namespace_makes_the_policy_invalid() {
    for namespace in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "poolkeeper-system",
    ] {
        let yaml = format!("bindings:\n  - {{namespace: {namespace}, nodePool: hangzhou}}\n");
        let error = PlacementPolicy::parse(&yaml).unwrap_err().to_string();
        assert!(
            error.contains(&format!(
                "bindings[0].namespace: \"{namespace}\" is excluded from placement"
            )),
            "{error}"
        );
    }
    // The configured list, plus the policy ConfigMap's own namespace.
    let mut config = poolkeeper_config::Config::default();
    config.placement.excluded_namespaces = vec!["ops".into()];
    config.placement.policy_config_map.namespace = "placement-system".into();
    let source = PolicySource::from(&config.placement);
    assert_eq!(
        source.excluded_namespaces.iter().collect::<Vec<_>>(),
        ["ops", "placement-system"]
    );
}

#[test]
fn a_labelled_pod_in_an_excluded_namespace_is_not_bound() {
    let index = cluster();
    let view = index.placement();
    let policy = super::policy();
    let pod = labelled_pod(json!({POOL: "hangzhou"}), json!({"nodeName": "bj-1"}));
    assert_eq!(
        validate(&pod, "kube-system", &view, &policy).reason,
        Reason::Unbound
    );
    assert_eq!(
        mutate(&pod, "kube-system", &view, &policy).reason,
        Reason::Unbound
    );
    assert_eq!(
        validate(&pod, "default", &view, &policy).reason,
        Reason::MissingEdgeTolerations,
        "the same Pod elsewhere is bound by its label"
    );
}

/// A mirror Pod's kubelet cannot act on a denial or a patch: both webhooks
/// leave it alone, and the audit still reports it.
#[test]
fn mirror_pods_are_never_denied_but_audited() {
    let index = cluster();
    let view = index.placement();
    let policy = super::policy();
    let mut json = pod_json(json!({}), json!({"nodeName": "bj-1"}));
    json["metadata"]["namespace"] = json!("shop-hangzhou");
    json["metadata"]["annotations"] =
        json!({"kubernetes.io/config.mirror": "d41d8cd9", "other": "x"});
    let mirror = to_pod(&json);
    assert!(mirror.is_mirror());
    let decision = validate(&mirror, "shop-hangzhou", &view, &policy);
    assert!(decision.allowed);
    assert_eq!(decision.reason, Reason::MirrorPod);
    let decision = mutate(&mirror, "shop-hangzhou", &view, &policy);
    assert_eq!((decision.reason, decision.patch), (Reason::MirrorPod, None));
    let audited = audit(&mirror, &view, &policy);
    assert!(!audited.allowed);
    assert_eq!(audited.reason, Reason::OutsidePool);
}
