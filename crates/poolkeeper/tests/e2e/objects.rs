//! The objects the end-to-end tests create and read, built one way for all
//! of them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, NodeAffinity, Pod, Taint};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use poolkeeper_api::{
    ClassSpec, Machine, MachineClass, MachineSpec, NodePool, NodePoolSpec, NodePoolType,
};
use poolkeeper_testenv::TestEnv;
use serde_json::{Value, json};

pub(crate) const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
pub(crate) const EDGE_TAINT: &str = "node-role.kubernetes.io/edge";
pub(crate) const CONTROLLER_NAMESPACE: &str = "poolkeeper-system";
/// Where the MachineClasses and Machines of the tests live.
pub(crate) const MACHINE_NAMESPACE: &str = "machine-system";
/// `machineClasses.finalizer` when the configuration does not set it.
pub(crate) const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
pub(crate) const POLICY_CONFIG_MAP: &str = "poolkeeper-placement";
pub(crate) const POLICY_KEY: &str = "placement.yaml";
const FIELD_MANAGER: &str = "poolkeeper-e2e";

/// Creates or replaces the placement ConfigMap: each `(namespace, pool,
/// mode)` binding, and the toleration of [`EDGE_TAINT`] for Edge pools.
pub(crate) async fn write_policy(client: &Client, bindings: &[(&str, &str, &str)]) {
    let mut policy = String::from("bindings:\n");
    for (namespace, pool, mode) in bindings {
        // "a,b" binds the union of both pools.
        let pools = match pool.contains(',') {
            true => format!("nodePools: [{pool}]"),
            false => format!("nodePool: {pool}"),
        };
        policy.push_str(&format!(
            "  - {{namespace: {namespace}, {pools}, mode: {mode}}}\n"
        ));
    }
    policy.push_str(&format!(
        "edgeTolerations:\n  - {{key: {EDGE_TAINT}, operator: Exists, effect: NoSchedule}}\n"
    ));
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

pub(crate) fn pool_labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(POOL_LABEL.to_owned(), pool.to_owned())])
}

pub(crate) fn edge_taint() -> Taint {
    Taint {
        key: EDGE_TAINT.to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    }
}

/// The NodePool `name` and a Ready node for each of `nodes`, labelled into
/// it (and tainted with [`EDGE_TAINT`] on an Edge pool).
pub(crate) async fn create_pool(
    env: &TestEnv,
    name: &str,
    pool_type: NodePoolType,
    nodes: &[&str],
) {
    let taints = if matches!(pool_type, NodePoolType::Edge) {
        vec![edge_taint()]
    } else {
        Vec::new()
    };
    let pool = NodePool::new(
        name,
        NodePoolSpec {
            pool_type: Some(pool_type),
            ..NodePoolSpec::default()
        },
    );
    Api::<NodePool>::all(env.client())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap_or_else(|e| panic!("creating NodePool {name}: {e}"));
    for node in nodes {
        env.ready_node(node, pool_labels(name), taints.clone())
            .await
            .unwrap_or_else(|e| panic!("creating node {node} of pool {name}: {e}"));
    }
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

/// A Pod with one small container and `spec` merged in.
pub(crate) fn pod(name: &str, spec: Value) -> Pod {
    labelled_pod(name, json!({}), spec)
}

/// A Pod with one small container and no constraint of its own.
pub(crate) fn plain_pod(name: &str) -> Pod {
    pod(name, json!({}))
}

/// A Pod kube-scheduler can only bind to `node` (it tolerates the edge
/// taint, so any pool's node will do).
pub(crate) fn pinned(name: &str, node: &str) -> Pod {
    pod(
        name,
        json!({
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": EDGE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        }),
    )
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

pub(crate) async fn create_class(classes: &Api<MachineClass>, name: &str) {
    classes
        .create(&PostParams::default(), &machine_class(name))
        .await
        .unwrap_or_else(|e| panic!("creating MachineClass {name}: {e}"));
}

pub(crate) async fn create_machine(machines: &Api<Machine>, name: &str, class: &str) {
    machines
        .create(&PostParams::default(), &machine(name, class))
        .await
        .unwrap_or_else(|e| panic!("creating Machine {name}: {e}"));
}

pub(crate) async fn delete_machine(machines: &Api<Machine>, name: &str) {
    machines
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting Machine {name}: {e}"));
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

/// Distinct loopback ports, all free when picked (held until every one is).
pub(crate) fn free_ports<const N: usize>() -> [SocketAddr; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback port"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("a bound address"))
}

pub(crate) fn free_port() -> u16 {
    poolkeeper_testenv::free_port().expect("a free loopback port")
}

/// The class's finalizers; `None` once it is gone.
pub(crate) async fn finalizers_of(classes: &Api<MachineClass>, name: &str) -> Option<Vec<String>> {
    classes
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading MachineClass {name}: {e}"))
        .map(|class| class.metadata.finalizers.unwrap_or_default())
}

pub(crate) async fn has_finalizer(
    classes: &Api<MachineClass>,
    name: &str,
    finalizer: &str,
) -> bool {
    finalizers_of(classes, name)
        .await
        .is_some_and(|finalizers| finalizers.iter().any(|f| f == finalizer))
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

/// The classes the Machines listed reference.
pub(crate) async fn used_classes(machines: &Api<Machine>) -> BTreeSet<String> {
    machines
        .list(&ListParams::default())
        .await
        .expect("listing Machines")
        .items
        .into_iter()
        .map(|machine| machine.spec.class.name)
        .collect()
}

/// What [`finalized_classes`] shows once poolkeeper has converged: of
/// `all`, the classes in `used` protected, the others not.
pub(crate) fn expected_state<S: AsRef<str>>(all: &[&str], used: &[S]) -> BTreeMap<String, bool> {
    all.iter()
        .map(|name| {
            let in_use = used.iter().any(|u| u.as_ref() == *name);
            (name.to_string(), in_use)
        })
        .collect()
}

/// The Kubernetes Events of `namespace` that poolkeeper reported.
pub(crate) async fn poolkeeper_events(client: &Client, namespace: &str) -> Vec<KubeEvent> {
    Api::<KubeEvent>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("listing Events")
        .items
        .into_iter()
        .filter(|event| event.reporting_controller.as_deref() == Some("poolkeeper"))
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
