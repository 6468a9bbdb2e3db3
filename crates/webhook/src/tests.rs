//! Handler-level tests: the router answering AdmissionReviews, without TLS.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use json_patch::Patch;
use poolkeeper_bus::{Bus, Delivery, Event, Subscription, WebhookKind};
use poolkeeper_index::{Index, Node, NodePool, ObjectKey, PoolType};
use poolkeeper_placement::{PlacementError, PlacementPolicy, PlacementSettings};
use poolkeeper_supervisor::Health;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::metrics::RequestResult;
use crate::{
    NOT_READY_MESSAGE, WebhookError, WebhookHandle, WebhookServer, WebhookSettings, review_response,
};

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

fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        name: name.to_owned(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        taints: Vec::new(),
        ready: true,
    }
}

fn pool(name: &str, pool_type: PoolType) -> NodePool {
    NodePool {
        name: name.to_owned(),
        pool_type,
        labels: BTreeMap::new(),
        taints: Vec::new(),
    }
}

fn policy_key() -> ObjectKey {
    PlacementSettings::default().policy.config_map_key()
}

fn set_policy(index: &Index, yaml: &str) {
    index.upsert_config_map(
        policy_key(),
        [("placement.yaml".to_owned(), yaml.to_owned())].into(),
    );
}

fn cluster() -> Arc<Index> {
    let index = Index::new(POOL_LABEL);
    index.upsert_node(node("hz-1", &[(POOL_LABEL, "hangzhou"), ("zone", "a")]));
    index.upsert_node(node("hz-2", &[(POOL_LABEL, "hangzhou"), ("zone", "b")]));
    index.upsert_node(node("bj-1", &[(POOL_LABEL, "beijing"), ("zone", "a")]));
    index.upsert_node(node("free-1", &[("zone", "a")]));
    index.upsert_node_pool(pool("hangzhou", PoolType::Edge));
    index.upsert_node_pool(pool("beijing", PoolType::Cloud));
    set_policy(&index, POLICY);
    Arc::new(index)
}

struct Fixture {
    router: Router,
    handle: WebhookHandle,
    bus: Bus,
    index: Arc<Index>,
    events: Subscription,
    metrics: crate::metrics::Metrics,
    _stop: tokio_util::sync::DropGuard,
}

fn settings() -> WebhookSettings {
    WebhookSettings {
        max_body_bytes: 64 * 1024,
        ..WebhookSettings::default()
    }
}

