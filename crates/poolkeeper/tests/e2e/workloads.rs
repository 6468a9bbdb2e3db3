//! Workloads end to end, with kube-controller-manager creating the Pods: the
//! cluster of `placement.rs` (pool `edge`: edge-1, edge-2, tainted; pool
//! `cloud`: cloud-1, cloud-2; loose-1 in no pool; `shop-edge` bound to
//! `edge`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use poolkeeper_testenv::eventually;
use serde_json::json;

use crate::harness::TIMEOUT;
use crate::placement::{CLOUD_NODES, Cluster, EDGE_NAMESPACE, EDGE_NODES, Webhooks, setup};

/// How long the tests wait for a controller to create Pods that will not come.
const QUIET: Duration = Duration::from_secs(5);

impl Cluster {
    /// Applies YAML, returning the apiserver's refusal if there is one.
    async fn apply(&self, yaml: &str) -> Result<(), String> {
        self.env
            .apply_yaml(yaml, "workload")
            .await
            .map(drop)
            .map_err(|e| format!("{e}"))
    }

    /// The nodes the Pods with `selector` are bound to, once there are `count`.
    async fn bound_nodes(&self, selector: &str, count: usize) -> Vec<String> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), EDGE_NAMESPACE);
        let selector = selector.to_owned();
        eventually(&format!("{count} pods {selector} bound"), TIMEOUT, || {
            let pods = pods.clone();
            let selector = selector.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .ok()?;
                let mut nodes: Vec<String> = list
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter_map(|p| p.spec?.node_name)
                    .collect();
                nodes.sort();
                (nodes.len() == count).then_some(nodes)
            }
        })
        .await
        .unwrap()
    }

    async fn failed_creates(&self) -> Vec<String> {
        Api::<Event>::namespaced(self.client.clone(), EDGE_NAMESPACE)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
            .map(|e| e.message.unwrap_or_default())
            .collect()
    }
}

fn assert_in_edge_pool(nodes: &[String], what: &str) {
    assert!(
        nodes.iter().all(|n| EDGE_NODES.contains(&n.as_str())),
        "{what}: pods on {nodes:?}, outside the edge pool"
    );
}

fn deployment(name: &str, replicas: u32, node_selector: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {EDGE_NAMESPACE}}}\n\
         spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n\
         \x20   metadata: {{labels: {{app: {name}}}}}\n    spec:\n      nodeSelector: {node_selector}\n\
         \x20     containers: [{{name: c, image: registry.example/c:1}}]\n"
    )
}

#[tokio::test]
async fn deployments_are_placed_and_one_reaching_outside_is_refused_on_apply_and_update() {
    let cluster = setup(Webhooks::Both).await;
    cluster.apply(&deployment("shop", 3, "{}")).await.unwrap();
    let nodes = cluster.bound_nodes("app=shop", 3).await;
    assert_in_edge_pool(&nodes, "Deployment shop");

    let foreign = format!("{{kubernetes.io/hostname: {}}}", CLOUD_NODES[0]);
    let refused = cluster
        .apply(&deployment("stray", 1, &foreign))
        .await
        .unwrap_err();
    assert!(
        refused.contains("validate-pods.poolkeeper.io")
            && refused
                .contains("the pod template of Deployment: pod is bound to node pool \"edge\""),
        "{refused}"
    );
    // An UPDATE of the template that would leave the pool is refused; the
    // Deployment keeps its template.
    let refused = cluster
        .apply(&deployment("shop", 3, &foreign))
        .await
        .unwrap_err();
    assert!(
        refused.contains("the pod template of Deployment"),
        "{refused}"
    );
    let kept = cluster.bound_nodes("app=shop", 3).await;
    assert_in_edge_pool(&kept, "Deployment shop after the refused update");
    assert!(cluster.failed_creates().await.is_empty());
}

