//! kube-controller-manager beside the apiserver and the scheduler: workloads create Pods, the
//! Nodes stay as the test made them, namespaces get their default ServiceAccount.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::ListParams;
use poolkeeper_testenv::{Process, TestEnv, eventually};

use crate::TIMEOUT;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apps}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.example/web:1}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: apps}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: registry.example/agent:1}]
"#;

#[tokio::test]
async fn workloads_get_their_pods_created_and_scheduled() {
    let env = TestEnv::builder()
        .scheduler(true)
        .controller_manager(true)
        .start()
        .await
        .unwrap();
    env.create_namespace("apps").await.unwrap();
    for name in ["worker-1", "worker-2"] {
        env.ready_node(name, BTreeMap::new(), Vec::new())
            .await
            .unwrap();
    }
    env.apply_yaml(DEPLOYMENT, "workloads").await.unwrap();

    let pods = Api::<Pod>::namespaced(env.client(), "apps");
    let bound = |selector: &'static str, count: usize| {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .ok()?;
            let nodes: Vec<String> = list
                .items
                .into_iter()
                .filter_map(|p| p.spec?.node_name)
                .collect();
            (nodes.len() == count).then_some(nodes)
        }
    };
    let web = eventually("3 Pods of the Deployment bound", TIMEOUT, || {
        bound("app=web", 3)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", env.log_tail(Process::ControllerManager, 30)));
    assert_eq!(web.len(), 3);
    let mut agents = eventually("one DaemonSet Pod per Node", TIMEOUT, || {
        bound("app=agent", 2)
    })
    .await
    .unwrap();
    agents.sort();
    assert_eq!(agents, ["worker-1", "worker-2"]);

    let accounts = Api::<ServiceAccount>::namespaced(env.client(), "apps");
    eventually("the default ServiceAccount", TIMEOUT, || async {
        accounts.get_opt("default").await.ok().flatten()
    })
    .await
    .unwrap();
    // No node lifecycle controller: Nodes without a kubelet keep their Ready condition and
    // gain no unreachable taint.
    let node = Api::<Node>::all(env.client())
        .get("worker-1")
        .await
        .unwrap();
    assert_eq!(node.spec.unwrap().taints, None);
    assert!(env.pid(Process::ControllerManager).is_some());
}

/// Files applied in one call, whatever their order: a Pod of a namespace that a later file
/// creates inside a `kind: List`, and a custom resource whose CRD comes last.
#[tokio::test]
async fn objects_apply_in_dependency_order() {
    let env = TestEnv::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let pods = write(
        "a-pods.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: canary, namespace: late}\n\
         spec: {containers: [{name: c, image: registry.example/c:1}]}\n---\n\
         apiVersion: apps.openyurt.io/v1beta2\nkind: NodePool\nmetadata: {name: hangzhou}\n\
         spec: {type: Edge}\n",
    );
    let namespaces = write(
        "b-namespaces.yaml",
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Namespace, metadata: {name: late}}\n",
    );
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crds/nodepools.yaml"
    );
    let applied = env
        .apply_files([
            pods.as_path(),
            namespaces.as_path(),
            std::path::Path::new(crd),
        ])
        .await
        .unwrap();
    let kinds: Vec<&str> = applied
        .iter()
        .filter_map(|o| o.types.as_ref().map(|t| t.kind.as_str()))
        .collect();
    assert_eq!(kinds, ["Namespace", "Pod", "NodePool"]);
    let late = Api::<Pod>::namespaced(env.client(), "late");
    assert!(late.get_opt("canary").await.unwrap().is_some());
}