/// A router over the test cluster; `synchronized` publishes
/// `IndexSynchronized` and waits for the webhook to see it.
async fn fixture(synchronized: bool) -> Fixture {
    let index = cluster();
    let bus = Bus::default();
    let health = Health::default();
    let gate = health.readiness_gate("webhook", "starting");
    let server = WebhookServer::new(settings(), Arc::clone(&index), &bus, gate).unwrap();
    let events = bus.subscribe("test");
    let metrics = server.metrics();
    let (router, handle, stop) = server.start_without_tls();
    bus.start();
    if synchronized {
        bus.publish(Event::IndexSynchronized);
        handle.wait_index_synchronized().await;
    }
    Fixture {
        router,
        handle,
        bus,
        index,
        events,
        metrics,
        _stop: stop.drop_guard(),
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

fn review(kind: &str, operation: &str, namespace: &str, object: Value) -> Value {
    let resource = if kind == "Pod" { "pods" } else { "deployments" };
    let group = if kind == "Pod" { "" } else { "apps" };
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

async fn post(router: &Router, path: &str, body: impl Into<Body>) -> (StatusCode, Bytes) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, bytes)
}

/// POSTs `review` and returns the `response` object of the answer.
async fn admit(router: &Router, path: &str, review: &Value) -> Value {
    let (status, body) = post(router, path, serde_json::to_vec(review).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert!(answer.get("request").is_none());
    answer["response"].clone()
}

/// The JSON patch carried by an admission response (bytes of RFC 6902 JSON).
fn patch_of(response: &Value) -> Patch {
    let bytes: Vec<u8> = serde_json::from_value(response["patch"].clone()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn drain_decisions(events: &mut Subscription) -> Vec<(WebhookKind, bool, bool, String)> {
    let mut found = Vec::new();
    while let Some(delivery) = events.try_recv() {
        if let Delivery::Event(envelope) = delivery
            && let Event::AdmissionDecided {
                webhook,
                allowed,
                patched,
                reason,
            } = &envelope.event
        {
            found.push((*webhook, *allowed, *patched, reason.clone()));
        }
    }
    found
}

#[tokio::test]
async fn not_ready_until_index_synchronized() {
    let mut f = fixture(false).await;
    for path in ["/mutate-pods", "/validate-pods"] {
        let response = admit(&f.router, path, &pod_review("shop-beijing", json!({}))).await;
        assert_eq!(response["uid"], UID);
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 503);
        assert_eq!(response["status"]["message"], NOT_READY_MESSAGE);
        assert!(response.get("patch").is_none());
    }
    // Even non-Pods wait: nothing is decided on a partial index.
    let deployment = review(
        "Deployment",
        "CREATE",
        "shop-beijing",
        json!({"metadata": {"name": "d"}}),
    );
    assert_eq!(
        admit(&f.router, "/validate-pods", &deployment).await["allowed"],
        false
    );
    // Malformed requests are still malformed.
    assert_eq!(
        post(&f.router, "/validate-pods", "{").await.0,
        StatusCode::BAD_REQUEST
    );

    assert_eq!(
        drain_decisions(&mut f.events),
        [
            (WebhookKind::Mutate, false, false, "not_ready".to_owned()),
            (WebhookKind::Validate, false, false, "not_ready".to_owned()),
            (WebhookKind::Validate, false, false, "not_ready".to_owned()),
            (
                WebhookKind::Validate,
                false,
                false,
                "malformed_json".to_owned()
            ),
        ]
    );

    f.bus.publish(Event::IndexSynchronized);
    f.handle.wait_index_synchronized().await;
    let response = admit(
        &f.router,
        "/mutate-pods",
        &pod_review("shop-beijing", json!({})),
    )
    .await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
}

#[tokio::test]
async fn mutate_returns_a_correct_patch() {
    let mut f = fixture(true).await;
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
            ]}
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
    let verdict = admit(
        &f.router,
        "/validate-pods",
        &review("Pod", "CREATE", "shop-hangzhou", patched),
    )
    .await;
    assert_eq!(verdict["allowed"], true, "{verdict}");

    assert_eq!(
        drain_decisions(&mut f.events),
        [
            (WebhookKind::Mutate, true, true, "patched".to_owned()),
            (WebhookKind::Mutate, true, false, "unchanged".to_owned()),
            (WebhookKind::Validate, true, false, "in_pool".to_owned()),
        ]
    );
    assert_eq!(
        f.metrics.requests_total("mutate", RequestResult::Patched),
        1
    );
    assert_eq!(
        f.metrics.requests_total("mutate", RequestResult::Allowed),
        1
    );
    assert_eq!(
        f.metrics.requests_total("validate", RequestResult::Allowed),
        1
    );
}

#[tokio::test]
async fn validate_denies_with_a_message() {
    let mut f = fixture(true).await;
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
    assert_eq!(
        drain_decisions(&mut f.events),
        [
            (
                WebhookKind::Validate,
                false,
                false,
                "outside_pool".to_owned()
            ),
            (
                WebhookKind::Validate,
                false,
                false,
                "missing_edge_tolerations".to_owned()
            ),
        ]
    );
    assert_eq!(
        f.metrics.requests_total("validate", RequestResult::Denied),
        2
    );
}

#[tokio::test]
async fn namespace_comes_from_the_request() {
    let f = fixture(true).await;
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
    let f = fixture(true).await;
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
    let mut f = fixture(true).await;
    let deployment = review(
        "Deployment",
        "CREATE",
        "shop-beijing",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
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
    let reasons: Vec<String> = drain_decisions(&mut f.events)
        .into_iter()
        .map(|d| d.3)
        .collect();
    assert_eq!(
        reasons,
        [
            "not_pod",
            "not_pod",
            "not_pod",
            "not_pod",
            "operation_ignored",
            "operation_ignored",
            "operation_ignored",
            "operation_ignored"
        ]
    );
}

#[tokio::test]
async fn malformed_requests_get_400() {
    let mut f = fixture(true).await;
    let valid = pod_review("shop-beijing", json!({}));
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty body", Vec::new(), "request body is not valid JSON"),
        (
            "garbage",
            b"\x00\xff garbage \x13".to_vec(),
            "request body is not valid JSON",
        ),
        (
            "not an object",
            b"[1, 2, 3]".to_vec(),
            "expected apiVersion admission.k8s.io/v1",
        ),
        (
            "just a string",
            b"\"AdmissionReview\"".to_vec(),
            "expected apiVersion",
        ),
        (
            "deeply nested",
            [b"[".repeat(20_000), b"]".repeat(20_000)].concat(),
            "request body is not valid JSON",
        ),
    ];
    let mut wrong_version = valid.clone();
    wrong_version["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut wrong_kind = valid.clone();
    wrong_kind["kind"] = json!("TokenReview");
    let mut no_request = valid.clone();
    no_request.as_object_mut().unwrap().remove("request");
    let mut null_request = valid.clone();
    null_request["request"] = Value::Null;
    let mut no_object = valid.clone();
    no_object["request"]
        .as_object_mut()
        .unwrap()
        .remove("object");
    let mut null_object = valid.clone();
    null_object["request"]["object"] = Value::Null;
    let mut bad_pod = valid.clone();
    bad_pod["request"]["object"]["spec"]["containers"] = json!("not a list");
    let mut no_uid = valid.clone();
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    let mut bad_operation = valid.clone();
    bad_operation["request"]["operation"] = json!("EXPLODE");
    let owned = [
        (
            "wrong apiVersion",
            wrong_version,
            "got apiVersion \"admission.k8s.io/v1beta1\"",
        ),
        ("wrong kind", wrong_kind, "kind \"TokenReview\""),
        ("no request", no_request, "AdmissionReview has no request"),
        (
            "null request",
            null_request,
            "AdmissionReview has no request",
        ),
        (
            "no object",
            no_object,
            "AdmissionReview request for a Pod CREATE has no object",
        ),
        ("null object", null_object, "has no object"),
        (
            "object not a pod",
            bad_pod,
            "request.object is not a valid Pod",
        ),
        (
            "no uid",
            no_uid,
            "malformed AdmissionReview: missing field `uid`",
        ),
        (
            "unknown operation",
            bad_operation,
            "malformed AdmissionReview",
        ),
    ];
    let owned: Vec<(&str, Vec<u8>, &str)> = owned
        .into_iter()
        .map(|(name, value, expected)| (name, serde_json::to_vec(&value).unwrap(), expected))
        .collect();
    cases.extend(owned);
    let full = serde_json::to_vec(&valid).unwrap();
    cases.push((
        "truncated",
        full[..full.len() / 2].to_vec(),
        "request body is not valid JSON",
    ));

    let count = cases.len();
    for (name, body, expected) in cases {
        for path in ["/mutate-pods", "/validate-pods"] {
            let (status, text) = post(&f.router, path, body.clone()).await;
            let text = String::from_utf8_lossy(&text);
            assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {text}");
            assert!(
                text.contains(expected),
                "{name}: {text:?} lacks {expected:?}"
            );
        }
    }
    let errors = drain_decisions(&mut f.events);
    assert_eq!(errors.len(), count * 2);
    assert!(
        errors
            .iter()
            .all(|(_, allowed, patched, _)| !allowed && !patched)
    );
    assert_eq!(
        f.metrics.requests_total("validate", RequestResult::Error),
        count as u64
    );
}

#[tokio::test]
async fn every_truncation_is_answered() {
    let f = fixture(true).await;
    let full = serde_json::to_vec(&pod_review(
        "shop-hangzhou",
        json!({"nodeSelector": {"zone": "a"}}),
    ))
    .unwrap();
    for end in (0..full.len()).step_by(7) {
        let (status, _) = post(&f.router, "/validate-pods", full[..end].to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "prefix of {end} bytes");
    }
    let (status, _) = post(&f.router, "/validate-pods", full).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn scrambled_bodies_never_panic() {
    let f = fixture(true).await;
    let full = serde_json::to_vec(&pod_review("shop-hangzhou", json!({}))).unwrap();
    // A deterministic xorshift walk that overwrites single bytes.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut body = full.clone();
        let at = (state % body.len() as u64) as usize;
        body[at] = (state >> 32) as u8;
        let (status, _) = post(&f.router, "/validate-pods", body).await;
        assert!(
            status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
            "unexpected {status}"
        );
    }
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let mut f = fixture(true).await;
    let mut review = pod_review("shop-beijing", json!({}));
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(100 * 1024)});
    let (status, _) = post(
        &f.router,
        "/validate-pods",
        serde_json::to_vec(&review).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // Just under the limit is fine.
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(60 * 1024)});
    let (status, _) = post(
        &f.router,
        "/validate-pods",
        serde_json::to_vec(&review).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        drain_decisions(&mut f.events).first().map(|d| d.3.clone()),
        Some("unreadable_body".to_owned())
    );
    assert_eq!(
        f.metrics.requests_total("validate", RequestResult::Error),
        1
    );
}

