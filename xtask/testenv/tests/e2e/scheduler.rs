use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::Api;
use kube::api::PostParams;
use poolkeeper_testenv::{Process, TestEnv, eventually};
use serde_json::json;

use crate::TIMEOUT;

#[tokio::test]
async fn scheduler_binds_a_pod_to_the_ready_untainted_node() {
    let env = TestEnv::builder().scheduler(true).start().await.unwrap();
    env.create_namespace("apps").await.unwrap();

    let pool = BTreeMap::from([(
        "apps.openyurt.io/nodepool".to_owned(),
        "hangzhou".to_owned(),
    )]);
    let worker = env
        .ready_node("worker-1", pool.clone(), Vec::new())
        .await
        .unwrap();
    assert_eq!(
        worker.spec.as_ref().unwrap().taints,
        None,
        "admission-added taints are removed"
    );
    assert_eq!(
        worker.metadata.labels.as_ref().unwrap()["apps.openyurt.io/nodepool"],
        "hangzhou"
    );
    let edge_taint = Taint {
        key: "node-role.kubernetes.io/edge".to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    };
    let edge = env
        .ready_node("edge-1", pool, vec![edge_taint.clone()])
        .await
        .unwrap();
    assert_eq!(edge.spec.as_ref().unwrap().taints, Some(vec![edge_taint]));

    let pods = Api::<Pod>::namespaced(env.client(), "apps");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{
            "name": "web",
            "image": "registry.example/web:1",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        }]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let node_name = eventually("the Pod bound to a node", TIMEOUT, || async {
        pods.get("web").await.ok()?.spec?.node_name
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nscheduler log:\n{}",
            env.log_tail(Process::Scheduler, 30)
        )
    });
    assert_eq!(node_name, "worker-1");
}
