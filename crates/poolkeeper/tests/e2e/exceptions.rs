//! PlacementExceptions end to end, through the API server and both
//! webhooks, on the cluster of `placement.rs` (`shop-cloud` bound to
//! `cloud`, `shop-edge` to `edge`, loose-1 in no pool): an exception lets
//! exactly the workload it selects out, only where the binding allows
//! exceptions; it stops applying at `expiresAt` without a restart; the
//! CRD's schema refuses one that allows nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use poolkeeper_api::PlacementException;
use poolkeeper_testenv::eventually;
use serde_json::{Value, json};

use crate::harness::{TIMEOUT, metric_sum};
use crate::objects::{labelled_pod, write_policy};
use crate::placement::{CLOUD_NAMESPACE, Cluster, EDGE_NAMESPACE, Webhooks, setup};

const OUTSIDE: &str = "loose-1";

fn exception(
    namespace: &str,
    name: &str,
    app: &str,
    allow: Value,
    expires_at: Option<&str>,
) -> PlacementException {
    let mut spec = json!({
        "selector": {"matchLabels": {"app": app}},
        "reason": format!("{app} measures the node outside the pool"),
        "allow": allow,
    });
    if let Some(at) = expires_at {
        spec["expiresAt"] = json!(at);
    }
    serde_json::from_value(json!({
        "apiVersion": "poolkeeper.io/v1alpha1",
        "kind": "PlacementException",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .unwrap()
}

/// A Pod labelled `app` that asks for the node outside every pool.
fn outside_pod(name: &str, app: &str) -> Pod {
    labelled_pod(
        name,
        json!({"app": app}),
        json!({"nodeSelector": {"kubernetes.io/hostname": OUTSIDE}}),
    )
}

fn deployment(name: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {CLOUD_NAMESPACE}}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n\
         \x20   metadata: {{labels: {{app: {name}}}}}\n\
         \x20   spec:\n      nodeSelector: {{kubernetes.io/hostname: {OUTSIDE}}}\n\
         \x20     containers: [{{name: app, image: registry.example/app:1}}]\n"
    )
}

impl Cluster {
    async fn create_exception(&self, exception: &PlacementException) -> Result<(), kube::Error> {
        let namespace = exception.metadata.namespace.as_deref().unwrap();
        Api::<PlacementException>::namespaced(self.client.clone(), namespace)
            .create(&PostParams::default(), exception)
            .await
            .map(drop)
    }

    /// Creates the Pod until the webhooks admit it (poolkeeper follows
    /// the policy and the exceptions through its watches).
    async fn admitted_once_seen(&self, namespace: &str, pod: &Pod) -> Pod {
        let api = self.pods(namespace);
        eventually("the exception in effect", TIMEOUT, || async {
            api.create(&PostParams::default(), pod).await.ok()
        })
        .await
        .unwrap()
    }
}

fn rfc3339(at: SystemTime) -> String {
    let seconds = at.duration_since(UNIX_EPOCH).unwrap().as_secs();
    k8s_openapi::jiff::Timestamp::from_second(i64::try_from(seconds).unwrap())
        .unwrap()
        .to_string()
}

/// The exception lets exactly the selected Deployment out, in the
/// namespace whose binding allows exceptions; its Pods carry the record
/// naming it, and every admission it changed is counted. The same
/// exception in a namespace whose binding does not allow exceptions is
/// ignored, and the denial says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exception_lets_exactly_the_selected_workload_out() {
    let cluster = setup(Webhooks::Both).await;
    write_policy(
        &cluster.client,
        &[
            (EDGE_NAMESPACE, "edge", "enforce"),
            (CLOUD_NAMESPACE, "cloud", "enforce, exceptions: allowed"),
        ],
    )
    .await;
    let allow = json!({"skipMutation": true, "skipValidation": true});
    cluster
        .create_exception(&exception(
            CLOUD_NAMESPACE,
            "probe",
            "probe",
            allow.clone(),
            None,
        ))
        .await
        .unwrap();
    cluster
        .create_exception(&exception(EDGE_NAMESPACE, "probe", "probe", allow, None))
        .await
        .unwrap();

    // A Pod first: once it is admitted, the webhooks have the exception.
    let pod = cluster
        .admitted_once_seen(CLOUD_NAMESPACE, &outside_pod("probe-pod", "probe"))
        .await;
    let record = pod
        .metadata
        .annotations
        .unwrap_or_default()
        .remove("poolkeeper.io/placement");
    assert_eq!(
        record.as_deref(),
        Some(
            r#"{"pool":"cloud","binding":"namespace","mode":"enforce","constraints":"judge","exceptions":"probe"}"#
        )
    );
    assert_eq!(
        pod.spec
            .unwrap()
            .node_selector
            .unwrap_or_default()
            .get("kubernetes.io/hostname")
            .map(String::as_str),
        Some(OUTSIDE),
        "left as written"
    );

    cluster
        .env
        .apply_yaml(&deployment("probe"), "the selected Deployment")
        .await
        .unwrap();
    let refused = cluster
        .env
        .apply_yaml(&deployment("web"), "another Deployment")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("node pool \"cloud\"") && refused.contains(OUTSIDE),
        "{refused}"
    );
    let pods = cluster.pods(CLOUD_NAMESPACE);
    let created = eventually("the probe Deployment's Pod", TIMEOUT, || async {
        let list = pods
            .list(&ListParams::default().labels("app=probe"))
            .await
            .ok()?;
        list.items
            .into_iter()
            .find(|p| p.metadata.name.as_deref() != Some("probe-pod"))
    })
    .await
    .unwrap();
    let record = created
        .metadata
        .annotations
        .unwrap_or_default()
        .remove("poolkeeper.io/placement")
        .unwrap_or_default();
    assert!(record.contains(r#""exceptions":"probe""#), "{record}");

    let denial = cluster
        .deny(EDGE_NAMESPACE, &outside_pod("probe-pod", "probe"))
        .await;
    assert!(
        denial.message.contains("(PlacementException \"probe\" selects this pod, but namespace \"shop-edge\"'s binding does not allow exceptions)"),
        "{}",
        denial.message
    );

    let metrics = cluster.running.metrics().await;
    let counted = |webhook: &str| {
        metric_sum(
            &metrics,
            &format!(
                "poolkeeper_placement_exceptions_applied_total{{webhook=\"{webhook}\",exception=\"{CLOUD_NAMESPACE}/probe\"}}"
            ),
        )
    };
    // The Pod, the Deployment and its Pod: each mutation and validation.
    assert!(
        counted("mutate") >= 2 && counted("validate") >= 3,
        "{metrics}"
    );
    assert!(
        !metrics.contains("exception=\"shop-edge/probe\""),
        "{metrics}"
    );
}

/// An exception past its `expiresAt` stops applying without a restart, and
/// the schema refuses an exception that allows nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exception_stops_at_its_expiry_and_the_schema_refuses_an_empty_one() {
    let cluster = setup(Webhooks::ValidatingOnly).await;
    write_policy(
        &cluster.client,
        &[(CLOUD_NAMESPACE, "cloud", "enforce, exceptions: allowed")],
    )
    .await;
    let empty = exception(CLOUD_NAMESPACE, "nothing", "probe", json!({}), None);
    let refused = cluster
        .create_exception(&empty)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("allow must skip the mutation, skip the validation or name pools"),
        "{refused}"
    );

    let expires = SystemTime::now() + Duration::from_secs(20);
    let short = exception(
        CLOUD_NAMESPACE,
        "short",
        "short",
        json!({"skipValidation": true}),
        Some(&rfc3339(expires)),
    );
    cluster.create_exception(&short).await.unwrap();
    cluster
        .admitted_once_seen(CLOUD_NAMESPACE, &outside_pod("short-1", "short"))
        .await;
    assert!(
        SystemTime::now() < expires,
        "admitted only after the exception expired: the test proves nothing"
    );

    tokio::time::sleep(
        expires
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            + Duration::from_secs(1),
    )
    .await;
    let denial = cluster
        .deny(CLOUD_NAMESPACE, &outside_pod("short-2", "short"))
        .await;
    assert!(denial.message.contains(OUTSIDE), "{}", denial.message);
}
