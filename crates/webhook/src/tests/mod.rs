//! Handler-level tests: the router answering AdmissionReviews, without TLS,
//! observed through HTTP and the bus.

mod decisions;
mod malformed;
mod offline;
mod policy;
mod settings;
mod wire;
mod workloads;

use std::sync::Arc;

use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use json_patch::Patch;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use poolkeeper_api::NodePool;
use poolkeeper_bus::{AdmissionResult, Bus, Event, ObjectKey, WebhookKind};
use poolkeeper_config::Config;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::testing::BusRecorder;
use serde_json::{Value, json};

use crate::admission::AdmissionService;
use crate::settings::WebhookSettings;

const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";
const POLICY: &str = "
bindings:
  - {namespace: shop-hangzhou, nodePool: hangzhou}
  - {namespace: shop-beijing, nodePool: beijing}
  - {namespace: shop-gone, nodePool: gone}
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
";

/// A ready Node with `labels`.
fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn node_pool(name: &str, pool_type: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"type": pool_type}
    }))
    .unwrap()
}

/// The settings the tests run with: the defaults, with a body limit small
/// enough to test.
pub(crate) fn settings() -> WebhookSettings {
    WebhookSettings {
        max_body_bytes: 64 * 1024,
        ..WebhookSettings::from(&Config::default())
    }
}

/// The placement policy's holder the tests run with: the defaults.
pub(crate) fn policy() -> PolicyCache {
    PolicyCache::from(&Config::default().placement)
}

fn policy_key() -> ObjectKey {
    policy().source().config_map_key()
}

/// The placement ConfigMap holding `yaml`.
fn policy_config_map(yaml: &str) -> ConfigMap {
    let key = policy_key();
    let source = policy().source().clone();
    serde_json::from_value(json!({
        "metadata": {"namespace": key.namespace, "name": key.name},
        "data": {source.key: yaml}
    }))
    .unwrap()
}

fn set_policy(index: &Index, yaml: &str) {
    index.apply(policy_config_map(yaml));
}

pub(crate) fn cluster() -> Arc<Index> {
    let index = Index::new(POOL_LABEL);
    index.apply(node("hz-1", &[(POOL_LABEL, "hangzhou"), ("zone", "a")]));
    index.apply(node("hz-2", &[(POOL_LABEL, "hangzhou"), ("zone", "b")]));
    index.apply(node("bj-1", &[(POOL_LABEL, "beijing"), ("zone", "a")]));
    index.apply(node("free-1", &[("zone", "a")]));
    index.apply(node_pool("hangzhou", "Edge"));
    index.apply(node_pool("beijing", "Cloud"));
    set_policy(&index, POLICY);
    Arc::new(index)
}

/// The admission service over the test cluster, and what it publishes.
struct Fixture {
    router: AdmissionService,
    index: Arc<Index>,
    recorder: BusRecorder,
}

fn fixture() -> Fixture {
    fixture_with(settings())
}

fn fixture_with(settings: WebhookSettings) -> Fixture {
    let index = cluster();
    let bus = Bus::default();
    let recorder = BusRecorder::new(&bus);
    bus.start();
    Fixture {
        router: AdmissionService::new(&settings, Arc::clone(&index), policy(), bus),
        index,
        recorder,
    }
}

type Decided = (WebhookKind, AdmissionResult, &'static str);

impl Fixture {
    /// `AdmissionDecided` so far, without the duration, once at least
    /// `count` have arrived (the recorder follows the bus on its own task).
    async fn decided(&self, count: usize) -> Vec<Decided> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let decided: Vec<Decided> = self
                .recorder
                .events()
                .into_iter()
                .filter_map(|event| match event {
                    Event::AdmissionDecided {
                        webhook,
                        result,
                        reason,
                        ..
                    } => Some((webhook, result, reason)),
                    _ => None,
                })
                .collect();
            if decided.len() >= count {
                return decided;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{count} decisions expected, got {decided:?}"
            );
            tokio::task::yield_now().await;
        }
    }

    /// Exactly `expected` was published, in order.
    async fn assert_decided(&self, expected: &[Decided]) {
        assert_eq!(self.decided(expected.len()).await, expected);
    }
}

fn pod(namespace_in_object: Option<&str>, labels: Value, spec: Value) -> Value {
    let mut spec_full = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let Value::Object(extra) = spec {
        for (k, v) in extra {
            spec_full[k] = v;
        }
    }
    let mut metadata = json!({"generateName": "web-", "labels": labels});
    if let Some(ns) = namespace_in_object {
        metadata["namespace"] = json!(ns);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec_full})
}

pub(crate) fn review(kind: &str, operation: &str, namespace: &str, object: Value) -> Value {
    let (group, resource) = match kind {
        "Pod" => ("", "pods"),
        "ConfigMap" => ("", "configmaps"),
        "DaemonSet" => ("apps", "daemonsets"),
        "CronJob" => ("batch", "cronjobs"),
        _ => ("apps", "deployments"),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "requestKind": {"group": group, "version": "v1", "kind": kind},
            "requestResource": {"group": group, "version": "v1", "resource": resource},
            "name": "",
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

fn pod_review(namespace: &str, spec: Value) -> Value {
    review("Pod", "CREATE", namespace, pod(None, json!({}), spec))
}

/// `method path` with `body`, answered by `router`.
async fn send(
    router: &AdmissionService,
    method: Method,
    path: &str,
    body: impl Into<Bytes>,
) -> (StatusCode, Bytes) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap();
    let response = router.respond(request).await;
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, bytes)
}

async fn post(
    router: &AdmissionService,
    path: &str,
    body: impl Into<Bytes>,
) -> (StatusCode, Bytes) {
    send(router, Method::POST, path, body).await
}

/// POSTs `review` and returns the `response` object of the answer.
async fn admit(router: &AdmissionService, path: &str, review: &Value) -> Value {
    let (status, body) = post(router, path, serde_json::to_vec(review).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert!(answer.get("request").is_none());
    answer["response"].clone()
}

/// The JSON patch an admission response carries: base64 of RFC 6902 JSON.
fn patch_of(response: &Value) -> Patch {
    use base64::Engine as _;
    let encoded = response["patch"].as_str().expect("the patch is a string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}