#[tokio::test]
async fn wrong_method_and_path() {
    let f = fixture(true).await;
    let request = Request::get("/validate-pods").body(Body::empty()).unwrap();
    let response = f.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = post(&f.router, "/mutate", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn invalid_policy_fails_closed_for_validation() {
    let f = fixture(true).await;
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
    f.index.remove_config_map(&policy_key());
    let validate = admit(
        &f.router,
        "/validate-pods",
        &pod_review("shop-beijing", json!({"nodeName": "hz-1"})),
    )
    .await;
    assert_eq!(validate["allowed"], true);
}

/// Yields until the encoded registry contains `needle` (the tracker task
/// runs on the same test runtime).
async fn wait_for_metric(registry: &prometheus_client::registry::Registry, needle: &str) {
    let mut text = String::new();
    for _ in 0..1000 {
        text.clear();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        if text.contains(needle) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{needle:?} never appeared in\n{text}");
}

#[tokio::test]
async fn policy_changes_are_picked_up_from_the_bus() {
    let f = fixture(true).await;
    let mut registry = prometheus_client::registry::Registry::default();
    f.metrics.register(&mut registry);
    // Parsed when the index synchronized.
    wait_for_metric(&registry, "poolkeeper_placement_policy_valid 1").await;
    // Parsed again as soon as the ConfigMap changes, before any request.
    set_policy(&f.index, "nonsense: true");
    f.bus.publish(Event::ResourceChanged {
        kind: poolkeeper_bus::ResourceKind::ConfigMap,
        key: policy_key(),
        change: poolkeeper_bus::Change::Updated,
        initial: false,
    });
    wait_for_metric(&registry, "poolkeeper_placement_policy_valid 0").await;
}

#[tokio::test]
async fn metrics_are_exposed() {
    let f = fixture(true).await;
    admit(
        &f.router,
        "/validate-pods",
        &pod_review("default", json!({})),
    )
    .await;
    let mut registry = prometheus_client::registry::Registry::default();
    f.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            "poolkeeper_admission_requests_total{webhook=\"validate\",result=\"allowed\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "poolkeeper_admission_duration_seconds_bucket{le=\"0.0001\",webhook=\"validate\"}"
        ),
        "{text}"
    );
    assert!(
        text.contains("poolkeeper_admission_duration_seconds_count{webhook=\"validate\"} 1"),
        "{text}"
    );
}

#[test]
fn invalid_settings_are_refused() {
    let bus = Bus::default();
    let health = Health::default();
    let index = Arc::new(Index::new(POOL_LABEL));
    let cases = [
        WebhookSettings {
            mutate_path: "mutate".into(),
            ..WebhookSettings::default()
        },
        WebhookSettings {
            validate_path: "/mutate-pods".into(),
            ..WebhookSettings::default()
        },
        WebhookSettings {
            validate_path: "/validate/{pod}".into(),
            ..WebhookSettings::default()
        },
        WebhookSettings {
            mutate_path: "/mutate/:pod".into(),
            ..WebhookSettings::default()
        },
        WebhookSettings {
            mutate_path: "/mutate pods".into(),
            ..WebhookSettings::default()
        },
        WebhookSettings {
            max_body_bytes: 0,
            ..WebhookSettings::default()
        },
        WebhookSettings {
            cert_reload_interval: std::time::Duration::ZERO,
            ..WebhookSettings::default()
        },
    ];
    for settings in cases {
        let gate = health.readiness_gate("webhook", "starting");
        let result = WebhookServer::new(settings.clone(), Arc::clone(&index), &bus, gate);
        assert!(
            matches!(result, Err(WebhookError::Settings(_))),
            "{settings:?}"
        );
    }
    assert!(WebhookSettings::default().problems().is_empty());
    let custom = WebhookSettings {
        mutate_path: "/v1/mutate_pods.json".into(),
        validate_path: "/v1/validate-pods~x".into(),
        ..WebhookSettings::default()
    };
    assert!(custom.problems().is_empty());
    let gate = health.readiness_gate("webhook", "starting");
    let server = WebhookServer::new(custom, Arc::clone(&index), &bus, gate).unwrap();
    drop(server.router());
}

/// The offline path: same function, no server.
#[test]
fn review_response_offline() {
    let index = cluster();
    let settings = PlacementSettings::default();
    let view = index.placement();
    let policy = PlacementPolicy::load(&view, &settings.policy);
    let body = serde_json::to_vec(&pod_review("shop-beijing", json!({}))).unwrap();
    let response = review_response(
        WebhookKind::Mutate,
        &body,
        &view,
        policy.as_ref(),
        &settings,
    )
    .unwrap();
    assert_eq!(response["response"]["uid"], UID);
    assert_eq!(response["response"]["allowed"], true);
    let patch = patch_of(&response["response"]);
    assert_eq!(patch.0.len(), 1);

    let broken: Result<PlacementPolicy, PlacementError> = PlacementPolicy::parse("x: y");
    let response = review_response(
        WebhookKind::Validate,
        &body,
        &view,
        broken.as_ref(),
        &settings,
    )
    .unwrap();
    assert_eq!(response["response"]["allowed"], false);

    let error = review_response(
        WebhookKind::Validate,
        b"nope",
        &view,
        policy.as_ref(),
        &settings,
    )
    .unwrap_err();
    assert_eq!(error.status_code(), StatusCode::BAD_REQUEST);
}
