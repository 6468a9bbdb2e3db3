//! Nodes the scheduler binds Pods to, though no kubelet runs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::TestEnv;
use crate::TestEnvError;

impl TestEnv {
    /// Creates a Node that the scheduler considers: Ready, with allocatable cpu 16, memory 64Gi
    /// and 110 pods, carrying exactly `labels` and `taints`.
    ///
    /// Nothing runs on the node; the scheduler only binds Pods to it. The apiserver's
    /// TaintNodesByCondition admission adds a not-ready taint on creation that no node
    /// controller would remove here, so the taints are set again after the status.
    pub async fn ready_node(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
    ) -> Result<Node, TestEnvError> {
        let api = Api::<Node>::all(self.client());
        let mut all_labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), name.to_owned()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ]);
        all_labels.extend(labels);
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": {"taints": taints},
        }))
        .map_err(|e| TestEnvError::manifest("node", e))?;
        api.create(&PostParams::default(), &node)
            .await
            .map_err(|e| TestEnvError::kube(format!("creating node {name}"), e))?;
        self.make_node_ready(name, taints).await
    }

    /// Gives an existing Node the status of a Ready node (allocatable cpu 16, memory 64Gi, 110
    /// pods) and sets its taints to exactly `taints`, dropping the not-ready taint the
    /// apiserver's admission added when it was created. Nothing renews this status: the node
    /// lifecycle controller is off (see
    /// [`TestEnvBuilder::controller_manager`](super::TestEnvBuilder::controller_manager)).
    pub async fn make_node_ready(
        &self,
        name: &str,
        taints: Vec<Taint>,
    ) -> Result<Node, TestEnvError> {
        let api = Api::<Node>::all(self.client());
        let resources =
            json!({"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"});
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status = json!({
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "node created by poolkeeper-testenv",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                ],
                "nodeInfo": {
                    "architecture": "amd64", "operatingSystem": "linux",
                    "kubeletVersion": crate::kubernetes_version(), "kubeProxyVersion": "",
                    "bootID": "", "machineID": "", "systemUUID": "", "kernelVersion": "",
                    "osImage": "", "containerRuntimeVersion": "",
                },
            }
        });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| TestEnvError::kube(format!("setting the status of node {name}"), e))?;
        // A JSON merge patch replaces the whole list, dropping the admission-added taint.
        let taints_value = if taints.is_empty() {
            Value::Null
        } else {
            json!(taints)
        };
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": taints_value}})),
        )
        .await
        .map_err(|e| TestEnvError::kube(format!("setting the taints of node {name}"), e))
    }
}
