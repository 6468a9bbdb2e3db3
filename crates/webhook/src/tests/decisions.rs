//! Pods decided over the index: patches, denials, warnings, pass-through.

use poolkeeper_bus::AdmissionResult::{Allowed, Denied, Patched};
use poolkeeper_bus::WebhookKind::{Mutate, Validate};
use serde_json::{Value, json};

use super::{POOL_LABEL, UID, admit, fixture, patch_of, pod, pod_review, review};

#[tokio::test]
async fn mutate_returns_a_correct_patch() {
    let f = fixture();
    let object = pod(
        None,
        json!({"app": "web"}),
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
        ]}}}),
    );
    let response = admit(
        &f.router,
        "/mutate-pods",
        &review("Pod", "CREATE", "shop-hangzhou", object.clone()),
    )
    .await;
    assert_eq!(response["uid"], UID);
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = patch_of(&response);
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!([
            {"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": ["hangzhou"]}]}]
            }}},
            {"op": "add", "path": "/spec/tolerations", "value": [
                {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}
            ]},
            {"op": "add", "path": "/metadata/annotations", "value": {
                "poolkeeper.io/placement": r#"{"pool":"hangzhou","binding":"namespace","mode":"enforce","constraints":"judge"}"#
            }}
        ])
    );
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch.0).unwrap();
    assert_eq!(
        patched["spec"]["affinity"]["podAntiAffinity"],
        object["spec"]["affinity"]["podAntiAffinity"]
    );

    // The patched Pod passes validation and needs no second patch.
    let again = admit(
        &f.router,
        "/mutate-pods",
        &review("Pod", "CREATE", "shop-hangzhou", patched.clone()),
    )
    .await;
    assert_eq!(again["allowed"], true);
    assert!(again.get("patch").is_none());
    assert!(again.get("patchType").is_none());
    let verdict = admit(
        &f.router,
        "/validate-pods",
        &review("Pod", "CREATE", "shop-hangzhou", patched),
    )
    .await;
    assert_eq!(verdict["allowed"], true, "{verdict}");

    f.assert_decided(&[
        (Mutate, Patched, "patched"),
        (Mutate, Allowed, "unchanged"),
        (Validate, Allowed, "in_pool"),
    ])
    .await;
}

#[tokio::test]
async fn validate_denies_with_a_message() {
    let f = fixture();
    let response = admit(
        &f.router,
        "/validate-pods",
        &pod_review("shop-beijing", json!({"nodeSelector": {"zone": "a"}})),
    )
    .await;
    assert_eq!(response["uid"], UID);
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["reason"], "Forbidden");
    assert_eq!(response["status"]["status"], "Failure");
    assert_eq!(
        response["status"]["message"],
        "pod is bound to node pool \"beijing\" but 2 nodes outside the pool match its nodeSelector: free-1, hz-1"
    );
    assert!(response.get("patch").is_none());

    let response = admit(
        &f.router,
        "/validate-pods",
        &pod_review("shop-hangzhou", json!({"nodeName": "hz-1"})),
    )
    .await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("pod must tolerate {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}")
    );
    f.assert_decided(&[
        (Validate, Denied, "outside_pool"),
        (Validate, Denied, "missing_edge_tolerations"),
    ])
    .await;
}

#[tokio::test]
async fn namespace_comes_from_the_request() {
    let f = fixture();
    // The object says another namespace (or none); the request decides.
    let object = pod(Some("shop-beijing"), json!({}), json!({"nodeName": "hz-1"}));
    let response = admit(
        &f.router,
        "/validate-pods",
        &review("Pod", "CREATE", "default", object),
    )
    .await;
    assert_eq!(response["allowed"], true, "default is unbound");
    // Without a request namespace the object's is used.
    let mut unnamespaced = review(
        "Pod",
        "CREATE",
        "",
        pod(Some("shop-beijing"), json!({}), json!({"nodeName": "hz-1"})),
    );
    unnamespaced["request"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let response = admit(&f.router, "/validate-pods", &unnamespaced).await;
    assert_eq!(response["allowed"], false);
}

#[tokio::test]
async fn warnings_reach_the_response() {
    let f = fixture();
    for path in ["/mutate-pods", "/validate-pods"] {
        let response = admit(&f.router, path, &pod_review("shop-gone", json!({}))).await;
        assert_eq!(response["allowed"], true);
        assert_eq!(
            response["warnings"],
            json!([
                "node pool \"gone\" (bound through namespace \"shop-gone\") does not exist; the pod is not restricted to a node pool"
            ])
        );
    }
    let response = admit(&f.router, "/mutate-pods", &pod_review("default", json!({}))).await;
    assert!(response.get("warnings").is_none());
}

#[tokio::test]
async fn other_kinds_and_operations_pass_unchanged() {
    let f = fixture();
    let deployment = review(
        "ConfigMap",
        "CREATE",
        "shop-beijing",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}}),
    );
    let mut binding = pod_review("shop-beijing", json!({"nodeName": "hz-1"}));
    binding["request"]["subResource"] = json!("binding");
    let update = review(
        "Pod",
        "UPDATE",
        "shop-beijing",
        pod(None, json!({}), json!({"nodeName": "hz-1"})),
    );
    let mut delete = review("Pod", "DELETE", "shop-beijing", Value::Null);
    delete["request"]["oldObject"] = pod(None, json!({}), json!({}));
    for review in [&deployment, &binding, &update, &delete] {
        for path in ["/mutate-pods", "/validate-pods"] {
            let response = admit(&f.router, path, review).await;
            assert_eq!(response["allowed"], true, "{review}");
            assert_eq!(response["uid"], UID);
            assert!(response.get("patch").is_none());
        }
    }
    let decided: Vec<_> = f
        .decided(8)
        .await
        .into_iter()
        .map(|(_, result, reason)| (result, reason))
        .collect();
    let expected = [
        "not_pod",
        "not_pod",
        "not_pod",
        "not_pod",
        "operation_ignored",
        "operation_ignored",
        "operation_ignored",
        "operation_ignored",
    ]
    .map(|reason| (Allowed, reason));
    assert_eq!(decided, expected);
}

/// A binding in warn mode: the denial goes out as a warning, the Pod is
/// allowed, and the event carries the mode.
#[tokio::test]
async fn warn_mode_allows_with_the_denial_as_a_warning() {
    use poolkeeper_bus::{Event, Mode};

    let f = fixture();
    super::set_policy(
        &f.index,
        "bindings:\n  - {namespace: shop-beijing, nodePool: beijing, mode: warn}\n",
    );
    let response = admit(
        &f.router,
        "/validate-pods",
        &pod_review("shop-beijing", json!({"nodeName": "hz-1"})),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("status").is_none(), "{response}");
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("poolkeeper would deny this pod (binding mode warn): "),
        "{warning}"
    );
    let event = f
        .recorder
        .wait_for(std::time::Duration::from_secs(10), |event| {
            matches!(event, Event::AdmissionDecided { .. })
        })
        .await;
    let Event::AdmissionDecided {
        result,
        mode,
        reason,
        ..
    } = event
    else {
        unreachable!()
    };
    assert_eq!(
        (result, mode, reason),
        (Allowed, Mode::Warn, "outside_pool")
    );
}
