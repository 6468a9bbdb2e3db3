//! The objects the end-to-end tests create and read, built one way for all
//! of them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, NodeAffinity, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use poolkeeper_api::{ClassSpec, Machine, MachineClass, MachineSpec};
use serde_json::{Value, json};

pub(crate) const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
pub(crate) const CONTROLLER_NAMESPACE: &str = "poolkeeper-system";
pub(crate) const POLICY_CONFIG_MAP: &str = "poolkeeper-placement";
pub(crate) const POLICY_KEY: &str = "placement.yaml";
const FIELD_MANAGER: &str = "poolkeeper-e2e";

/// Creates or replaces the placement ConfigMap with `policy` (YAML).
pub(crate) async fn apply_policy(client: &Client, policy: &str) {
    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": POLICY_CONFIG_MAP, "namespace": CONTROLLER_NAMESPACE},
        "data": {POLICY_KEY: policy},
    });
    Api::<ConfigMap>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .patch(
            POLICY_CONFIG_MAP,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&config_map),
        )
        .await
        .expect("the placement ConfigMap is written");
}

/// A Pod with one small container, `labels` and `spec` merged in.
pub(crate) fn labelled_pod(name: &str, labels: Value, mut spec: Value) -> Pod {
    spec["containers"] = json!([{
        "name": "app",
        "image": "registry.example/app:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }]);
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }))
    .expect("a valid Pod")
}

/// A Pod with one small container and no constraint of its own.
pub(crate) fn plain_pod(name: &str) -> Pod {
    labelled_pod(name, json!({}), json!({}))
}

pub(crate) fn machine_class(name: &str) -> MachineClass {
    let mut class = MachineClass::new(name, json!({"machineType": "m5.large"}));
    class.provider = Some("AWS".to_owned());
    class
}

pub(crate) fn machine(name: &str, class: &str) -> Machine {
    Machine::new(
        name,
        MachineSpec {
            class: ClassSpec {
                kind: Some("MachineClass".to_owned()),
                name: class.to_owned(),
                ..ClassSpec::default()
            },
            ..MachineSpec::default()
        },
    )
}

pub(crate) fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

pub(crate) fn node_affinity(pod: &Pod) -> Option<&NodeAffinity> {
    pod.spec.as_ref()?.affinity.as_ref()?.node_affinity.as_ref()
}

/// The pool of a required node affinity exactly as poolkeeper writes it
/// (`poolLabel In [pool]`, one term), `None` for any other affinity.
pub(crate) fn pool_affinity(pod: &Pod) -> Option<String> {
    let required = node_affinity(pod)?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    let value = serde_json::to_value(required).ok()?;
    let pool = value.pointer("/nodeSelectorTerms/0/matchExpressions/0/values/0")?;
    let expected = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": POOL_LABEL, "operator": "In", "values": [pool]},
    ]}]});
    (value == expected).then(|| pool.as_str().unwrap_or_default().to_owned())
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// For every class listed: whether it has `finalizer`.
pub(crate) async fn finalized_classes(
    classes: &Api<MachineClass>,
    finalizer: &str,
) -> BTreeMap<String, bool> {
    classes
        .list(&ListParams::default())
        .await
        .expect("listing MachineClasses")
        .items
        .into_iter()
        .map(|class| {
            let protected = class
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == finalizer);
            (class.metadata.name.unwrap_or_default(), protected)
        })
        .collect()
}

/// POSTs an AdmissionReview for a plain Pod of `namespace` straight to the
/// webhook's mutate path, over a fresh TLS connection trusting only
/// `ca_file`, as the API server would.
pub(crate) async fn mutate_over_tls(
    port: u16,
    ca_file: &Path,
    namespace: &str,
) -> Result<serde_json::Value, kube::Error> {
    let kubeconfig = Kubeconfig::from_yaml(&format!(
        "apiVersion: v1\nkind: Config\nclusters:\n  - name: webhook\n    cluster:\n      \
         server: https://127.0.0.1:{port}\n      certificate-authority: {}\nusers:\n  - name: \
         anonymous\n    user: {{}}\ncontexts:\n  - name: webhook\n    context: {{cluster: \
         webhook, user: anonymous}}\ncurrent-context: webhook\n",
        ca_file.display()
    ))
    .expect("a kubeconfig for the webhook server");
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a client configuration for the webhook server");
    config.default_retry = false;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(10));
    let client = Client::try_from(config).expect("a client for the webhook server");
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": MUTATE_OVER_TLS_UID,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": serde_json::to_value(plain_pod("direct")).unwrap(),
        },
    });
    let request = kube::core::Request::new("/mutate-pods")
        .create(&PostParams::default(), serde_json::to_vec(&review).unwrap())
        .expect("a request");
    client.request::<serde_json::Value>(request).await
}

/// The uid of the reviews `mutate_over_tls` sends.
pub(crate) const MUTATE_OVER_TLS_UID: &str = "00000000-0000-4000-8000-00000000e2e0";
