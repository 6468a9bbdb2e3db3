use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use poolkeeper_testenv::{TestEnv, WebhookCert, WebhookRegistration, eventually};
use serde_json::json;

use crate::TIMEOUT;

const MUTATED_LABEL: &str = "testenv.poolkeeper.io/mutated";

/// Adds `MUTATED_LABEL: "true"` to every Pod it is asked about.
async fn mutate(
    State(calls): State<Arc<AtomicUsize>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    calls.fetch_add(1, Ordering::SeqCst);
    let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
    let patch: json_patch::Patch = serde_json::from_value(json!([{
        "op": "add",
        "path": format!("/metadata/labels/{}", MUTATED_LABEL.replace('/', "~1")),
        "value": "true",
    }]))
    .unwrap();
    Json(
        AdmissionResponse::from(&request)
            .with_patch(patch)
            .unwrap()
            .into_review(),
    )
}

/// Serves the webhook over TLS on a free port of 127.0.0.1; returns the port and the call counter.
fn serve_webhook(cert: &WebhookCert) -> (u16, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .route("/mutate-pods", post(mutate))
        .with_state(calls.clone());
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let tls = RustlsConfig::from_config(cert.rustls_server_config().unwrap());
    let server = axum_server::from_tcp_rustls(listener, tls).unwrap();
    tokio::spawn(server.serve(app.into_make_service()));
    (port, calls)
}

const WEBHOOK_CONFIGURATION: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: testenv-mutate-pods
webhooks:
  - name: mutate-pods.testenv.poolkeeper.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 5
    clientConfig:
      service: {name: poolkeeper-webhook, namespace: poolkeeper-system, path: /mutate-pods}
    rules:
      - operations: ["CREATE"]
        apiGroups: [""]
        apiVersions: ["v1"]
        resources: ["pods"]
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: webhooked}
"#;

#[tokio::test]
async fn apiserver_calls_the_mutating_webhook_on_pod_creation() {
    let env = TestEnv::builder().start().await.unwrap();
    env.create_namespace("webhooked").await.unwrap();
    let cert = WebhookCert::generate().unwrap();
    let (port, calls) = serve_webhook(&cert);

    let registration = WebhookRegistration::new(port, cert.ca_pem.clone())
        .with_yaml(WEBHOOK_CONFIGURATION, "webhook configuration")
        .unwrap();
    env.register_webhooks(registration).await.unwrap();
    let registered = Api::<MutatingWebhookConfiguration>::all(env.client())
        .get("testenv-mutate-pods")
        .await
        .unwrap();
    let client_config = &registered.webhooks.unwrap()[0].client_config;
    assert_eq!(
        client_config.url,
        Some(format!("https://127.0.0.1:{port}/mutate-pods"))
    );
    assert!(client_config.service.is_none());

    let pods = Api::<Pod>::namespaced(env.client(), "webhooked");
    let pod = |name: &str| -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "registry.example/web:1"}]},
        }))
        .unwrap()
    };
    // The apiserver loads new webhook configurations asynchronously; dry runs show when it has.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually("the webhook configuration in effect", TIMEOUT, || async {
        let created = pods.create(&dry_run, &pod("probe")).await.ok()?;
        created
            .metadata
            .labels?
            .contains_key(MUTATED_LABEL)
            .then_some(())
    })
    .await
    .unwrap();

    let calls_before = calls.load(Ordering::SeqCst);
    let created = pods
        .create(&PostParams::default(), &pod("web"))
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), calls_before + 1);
    let labels = created.metadata.labels.unwrap();
    assert_eq!(labels[MUTATED_LABEL], "true");
    assert_eq!(labels["app"], "web");
    let stored = pods.get("web").await.unwrap();
    assert_eq!(stored.metadata.labels.unwrap()[MUTATED_LABEL], "true");
}
