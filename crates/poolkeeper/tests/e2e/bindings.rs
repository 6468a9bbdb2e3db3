//! Bindings the way operators write them, end to end on the cluster of
//! `placement.rs` (pool `edge`: edge-1, edge-2, tainted; pool `cloud`:
//! cloud-1, cloud-2; loose-1 in no pool; the ConfigMap binds `shop-edge` to
//! `edge` and `shop-cloud` to `cloud`): Namespaces labelled into a pool,
//! bindings to several pools, and the bindings that are refused.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use poolkeeper_testenv::{TestEnv, eventually};
use serde_json::{Value, json};

use crate::harness::{
    Running, TIMEOUT, control_plane, metric_sum, scheduled_node, test_config, wait_placed,
};
use crate::objects::{
    CONTROLLER_NAMESPACE, POOL_LABEL, dry_run, labelled_pod, node_affinity, plain_pod, pod,
    pool_affinity, write_policy,
};
use crate::placement::{
    BINDINGS, CLOUD_NAMESPACE, CLOUD_NODES, Cluster, EDGE_NAMESPACE, EDGE_NODES, Webhooks, setup,
};

const MODE_LABEL: &str = "poolkeeper.io/mode";

/// Sets (`Some`) or removes (`None`) labels of Namespace `name`.
async fn label_namespace(client: &Client, name: &str, labels: Value) {
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling namespace {name}: {e}"));
}

/// The (reason, message) of the Warning Events on Namespace `name`, once
/// there is one.
async fn wait_namespace_warnings(client: &Client, name: &str) -> Vec<(String, String)> {
    eventually(&format!("a Warning on {name}"), TIMEOUT, || async {
        let warnings: Vec<(String, String)> = Api::<Event>::namespaced(client.clone(), name)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.involved_object.kind.as_deref() == Some("Namespace"))
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect();
        (!warnings.is_empty()).then_some(warnings)
    })
    .await
    .unwrap()
}

/// Waits until `running` counts `count` rejected label bindings for
/// `reason`.
async fn wait_rejected(running: &Running, reason: &str, count: u64) {
    let series = format!("poolkeeper_placement_rejected_bindings{{reason=\"{reason}\"}}");
    eventually(&format!("{series} = {count}"), TIMEOUT, || async {
        (metric_sum(&running.metrics().await, &series) == count).then_some(())
    })
    .await
    .unwrap();
}

impl Cluster {
    async fn label_namespace(&self, name: &str, labels: Value) {
        label_namespace(&self.client, name, labels).await;
    }

