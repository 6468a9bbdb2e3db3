//! Workloads through the webhook: templates judged on CREATE and on UPDATEs
//! that change them, DaemonSet templates patched, malformed ones refused.

use http::StatusCode;
use serde_json::{Value, json};

use super::{admit, fixture, patch_of, post, review};

fn deployment(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": spec,
    }}})
}

#[tokio::test]
async fn a_deployment_reaching_outside_its_pool_is_refused_with_the_reason() {
    let f = fixture();
    let outside = deployment(
        json!({"containers": [{"name": "c", "image": "i"}], "nodeSelector": {"zone": "a"}}),
    );
    let response = admit(
        &f.router,
        "/validate-pods",
        &review("Deployment", "CREATE", "shop-beijing", outside.clone()),
    )
    .await;
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("the pod template of Deployment: pod is bound to node pool \"beijing\""),
        "{message}"
    );

    let inside = deployment(json!({"containers": [{"name": "c", "image": "i"}]}));
    let response = admit(
        &f.router,
        "/validate-pods",
        &review("Deployment", "CREATE", "shop-beijing", inside.clone()),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");
    // Not patched: its Pods are placed when they are created.
    let response = admit(
        &f.router,
        "/mutate-pods",
        &review("Deployment", "CREATE", "shop-beijing", inside.clone()),
    )
    .await;
    assert!(response.get("patch").is_none(), "{response}");

    // An UPDATE that moves the template out of the pool is refused; one that
    // leaves the template alone (a controller scaling it) is not judged again.
    let mut update = review("Deployment", "UPDATE", "shop-beijing", outside.clone());
    update["request"]["oldObject"] = inside.clone();
    assert_eq!(
        admit(&f.router, "/validate-pods", &update).await["allowed"],
        false
    );
    let mut scaled = outside.clone();
    scaled["spec"]["replicas"] = json!(5);
    let mut update = review("Deployment", "UPDATE", "shop-beijing", scaled);
    update["request"]["oldObject"] = outside;
    assert_eq!(
        admit(&f.router, "/validate-pods", &update).await["allowed"],
        true
    );
}

#[tokio::test]
async fn a_daemonset_template_is_narrowed_and_a_cronjob_template_judged() {
    let f = fixture();
    let daemonset = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
    "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
        "metadata": {"labels": {"app": "agent"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }}});
    let response = admit(
        &f.router,
        "/mutate-pods",
        &review("DaemonSet", "CREATE", "shop-hangzhou", daemonset.clone()),
    )
    .await;
    let mut patched = daemonset;
    json_patch::patch(&mut patched, &patch_of(&response).0).unwrap();
    let template = &patched["spec"]["template"];
    assert_eq!(
        template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        json!(["hangzhou"])
    );
    assert_eq!(
        template["spec"]["tolerations"][0]["key"],
        "node-role.kubernetes.io/edge"
    );
    assert!(template["metadata"]["annotations"]["poolkeeper.io/placement"].is_string());
    let response = admit(
        &f.router,
        "/validate-pods",
        &review("DaemonSet", "CREATE", "shop-hangzhou", patched),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");

    let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
    "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": {
        "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "bj-1", "restartPolicy": "Never"},
    }}}}});
    let response = admit(
        &f.router,
        "/validate-pods",
        &review("CronJob", "CREATE", "shop-hangzhou", cronjob),
    )
    .await;
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the pod template of CronJob: ")
    );
}

#[tokio::test]
async fn a_malformed_template_is_a_bad_request() {
    let f = fixture();
    let broken = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"nodeSelector": "not a map"}}}});
    let body = serde_json::to_vec(&review("Deployment", "CREATE", "shop-beijing", broken)).unwrap();
    let (status, text) = post(&f.router, "/validate-pods", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        String::from_utf8_lossy(&text).contains("not a valid workload"),
        "{text:?}"
    );
}
