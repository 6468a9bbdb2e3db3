//! The placement policy read from the index: a broken one fails closed for
//! validation, and every ConfigMap change is seen by the next request.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use poolkeeper_bus::AdmissionResult::{Allowed, Denied};
use poolkeeper_bus::WebhookKind::{Mutate, Validate};
use poolkeeper_index::IndexResource;
use serde_json::json;

use super::{
    POLICY, admit, cluster, fixture, pod_review, policy, policy_config_map, policy_key, set_policy,
};
use poolkeeper_placement::PolicyCache;

#[tokio::test]
async fn invalid_policy_fails_closed_for_validation() {
    let f = fixture();
    set_policy(
        &f.index,
        "bindings:\n  - {namespace: shop-beijing, pool: beijing}\n",
    );
    let validate = admit(
        &f.router,
        "/validate-pods",
        &pod_review("default", json!({})),
    )
    .await;
    assert_eq!(validate["allowed"], false);
    assert_eq!(validate["status"]["code"], 500);
    assert_eq!(validate["status"]["reason"], "InternalError");
    let message = validate["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "pods cannot be admitted while the placement policy is invalid: \
             ConfigMap poolkeeper-system/poolkeeper-placement key placement.yaml: unknown field `pool`"
        ),
        "{message}"
    );
    let mutate = admit(
        &f.router,
        "/mutate-pods",
        &pod_review("shop-beijing", json!({})),
    )
    .await;
    assert_eq!(mutate["allowed"], true);
    assert!(mutate.get("patch").is_none());
    assert!(
        mutate["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("pod not mutated: the placement policy is invalid")
    );
    f.assert_decided(&[
        (Validate, Denied, "policy_invalid"),
        (Mutate, Allowed, "policy_invalid"),
    ])
    .await;
}

#[tokio::test]
async fn every_configmap_change_reaches_the_next_request() {
    let f = fixture();
    set_policy(&f.index, "nonsense: true");
    let validate = admit(
        &f.router,
        "/validate-pods",
        &pod_review("default", json!({})),
    )
    .await;
    assert_eq!(validate["allowed"], false);

    // Fixing the ConfigMap takes effect on the next request.
    set_policy(&f.index, POLICY);
    let validate = admit(
        &f.router,
        "/validate-pods",
        &pod_review("default", json!({})),
    )
    .await;
    assert_eq!(validate["allowed"], true);
    let mutate = admit(
        &f.router,
        "/mutate-pods",
        &pod_review("shop-beijing", json!({})),
    )
    .await;
    assert_eq!(mutate["patchType"], "JSONPatch");

    // A deleted ConfigMap is the empty policy: nothing is bound.
    IndexResource::<ConfigMap>::delete(&*f.index, &policy_key());
    let validate = admit(
        &f.router,
        "/validate-pods",
        &pod_review("shop-beijing", json!({"nodeName": "hz-1"})),
    )
    .await;
    assert_eq!(validate["allowed"], true);

    // Created again: bound again.
    f.index.apply(policy_config_map(POLICY));
    let validate = admit(
        &f.router,
        "/validate-pods",
        &pod_review("shop-beijing", json!({"nodeName": "hz-1"})),
    )
    .await;
    assert_eq!(validate["allowed"], false);
}

#[test]
fn the_policy_is_parsed_once_per_configmap_generation() {
    let index = cluster();
    let cache = PolicyCache::new(policy().source().clone());
    let first = cache.get(&index.placement());
    assert!(first.is_ok());
    assert!(Arc::ptr_eq(&first, &cache.get(&index.placement())));

    // An unrelated ConfigMap changes the generation: parsed again, same policy.
    index.apply(
        serde_json::from_value::<ConfigMap>(json!({
            "metadata": {"namespace": "poolkeeper-system", "name": "other"},
            "data": {"x": "y"}
        }))
        .unwrap(),
    );
    let second = cache.get(&index.placement());
    assert!(!Arc::ptr_eq(&first, &second));
    assert_eq!(first.as_ref().as_ref().ok(), second.as_ref().as_ref().ok());

    set_policy(&index, "nonsense: true");
    assert!(cache.get(&index.placement()).is_err());
}
