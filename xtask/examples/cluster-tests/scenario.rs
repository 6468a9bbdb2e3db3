//! What an installation must do on a real node: the namespace `shop` is bound to the pool
//! `edge`, whose one member is the cluster's real node; a Deployment there gets the pool's
//! node affinity and its Pods run on that node; a Pod asking for `cloud-1`, a node of the pool
//! `cloud` (a Node object without a kubelet), is denied with the reason. The API server
//! reaches the webhooks only through poolkeeper's Service.

use std::time::Duration;

use crate::support::{Cluster, NAMESPACE, eventually};

pub const WORKLOAD_NAMESPACE: &str = "shop";
pub const POOL: &str = "edge";
const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const OUTSIDE_NODE: &str = "cloud-1";

/// NodePools, the real node in `edge`, the Node `cloud-1` in `cloud`, the namespace, and the
/// placement ConfigMap `placement_config_map` binding it.
pub fn set_up(cluster: &Cluster, placement_config_map: &str) {
    cluster.apply_ok(&format!(
        r#"apiVersion: apps.openyurt.io/v1beta2
kind: NodePool
metadata: {{name: {POOL}}}
spec: {{type: Edge}}
---
apiVersion: apps.openyurt.io/v1beta2
kind: NodePool
metadata: {{name: cloud}}
spec: {{type: Cloud}}
---
apiVersion: v1
kind: Node
metadata:
  name: {OUTSIDE_NODE}
  labels: {{{POOL_LABEL}: cloud, kubernetes.io/hostname: {OUTSIDE_NODE}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {WORKLOAD_NAMESPACE}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {placement_config_map}, namespace: {NAMESPACE}}}
data:
  placement.yaml: |
    bindings:
      - namespace: {WORKLOAD_NAMESPACE}
        nodePool: {POOL}
"#
    ));
    cluster.kubectl_ok(&[
        "label",
        "node",
        &cluster.node,
        &format!("{POOL_LABEL}={POOL}"),
        "--overwrite",
    ]);
    wait_for_binding(cluster, "poolkeeper");
    wait_until_served(cluster);
}

/// The webhook answers through the Service: a server-side dry run of a Pod in the bound
/// namespace comes back with the pool's affinity. Between the replicas' readiness and
/// kube-proxy's rules for the new endpoints a second may pass, in which the Service refuses
/// connections.
fn wait_until_served(cluster: &Cluster) {
    let pod = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
 "metadata": {{"name": "probe", "namespace": "{WORKLOAD_NAMESPACE}"}},
 "spec": {{"containers": [{{"name": "c", "image": "{image}"}}]}}}}"#,
        image = cluster.workload_image
    );
    let affinity = "jsonpath={.spec.affinity.nodeAffinity}";
    eventually(
        "the webhook answering through the Service",
        Duration::from_secs(60),
        || {
            let mut command = cluster.command("kubectl");
            command.args(["create", "--dry-run=server", "-f", "-", "-o", affinity]);
            let out = crate::support::run_with_input(&mut command, &pod);
            (out.status.success() && String::from_utf8_lossy(&out.stdout).contains(POOL))
                .then_some(())
        },
    );
}

/// The leader has put the bound namespace into both configurations' selectors.
pub fn wait_for_binding(cluster: &Cluster, configuration: &str) {
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        eventually(
            &format!("{kind} {configuration} selecting namespace {WORKLOAD_NAMESPACE}"),
            Duration::from_secs(60),
            || {
                let values = cluster.kubectl_ok(&[
                    "get",
                    kind,
                    configuration,
                    "-o",
                    "jsonpath={.webhooks[0].namespaceSelector.matchExpressions[0].values}",
                ]);
                values
                    .contains(&format!("\"{WORKLOAD_NAMESPACE}\""))
                    .then_some(())
            },
        );
    }
}

/// The entries call the Service, never a URL.
pub fn webhooks_go_through_the_service(cluster: &Cluster, service: &str) {
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let services = cluster.kubectl_ok(&[
            "get",
            kind,
            "poolkeeper",
            "-o",
            r#"jsonpath={range .webhooks[*]}{.clientConfig.service.namespace}/{.clientConfig.service.name}:{.clientConfig.service.port} {.clientConfig.url}{"\n"}{end}"#,
        ]);
        let expected = format!("{NAMESPACE}/{service}:443 ");
        assert_eq!(services.lines().count(), 2, "{kind}: {services}");
        for line in services.lines() {
            assert_eq!(line, expected, "{kind}: every entry calls the Service");
        }
    }
}

/// A Deployment in the bound namespace: its Pods carry the pool's affinity and run on the
/// real node.
pub fn deployment_is_placed_and_running(cluster: &Cluster) {
    cluster.apply_ok(&format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {WORKLOAD_NAMESPACE}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - {{name: web, image: "{image}", imagePullPolicy: Never}}
"#,
        image = cluster.workload_image
    ));
    let running = eventually(
        "the Deployment's two Pods Running",
        Duration::from_secs(120),
        || {
            let pods = cluster.kubectl_ok(&[
                "-n",
                WORKLOAD_NAMESPACE,
                "get",
                "pods",
                "-l",
                "app=web",
                "-o",
                r#"jsonpath={range .items[*]}{.status.phase} {.spec.nodeName} {.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]}{"\n"}{end}"#,
            ]);
            let lines: Vec<&str> = pods.lines().collect();
            let all_running = lines.iter().all(|l| l.starts_with("Running "));
            (lines.len() == 2 && all_running).then_some(pods)
        },
    );
    for line in running.lines() {
        assert!(
            line.starts_with(&format!("Running {} ", cluster.node)),
            "placed on the pool's node: {line}"
        );
        assert!(
            line.contains(POOL_LABEL) && line.contains(&format!("\"{POOL}\"")),
            "the pool's node affinity was added: {line}"
        );
    }
}

/// A Pod asking for a node outside the pool is refused, and `kubectl` shows why.
pub fn outside_pod_is_denied(cluster: &Cluster) {
    let out = cluster.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: outside, namespace: {WORKLOAD_NAMESPACE}}}
spec:
  nodeSelector: {{kubernetes.io/hostname: {OUTSIDE_NODE}}}
  containers:
    - {{name: web, image: "{image}", imagePullPolicy: Never}}
"#,
        image = cluster.workload_image
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the Pod outside the pool was admitted"
    );
    assert!(
        stderr.contains("denied the request")
            && stderr.contains(&format!("node pool \"{POOL}\""))
            && stderr.contains(OUTSIDE_NODE),
        "the denial names the pool and the node: {stderr}"
    );
}

/// The workload namespace and the node's pool label go (the NodePools, kept with their
/// CRD, and `cloud-1` stay for the next test).
pub fn tear_down(cluster: &Cluster) {
    cluster.kubectl_ok(&[
        "delete",
        "namespace",
        WORKLOAD_NAMESPACE,
        "--ignore-not-found",
        "--timeout=120s",
    ]);
    cluster.kubectl_ok(&["label", "node", &cluster.node, &format!("{POOL_LABEL}-")]);
}