    /// The namespaces the bound-namespaces entry of the validating
    /// configuration lists (the leader keeps it in step with the bindings).
    async fn selected_namespaces(&self) -> Vec<String> {
        let configuration = Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .get("poolkeeper")
            .await
            .unwrap();
        let entry = configuration
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .find(|w| w.name == "validate-pods.poolkeeper.io")
            .expect("the bound-namespaces entry");
        let selector = serde_json::to_value(entry.namespace_selector).unwrap();
        selector
            .pointer("/matchExpressions/0/values")
            .and_then(Value::as_array)
            .map(|values| {
                values
                    .iter()
                    .filter_map(|v| Some(v.as_str()?.to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn wait_selected(&self, namespace: &str, selected: bool) {
        eventually(
            &format!("{namespace} selected: {selected}"),
            TIMEOUT,
            || async {
                let listed = self.selected_namespaces().await;
                (listed.iter().any(|n| n == namespace) == selected).then_some(())
            },
        )
        .await
        .unwrap();
    }

    /// The pool values of the required affinity a dry-run create in
    /// `namespace` gets (empty: not placed).
    async fn placed_pools(&self, namespace: &str) -> Vec<String> {
        let created = self
            .pods(namespace)
            .create(&dry_run(), &plain_pod("probe"))
            .await
            .unwrap();
        let affinity = serde_json::to_value(node_affinity(&created)).unwrap();
        affinity
            .pointer("/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0/values")
            .and_then(Value::as_array)
            .map(|values| values.iter().filter_map(|v| Some(v.as_str()?.to_owned())).collect())
            .unwrap_or_default()
    }

    async fn wait_rejected(&self, reason: &str, count: u64) {
        wait_rejected(&self.running, reason, count).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_namespace_is_bound_and_unbinding_it_is_followed() {
    const TEAM: &str = "team-a";
    let cluster = setup(Webhooks::Both).await;
    cluster.env.create_namespace(TEAM).await.unwrap();
    assert!(cluster.placed_pools(TEAM).await.is_empty());
    assert!(
        !cluster
            .selected_namespaces()
            .await
            .contains(&TEAM.to_owned())
    );

    cluster
        .label_namespace(TEAM, json!({POOL_LABEL: "cloud"}))
        .await;
    wait_placed(&cluster.env, TEAM, "cloud").await;
    cluster.wait_selected(TEAM, true).await;
    let created = cluster.admit(TEAM, &pod("app", json!({}))).await;
    assert_eq!(
        created.metadata.annotations.unwrap()["poolkeeper.io/placement"],
        r#"{"pool":"cloud","binding":"namespaceLabel","mode":"enforce","constraints":"judge"}"#
    );
    let node = scheduled_node(&cluster.env, TEAM, "app").await;
    assert!(
        CLOUD_NODES.contains(&node.as_str()),
        "scheduled onto {node}"
    );
    let status = cluster
        .deny(TEAM, &pod("stray", json!({"nodeName": EDGE_NODES[0]})))
        .await;
    assert!(
        status.message.contains("node pool \"cloud\""),
        "{}",
        status.message
    );

    // The mode label takes effect: warn admits what enforce denies.
    cluster
        .label_namespace(TEAM, json!({MODE_LABEL: "warn"}))
        .await;
    eventually("warn mode", TIMEOUT, || async {
        let stray = pod("stray", json!({"nodeName": EDGE_NODES[0]}));
        cluster.pods(TEAM).create(&dry_run(), &stray).await.ok()
    })
    .await
    .unwrap();

    // Unlabelled: the next Pod is left alone and the selectors drop it.
    cluster
        .label_namespace(TEAM, json!({POOL_LABEL: null, MODE_LABEL: null}))
        .await;
    eventually("team-a unbound", TIMEOUT, || async {
        cluster.placed_pools(TEAM).await.is_empty().then_some(())
    })
    .await
    .unwrap();
    cluster.wait_selected(TEAM, false).await;
    let unbound = cluster.admit(TEAM, &pod("after", json!({}))).await;
    assert!(node_affinity(&unbound).is_none(), "{:?}", unbound.spec);
    cluster.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_a_two_pool_binding_land_only_on_those_pools_nodes() {
    const SPREAD: &str = "team-spread";
    let cluster = setup(Webhooks::Both).await;
    cluster.env.create_namespace(SPREAD).await.unwrap();
    // The label form of a pool set: pools joined by '_'.
    cluster
        .label_namespace(SPREAD, json!({POOL_LABEL: "edge_cloud"}))
        .await;
    eventually("team-spread placed on both pools", TIMEOUT, || async {
        (cluster.placed_pools(SPREAD).await == ["cloud", "edge"]).then_some(())
    })
    .await
    .unwrap();
    // The ConfigMap form: shop-edge bound to both pools.
    let [_, cloud] = BINDINGS;
    write_policy(
        &cluster.client,
        &[(EDGE_NAMESPACE, "edge,cloud", "enforce"), cloud],
    )
    .await;
    eventually("shop-edge placed on both pools", TIMEOUT, || async {
        (cluster.placed_pools(EDGE_NAMESPACE).await == ["cloud", "edge"]).then_some(())
    })
    .await
    .unwrap();

    let mut nodes = Vec::new();
    for (namespace, prefix) in [(SPREAD, "label"), (EDGE_NAMESPACE, "config-map")] {
        for i in 0..6 {
            let name = format!("{prefix}-{i}");
            let created = cluster.admit(namespace, &pod(&name, json!({}))).await;
            // One Edge pool in the set: the edge toleration was added.
            let tolerations = created.spec.unwrap().tolerations.unwrap_or_default();
            assert!(
                tolerations
                    .iter()
                    .any(|t| t.key.as_deref() == Some("node-role.kubernetes.io/edge")),
                "{name}: {tolerations:?}"
            );
            nodes.push(scheduled_node(&cluster.env, namespace, &name).await);
        }
    }
    for node in &nodes {
        assert!(
            EDGE_NODES.contains(&node.as_str()) || CLOUD_NODES.contains(&node.as_str()),
            "a Pod of a two-pool binding ran on {node}: {nodes:?}"
        );
    }
    let status = cluster
        .deny(SPREAD, &pod("loose", json!({"nodeName": "loose-1"})))
        .await;
    assert!(
        status
            .message
            .contains(r#"node pools "cloud", "edge" but 1 node outside the pools"#),
        "{}",
        status.message
    );
    cluster.running.stop().await;
}

/// In a bound namespace a Pod's pool label may only narrow the binding: a
/// label naming a pool outside it is refused naming both, one naming a pool
/// of a two-pool binding places the Pod on that pool alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_label_narrows_its_namespace_binding_and_cannot_leave_it() {
    let cluster = setup(Webhooks::Both).await;
    let escape = labelled_pod("escape", json!({POOL_LABEL: "edge"}), json!({}));
    let status = cluster.deny(CLOUD_NAMESPACE, &escape).await;
    assert!(
        status.message.contains(
            "pod's label apps.openyurt.io/nodepool=edge names node pool \"edge\", but namespace \"shop-cloud\" is bound to node pool \"cloud\""
        ),
        "{}",
        status.message
    );

    let [_, cloud] = BINDINGS;
    write_policy(
        &cluster.client,
        &[(EDGE_NAMESPACE, "edge,cloud", "enforce"), cloud],
    )
    .await;
    eventually("shop-edge placed on both pools", TIMEOUT, || async {
        (cluster.placed_pools(EDGE_NAMESPACE).await == ["cloud", "edge"]).then_some(())
    })
    .await
    .unwrap();
    for i in 0..4 {
        let name = format!("narrowed-{i}");
        let narrowed = labelled_pod(&name, json!({POOL_LABEL: "edge"}), json!({}));
        let created = cluster.admit(EDGE_NAMESPACE, &narrowed).await;
        assert_eq!(pool_affinity(&created).as_deref(), Some("edge"), "{name}");
        let node = scheduled_node(&cluster.env, EDGE_NAMESPACE, &name).await;
        assert!(EDGE_NODES.contains(&node.as_str()), "{name} ran on {node}");
    }
    let status = cluster
        .deny(
            EDGE_NAMESPACE,
            &labelled_pod("elsewhere", json!({POOL_LABEL: "gpu"}), json!({})),
        )
        .await;
    assert!(
        status
            .message
            .contains(r#"but namespace "shop-edge" is bound to node pools "cloud", "edge""#),
        "{}",
        status.message
    );
    cluster.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_of_excluded_namespaces_and_conflicting_labels_are_refused_and_reported() {
    let cluster = setup(Webhooks::Both).await;

    // A label on kube-system binds nothing; the Namespace gets a Warning.
    cluster
        .label_namespace("kube-system", json!({POOL_LABEL: "cloud"}))
        .await;
    cluster.wait_rejected("excluded", 1).await;
    let warnings = wait_namespace_warnings(&cluster.client, "kube-system").await;
    assert_eq!(warnings[0].0, "BindingExcluded", "{warnings:?}");
    assert!(
        !cluster
            .selected_namespaces()
            .await
            .contains(&"kube-system".to_owned())
    );

    // A label that contradicts the ConfigMap: the ConfigMap's binding applies.
    cluster
        .label_namespace(CLOUD_NAMESPACE, json!({POOL_LABEL: "edge"}))
        .await;
    cluster.wait_rejected("conflict", 1).await;
    let warnings = wait_namespace_warnings(&cluster.client, CLOUD_NAMESPACE).await;
    assert_eq!(warnings[0].0, "BindingConflict");
    assert!(
        warnings[0]
            .1
            .contains("bound by the policy ConfigMap to node pool \"cloud\""),
        "{warnings:?}"
    );
    assert_eq!(cluster.placed_pools(CLOUD_NAMESPACE).await, ["cloud"]);

    // Removing the labels clears both.
    for namespace in ["kube-system", CLOUD_NAMESPACE] {
        cluster
            .label_namespace(namespace, json!({POOL_LABEL: null}))
            .await;
    }
    cluster.wait_rejected("excluded", 0).await;
    cluster.wait_rejected("conflict", 0).await;

    // A ConfigMap binding of kube-system makes the policy invalid: Pods of
    // bound namespaces are refused with the reason until it is fixed.
    let [edge, cloud] = BINDINGS;
    write_policy(
        &cluster.client,
        &[edge, cloud, ("kube-system", "cloud", "enforce")],
    )
    .await;
    let denial = eventually("the invalid policy refused", TIMEOUT, || async {
        match cluster
            .pods(EDGE_NAMESPACE)
            .create(&dry_run(), &plain_pod("p"))
            .await
        {
            Err(kube::Error::Api(status)) => Some(status.message),
            _ => None,
        }
    })
    .await
    .unwrap();
    assert!(
        denial.contains("\"kube-system\" is excluded from placement"),
        "{denial}"
    );
    write_policy(&cluster.client, &BINDINGS).await;
    wait_placed(&cluster.env, EDGE_NAMESPACE, "edge").await;
    cluster.running.stop().await;
}

/// Without the webhook, the audit still applies the label bindings: the
/// ones that take no effect are reported all the same (Warning Event and
/// metric), by the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_only_installation_reports_a_conflicting_namespace_label() {
    const SHOP: &str = "shop";
    let env = control_plane(TestEnv::builder(), &[CONTROLLER_NAMESPACE, SHOP]).await;
    let client = env.client();
    write_policy(&client, &[(SHOP, "cloud", "enforce")]).await;
    let cert_dir = tempfile::tempdir().unwrap();
    let mut config = test_config(CONTROLLER_NAMESPACE, cert_dir.path());
    config.machine_classes.enabled = false;
    config.webhook.enabled = false;
    assert!(!config.audit.interval.is_zero(), "the audit runs");
    let running = Running::start(&config, &env).await;
    running.wait_ready().await;
    assert_eq!(running.webhook, None);

    label_namespace(&client, SHOP, json!({POOL_LABEL: "edge"})).await;
    wait_rejected(&running, "conflict", 1).await;
    let warnings = wait_namespace_warnings(&client, SHOP).await;
    assert_eq!(warnings[0].0, "BindingConflict", "{warnings:?}");
    assert!(
        warnings[0]
            .1
            .contains("bound by the policy ConfigMap to node pool \"cloud\""),
        "{warnings:?}"
    );

    label_namespace(&client, SHOP, json!({POOL_LABEL: null})).await;
    wait_rejected(&running, "conflict", 0).await;
    running.stop().await;
}