#[tokio::test]
async fn a_daemonset_runs_exactly_on_its_pools_nodes() {
    let cluster = setup(Webhooks::Both).await;
    let yaml = format!(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent, namespace: {EDGE_NAMESPACE}}}\n\
         spec:\n  selector: {{matchLabels: {{app: agent}}}}\n  template:\n    metadata: {{labels: {{app: agent}}}}\n\
         \x20   spec: {{containers: [{{name: c, image: registry.example/agent:1}}]}}\n"
    );
    cluster.apply(&yaml).await.unwrap();
    let nodes = cluster.bound_nodes("app=agent", 2).await;
    assert_eq!(nodes, EDGE_NODES);
    let daemonsets = Api::<DaemonSet>::namespaced(cluster.client.clone(), EDGE_NAMESPACE);
    let desired = eventually("the DaemonSet's status", TIMEOUT, || async {
        let status = daemonsets.get("agent").await.ok()?.status?;
        (status.desired_number_scheduled == 2).then_some(status.desired_number_scheduled)
    })
    .await
    .unwrap();
    assert_eq!(desired, 2);
    let stored = daemonsets.get("agent").await.unwrap();
    let annotation = stored
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap();
    assert!(annotation["poolkeeper.io/placement"].contains("\"constraints\":\"narrow\""));
    // Nothing tries, and fails, to run on the other nodes.
    tokio::time::sleep(QUIET).await;
    assert_eq!(cluster.bound_nodes("app=agent", 2).await, EDGE_NODES);
    assert_eq!(cluster.failed_creates().await, Vec::<String>::new());
}

#[tokio::test]
async fn jobs_cronjob_jobs_and_a_statefulset_rolling_update_are_placed() {
    let cluster = setup(Webhooks::Both).await;
    let yaml = format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: once, namespace: {EDGE_NAMESPACE}}}\n\
         spec:\n  template:\n    metadata: {{labels: {{app: once}}}}\n\
         \x20   spec: {{restartPolicy: Never, containers: [{{name: c, image: registry.example/c:1}}]}}\n\
         ---\napiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: nightly, namespace: {EDGE_NAMESPACE}}}\n\
         spec:\n  schedule: '0 3 * * *'\n  jobTemplate:\n    spec:\n      template:\n\
         \x20       metadata: {{labels: {{app: nightly}}}}\n\
         \x20       spec: {{restartPolicy: Never, containers: [{{name: c, image: registry.example/c:1}}]}}\n\
         ---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: db, namespace: {EDGE_NAMESPACE}}}\n\
         spec:\n  serviceName: db\n  replicas: 2\n  podManagementPolicy: Parallel\n\
         \x20 selector: {{matchLabels: {{app: db}}}}\n  template:\n    metadata: {{labels: {{app: db}}}}\n\
         \x20   spec: {{terminationGracePeriodSeconds: 0, containers: [{{name: c, image: registry.example/db:1}}]}}\n"
    );
    cluster.apply(&yaml).await.unwrap();
    assert_in_edge_pool(&cluster.bound_nodes("app=once", 1).await, "Job once");

    // What `kubectl create job --from=cronjob/nightly` does: a Job of the CronJob's template.
    let cronjobs = Api::<DynamicObject>::namespaced_with(
        cluster.client.clone(),
        EDGE_NAMESPACE,
        &kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "batch", "v1", "CronJob",
        )),
    );
    let cronjob = cronjobs.get("nightly").await.unwrap();
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "nightly-manual", "namespace": EDGE_NAMESPACE},
        "spec": cronjob.data["spec"]["jobTemplate"]["spec"]});
    cluster
        .apply(&serde_json::to_string(&job).unwrap())
        .await
        .unwrap();
    assert_in_edge_pool(
        &cluster.bound_nodes("app=nightly", 1).await,
        "the CronJob's Job",
    );

    let before = cluster.bound_nodes("app=db", 2).await;
    assert_in_edge_pool(&before, "StatefulSet db");
    let statefulsets = Api::<StatefulSet>::namespaced(cluster.client.clone(), EDGE_NAMESPACE);
    statefulsets
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.example/db:2"}]}}}})),
        )
        .await
        .unwrap();
    // The rolling update replaces the highest ordinal first; its new Pod is placed.
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), EDGE_NAMESPACE);
    let node = eventually("db-1 recreated with the new template", TIMEOUT, || async {
        let pod = pods.get("db-1").await.ok()?;
        let spec = pod.spec?;
        (spec.containers[0].image.as_deref() == Some("registry.example/db:2"))
            .then_some(spec.node_name?)
    })
    .await
    .unwrap();
    assert_in_edge_pool(&[node], "StatefulSet db after its rolling update");
}
