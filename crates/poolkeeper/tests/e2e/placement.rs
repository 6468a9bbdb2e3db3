//! NodePool placement end to end: the whole controller against a real
//! kube-apiserver and kube-scheduler, its webhooks registered from
//! `deploy/webhooks`, Pods created through the apiserver (DESIGN §7, §10).
//!
//! Every test starts from the same cluster (see [`setup`]):
//!
//! | node | pool | taint |
//! |---|---|---|
//! | `edge-1`, `edge-2` | `edge` (type Edge) | `node-role.kubernetes.io/edge:NoSchedule` |
//! | `cloud-1`, `cloud-2` | `cloud` (type Cloud) | - |
//! | `loose-1` | none | - |
//!
//! The placement ConfigMap binds `shop-edge` to `edge` and `shop-cloud` to
//! `cloud` and asks for the edge toleration; `plain` is bound to nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use kube::api::PostParams;
use kube::{Api, Client};
use poolkeeper_api::NodePoolType;
use poolkeeper_bus::WebhookKind;
use poolkeeper_supervisor::error_chain;
use poolkeeper_testenv::{Process, TestEnv, WebhookCert, WebhookRegistration, eventually};
use serde_json::{Value, json};

use crate::harness::{
    Running, TIMEOUT, control_plane, deploy_webhooks, scheduled_node, serving_cert, test_config,
    wait_placed,
};
use crate::objects::{
    CONTROLLER_NAMESPACE, EDGE_TAINT, MUTATE_OVER_TLS_UID, POOL_LABEL, create_pool, dry_run,
    labelled_pod, mutate_over_tls, node_affinity, pinned, plain_pod, pod, pool_affinity,
    write_policy,
};

pub(crate) const EDGE_NAMESPACE: &str = "shop-edge";
pub(crate) const CLOUD_NAMESPACE: &str = "shop-cloud";
const UNBOUND_NAMESPACE: &str = "plain";
/// Excluded by the webhooks' namespaceSelector: shows what the apiserver
/// makes of a Pod without poolkeeper.
const UNWEBHOOKED_NAMESPACE: &str = "kube-system";
pub(crate) const EDGE_NODES: [&str; 2] = ["edge-1", "edge-2"];
pub(crate) const CLOUD_NODES: [&str; 2] = ["cloud-1", "cloud-2"];
const UNPOOLED_NODE: &str = "loose-1";
const VALIDATING_WEBHOOK: &str = "validate-pods.poolkeeper.io";

/// Which of the webhook configurations of `deploy/webhooks` the apiserver gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Webhooks {
    Both,
    ValidatingOnly,
}

/// A cluster with pools, nodes, the placement policy and poolkeeper running
/// with its webhooks registered and in effect.
pub(crate) struct Cluster {
    // Declaration order is drop order: the controller stops before the
    // control plane it talks to.
    pub(crate) running: Running,
    pub(crate) env: TestEnv,
    pub(crate) client: Client,
    /// The webhook server's `webhook.certDir`.
    cert_dir: tempfile::TempDir,
    cert: WebhookCert,
    port: u16,
}

/// The bindings of every test's cluster.
pub(crate) const BINDINGS: [(&str, &str, &str); 2] = [
    (EDGE_NAMESPACE, "edge", "enforce"),
    (CLOUD_NAMESPACE, "cloud", "enforce"),
];

pub(crate) async fn setup(webhooks: Webhooks) -> Cluster {
    // A cluster as users have it: kube-controller-manager beside the scheduler.
    let env = control_plane(
        TestEnv::builder().scheduler(true).controller_manager(true),
        &[
            CONTROLLER_NAMESPACE,
            EDGE_NAMESPACE,
            CLOUD_NAMESPACE,
            UNBOUND_NAMESPACE,
        ],
    )
    .await;
    let client = env.client();
    create_pool(&env, "edge", NodePoolType::Edge, &EDGE_NODES).await;
    create_pool(&env, "cloud", NodePoolType::Cloud, &CLOUD_NODES).await;
    env.ready_node(UNPOOLED_NODE, BTreeMap::new(), Vec::new())
        .await
        .unwrap();
    write_policy(&client, &BINDINGS).await;

    let (cert_dir, cert) = serving_cert();
    let mut config = test_config(CONTROLLER_NAMESPACE, cert_dir.path());
    config.machine_classes.enabled = false;
    let running = Running::start(&config, &env).await;
    running.wait_ready().await;
    let addr = running.webhook.expect("the webhook is enabled");

    let cluster = Cluster {
        running,
        env,
        client,
        cert_dir,
        cert,
        port: addr.port(),
    };
    cluster
        .env
        .register_webhooks(registration(cluster.port, &cluster.cert.ca_pem, webhooks))
        .await
        .unwrap();
    cluster.wait_webhooks_in_effect(webhooks).await;
    cluster
}

/// The configurations of `deploy/webhooks`, pointed at the local server.
fn registration(port: u16, ca_pem: &str, webhooks: Webhooks) -> WebhookRegistration {
    let mut registration = deploy_webhooks(port, ca_pem);
    assert_eq!(
        registration.mutating.len(),
        1,
        "deploy/webhooks/mutating.yaml"
    );
    assert_eq!(
        registration.validating.len(),
        1,
        "deploy/webhooks/validating.yaml"
    );
    if webhooks == Webhooks::ValidatingOnly {
        registration.mutating.clear();
    }
    registration
}

impl Cluster {
    pub(crate) fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn create(&self, namespace: &str, pod: &Pod) -> Result<Pod, kube::Error> {
        self.pods(namespace)
            .create(&PostParams::default(), pod)
            .await
    }

    /// Creates a Pod that must be admitted.
    pub(crate) async fn admit(&self, namespace: &str, pod: &Pod) -> Pod {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.create(namespace, pod)
            .await
            .unwrap_or_else(|e| panic!("pod {namespace}/{name} should be admitted: {e}"))
    }

    /// Creates a Pod that must be denied; returns the apiserver's status.
    pub(crate) async fn deny(&self, namespace: &str, pod: &Pod) -> kube::core::Status {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let status = match self.create(namespace, pod).await {
            Err(kube::Error::Api(status)) => *status,
            Err(other) => panic!("pod {namespace}/{name}: expected a denial, got {other}"),
            Ok(created) => panic!(
                "pod {namespace}/{name} should be denied, but was admitted with spec {}",
                serde_json::to_string(&created.spec).unwrap()
            ),
        };
        // A denied Pod is not stored.
        assert!(
            self.pods(namespace).get_opt(name).await.unwrap().is_none(),
            "denied pod {namespace}/{name} was stored"
        );
        status
    }

    /// What the apiserver makes of `pod` without poolkeeper: a dry-run
    /// create in a namespace the webhooks do not apply to.
    async fn without_webhooks(&self, pod: &Pod) -> Pod {
        self.pods(UNWEBHOOKED_NAMESPACE)
            .create(&dry_run(), pod)
            .await
            .expect("a dry-run create without webhooks")
    }

    /// Waits until the apiserver calls the registered webhooks (it loads
    /// webhook configurations asynchronously): mutation shows in a dry-run
    /// create, validation in a dry-run denial.
    async fn wait_webhooks_in_effect(&self, webhooks: Webhooks) {
        let pods = self.pods(EDGE_NAMESPACE);
        let plain = plain_pod("probe");
        let foreign = pinned("probe", CLOUD_NODES[0]);
        eventually("the webhooks in effect", TIMEOUT, || async {
            let mutated = match webhooks {
                Webhooks::Both => {
                    let created = pods.create(&dry_run(), &plain).await.ok()?;
                    pool_affinity(&created) == Some("edge".to_owned())
                }
                Webhooks::ValidatingOnly => true,
            };
            let validated = match pods.create(&dry_run(), &foreign).await {
                Err(kube::Error::Api(status)) => status.message.contains(VALIDATING_WEBHOOK),
                _ => false,
            };
            (mutated && validated).then_some(())
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}\nkube-apiserver log:\n{}",
                self.env.log_tail(Process::ApiServer, 30)
            )
        });
    }
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.tolerations.as_deref())
        .unwrap_or_default()
}

/// The tolerations of the edge taint's key.
fn edge_tolerations(pod: &Pod) -> Vec<&Toleration> {
    tolerations(pod)
        .iter()
        .filter(|t| t.key.as_deref() == Some(EDGE_TAINT))
        .collect()
}

/// Exactly the toleration the policy asks for, once.
fn assert_edge_toleration(pod: &Pod) {
    let found = edge_tolerations(pod);
    let expected = Toleration {
        key: Some(EDGE_TAINT.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoSchedule".to_owned()),
        ..Toleration::default()
    };
    assert_eq!(found, [&expected], "tolerations of {:?}", pod.metadata.name);
}

fn pool_nodes(pool: &str) -> &'static [&'static str] {
    match pool {
        "edge" => &EDGE_NODES,
        "cloud" => &CLOUD_NODES,
        other => panic!("unknown pool {other}"),
    }
}

/// DESIGN §7 mutate + §10: a plain Pod in a bound namespace comes back
/// from the apiserver with the pool's required node affinity (and the edge
/// toleration on an Edge pool), and kube-scheduler binds it inside the
/// pool — for 20 Pods over both pools, none lands outside (the unpooled,
/// untainted node would attract Cloud pods that lacked the affinity; Edge
/// pods without the toleration would stay unschedulable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_pods_are_pinned_to_their_pool_and_scheduled_inside_it() {
    let cluster = setup(Webhooks::Both).await;

    let mut created = Vec::new();
    for i in 0..20 {
        let (namespace, pool) = if i % 2 == 0 {
            (EDGE_NAMESPACE, "edge")
        } else {
            (CLOUD_NAMESPACE, "cloud")
        };
        let name = format!("web-{i}");
        let pod = cluster.admit(namespace, &pod(&name, json!({}))).await;
        assert_eq!(
            pool_affinity(&pod).as_deref(),
            Some(pool),
            "node affinity of {namespace}/{name}: {:?}",
            node_affinity(&pod)
        );
        if pool == "edge" {
            assert_edge_toleration(&pod);
        } else {
            assert!(
                edge_tolerations(&pod).is_empty(),
                "a Cloud pool needs no edge toleration: {:?}",
                tolerations(&pod)
            );
        }
        // What the apiserver returned is what it stored (the scheduler
        // may have set nodeName since).
        let stored = cluster.pods(namespace).get(&name).await.unwrap();
        let stored_spec = stored.spec.as_ref().unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(stored_spec.affinity, spec.affinity);
        assert_eq!(stored_spec.tolerations, spec.tolerations);
        created.push((namespace, name, pool));
    }

    let mut placements = Vec::new();
    for (namespace, name, pool) in &created {
        let node = scheduled_node(&cluster.env, namespace, name).await;
        placements.push(format!("{namespace}/{name} -> {node}"));
        assert!(
            pool_nodes(pool).contains(&node.as_str()),
            "{namespace}/{name} of pool {pool} was scheduled onto {node}, outside the pool \
             (all placements so far: {placements:?})"
        );
    }

    cluster.running.stop().await;
}

/// DESIGN §7 validate: node constraints that could put a Pod outside its
/// pool are refused with a message naming the pool and the offending
/// nodes; constraints inside the pool are admitted without an added
/// affinity and honoured by the scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_constraints_reaching_outside_the_pool_are_rejected() {
    let cluster = setup(Webhooks::Both).await;

    // A nodeSelector picking a node of another pool.
    let status = cluster
        .deny(
            EDGE_NAMESPACE,
            &pod(
                "foreign-selector",
                json!({"nodeSelector": {"kubernetes.io/hostname": "cloud-1"}}),
            ),
        )
        .await;
    assert_eq!(status.code, 403, "{status:?}");
    for expected in [
        VALIDATING_WEBHOOK,
        r#"pod is bound to node pool "edge""#,
        "1 node outside the pool matches its nodeSelector: cloud-1",
    ] {
        assert!(
            status.message.contains(expected),
            "{expected:?} not in {:?}",
            status.message
        );
    }

    // A nodeSelector matching nodes inside and outside the pool, including
    // one in no pool at all.
    let status = cluster
        .deny(
            CLOUD_NAMESPACE,
            &pod(
                "wide-selector",
                json!({"nodeSelector": {"kubernetes.io/os": "linux"}}),
            ),
        )
        .await;
    assert!(
        status.message.contains(
            r#"pod is bound to node pool "cloud" but 3 nodes outside the pool match its nodeSelector: edge-1, edge-2, loose-1"#
        ),
        "{:?}",
        status.message
    );

    // nodeName of a foreign node bypasses the scheduler: refused too.
    let status = cluster
        .deny(
            EDGE_NAMESPACE,
            &pod("foreign-node", json!({"nodeName": "cloud-2"})),
        )
        .await;
    assert_eq!(status.code, 403, "{status:?}");
    for expected in [r#"node pool "edge""#, r#"nodeName "cloud-2""#, "cloud-2"] {
        assert!(
            status.message.contains(expected),
            "{expected:?} not in {:?}",
            status.message
        );
    }

    // A nodeSelector matching only the pool's nodes: admitted exactly as
    // the apiserver would have it without poolkeeper (Cloud pool: nothing
    // to add), and scheduled inside the pool.
    let in_pool = pod(
        "pool-selector",
        json!({"nodeSelector": {POOL_LABEL: "cloud"}}),
    );
    let created = cluster.admit(CLOUD_NAMESPACE, &in_pool).await;
    assert!(node_affinity(&created).is_none(), "{:?}", created.spec);
    assert_eq!(
        created.spec,
        cluster.without_webhooks(&in_pool).await.spec,
        "admitted unchanged"
    );
    let node = scheduled_node(&cluster.env, CLOUD_NAMESPACE, "pool-selector").await;
    assert!(
        CLOUD_NODES.contains(&node.as_str()),
        "scheduled onto {node}"
    );

    // On the Edge pool a selector of one pool node: no affinity added, the
    // edge toleration is, and the scheduler honours the selector.
    let created = cluster
        .admit(
            EDGE_NAMESPACE,
            &pod(
                "host-selector",
                json!({"nodeSelector": {"kubernetes.io/hostname": "edge-2"}}),
            ),
        )
        .await;
    assert!(node_affinity(&created).is_none(), "{:?}", created.spec);
    assert_edge_toleration(&created);
    assert_eq!(
        scheduled_node(&cluster.env, EDGE_NAMESPACE, "host-selector").await,
        "edge-2"
    );

    // nodeName of a pool node is admitted as it is.
    let created = cluster
        .admit(
            EDGE_NAMESPACE,
            &pod("pool-node", json!({"nodeName": "edge-1"})),
        )
        .await;
    assert!(node_affinity(&created).is_none(), "{:?}", created.spec);
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("edge-1")
    );

    cluster.running.stop().await;
}

/// DESIGN §7 validate on its own (no mutating webhook registered): a Pod
/// for an Edge pool that does not tolerate the edge taint is refused even
/// when its selector stays in the pool; with the toleration (or one that
/// tolerates everything) and a pool-matching selector it is admitted as
/// written and scheduled onto the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_alone_requires_edge_tolerations_and_pool_constraints() {
    let cluster = setup(Webhooks::ValidatingOnly).await;
    let pool_selector = json!({POOL_LABEL: "edge"});
    let toleration = json!({"key": EDGE_TAINT, "operator": "Exists", "effect": "NoSchedule"});

    // No toleration: refused, whatever the selector.
    for (name, spec) in [
        ("bare", json!({})),
        ("selector-only", json!({"nodeSelector": pool_selector})),
    ] {
        let status = cluster.deny(EDGE_NAMESPACE, &pod(name, spec)).await;
        assert_eq!(status.code, 403, "{status:?}");
        for expected in [
            VALIDATING_WEBHOOK,
            "pod must tolerate {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}",
            r#"to run on edge node pool "edge""#,
        ] {
            assert!(
                status.message.contains(expected),
                "{name}: {expected:?} not in {:?}",
                status.message
            );
        }
    }

    // The toleration but no node constraint: nothing keeps it in the pool.
    let status = cluster
        .deny(
            EDGE_NAMESPACE,
            &pod("toleration-only", json!({"tolerations": [toleration]})),
        )
        .await;
    assert!(
        status.message.contains(
            r#"pod is bound to node pool "edge" but has no node constraints, so it may be scheduled onto 3 nodes outside the pool: cloud-1, cloud-2, loose-1"#
        ),
        "{:?}",
        status.message
    );

    // Toleration and pool selector: admitted unchanged, scheduled in the pool.
    let created = cluster
        .admit(
            EDGE_NAMESPACE,
            &pod(
                "tolerating",
                json!({"nodeSelector": pool_selector, "tolerations": [toleration]}),
            ),
        )
        .await;
    assert!(node_affinity(&created).is_none(), "no mutation registered");
    assert_edge_toleration(&created);
    let node = scheduled_node(&cluster.env, EDGE_NAMESPACE, "tolerating").await;
    assert!(EDGE_NODES.contains(&node.as_str()), "scheduled onto {node}");

    // Kubernetes' toleration semantics: an empty key with Exists tolerates
    // every taint.
    let created = cluster
        .admit(
            EDGE_NAMESPACE,
            &pod(
                "tolerates-all",
                json!({
                    "nodeSelector": {"kubernetes.io/hostname": "edge-2"},
                    "tolerations": [{"operator": "Exists"}],
                }),
            ),
        )
        .await;
    assert!(edge_tolerations(&created).is_empty());
    assert_eq!(
        scheduled_node(&cluster.env, EDGE_NAMESPACE, "tolerates-all").await,
        "edge-2"
    );

    // A Cloud pool needs no toleration.
    cluster
        .admit(
            CLOUD_NAMESPACE,
            &pod("cloud", json!({"nodeSelector": {POOL_LABEL: "cloud"}})),
        )
        .await;

    cluster.running.stop().await;
}

/// DESIGN §4/§7: NodePools, Nodes and the placement ConfigMap are watched,
/// so a new pool and a new binding apply to the next Pods without a
/// restart, and a removed binding stops applying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_pools_and_bindings_take_effect_without_restart() {
    const LAB_NAMESPACE: &str = "shop-lab";
    const LAB_NODES: [&str; 2] = ["lab-1", "lab-2"];
    let cluster = setup(Webhooks::Both).await;
    cluster.env.create_namespace(LAB_NAMESPACE).await.unwrap();

    // Not bound yet: unchanged.
    let before = cluster
        .admit(LAB_NAMESPACE, &pod("before", json!({})))
        .await;
    assert!(node_affinity(&before).is_none(), "{:?}", before.spec);

    create_pool(&cluster.env, "lab", NodePoolType::Cloud, &LAB_NODES).await;
    let [edge, cloud] = BINDINGS;
    let lab = (LAB_NAMESPACE, "lab", "enforce");
    write_policy(&cluster.client, &[edge, cloud, lab]).await;

    // The watchers bring pool, nodes and policy into the index: a dry run
    // shows when mutation sees them.
    wait_placed(&cluster.env, LAB_NAMESPACE, "lab").await;

    for i in 0..4 {
        let name = format!("lab-app-{i}");
        let created = cluster.admit(LAB_NAMESPACE, &pod(&name, json!({}))).await;
        assert_eq!(pool_affinity(&created).as_deref(), Some("lab"));
        assert!(edge_tolerations(&created).is_empty(), "lab is a Cloud pool");
    }
    for i in 0..4 {
        let name = format!("lab-app-{i}");
        let node = scheduled_node(&cluster.env, LAB_NAMESPACE, &name).await;
        assert!(
            LAB_NODES.contains(&node.as_str()),
            "{name} scheduled onto {node}, outside pool lab"
        );
    }
    // Selecting a node of the new pool from another pool is refused.
    let status = cluster
        .deny(
            CLOUD_NAMESPACE,
            &pod(
                "to-lab",
                json!({"nodeSelector": {"kubernetes.io/hostname": "lab-1"}}),
            ),
        )
        .await;
    assert!(
        status.message.contains(
            r#"node pool "cloud" but 1 node outside the pool matches its nodeSelector: lab-1"#
        ),
        "{:?}",
        status.message
    );

    // The other bindings still hold.
    let still_edge = cluster
        .admit(EDGE_NAMESPACE, &pod("still-edge", json!({})))
        .await;
    assert_eq!(pool_affinity(&still_edge).as_deref(), Some("edge"));

    // Unbinding shop-cloud applies as well.
    write_policy(&cluster.client, &[edge, lab]).await;
    let cloud_pods = cluster.pods(CLOUD_NAMESPACE);
    let probe = plain_pod("probe");
    eventually("shop-cloud unbound", TIMEOUT, || async {
        let created = cloud_pods.create(&dry_run(), &probe).await.ok()?;
        node_affinity(&created).is_none().then_some(())
    })
    .await
    .unwrap();
    let unbound = cluster
        .admit(CLOUD_NAMESPACE, &pod("unbound-now", json!({})))
        .await;
    assert!(node_affinity(&unbound).is_none(), "{:?}", unbound.spec);

    cluster.running.stop().await;
}

/// DESIGN §7 and §11: Pods of namespaces bound to no pool are admitted
/// unchanged, whatever their node constraints, and never reach poolkeeper
/// (the webhook selectors match only bound namespaces and the pool label)
/// — unless the Pod names its pool by label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_in_unbound_namespaces_are_admitted_unchanged() {
    let mut cluster = setup(Webhooks::Both).await;

    let plain = pod("plain", json!({}));
    cluster.running.admission_decisions();
    let created = cluster.admit(UNBOUND_NAMESPACE, &plain).await;
    assert!(node_affinity(&created).is_none(), "{:?}", created.spec);
    assert!(edge_tolerations(&created).is_empty());
    assert_eq!(
        created.spec,
        cluster.without_webhooks(&plain).await.spec,
        "admitted unchanged"
    );

    // Node constraints are not checked against any pool.
    for (name, spec, node) in [
        ("on-edge", json!({"nodeName": "edge-1"}), "edge-1"),
        (
            "on-loose",
            json!({"nodeSelector": {"kubernetes.io/hostname": UNPOOLED_NODE}}),
            UNPOOLED_NODE,
        ),
    ] {
        let constrained = pod(name, spec);
        let created = cluster.admit(UNBOUND_NAMESPACE, &constrained).await;
        assert_eq!(
            created.spec,
            cluster.without_webhooks(&constrained).await.spec,
            "{name} admitted unchanged"
        );
        assert_eq!(
            scheduled_node(&cluster.env, UNBOUND_NAMESPACE, name).await,
            node
        );
    }

    // A Pod carrying the pool label is bound by it, namespace or not. Its
    // decisions are the first since the unlabelled Pods: none of those was
    // sent to the webhooks.
    let created = cluster
        .admit(
            UNBOUND_NAMESPACE,
            &labelled_pod("labelled", json!({POOL_LABEL: "cloud"}), json!({})),
        )
        .await;
    let decisions = cluster.running.admission_decisions();
    let webhooks: Vec<_> = decisions.iter().map(|(webhook, ..)| *webhook).collect();
    assert_eq!(
        webhooks,
        [WebhookKind::Mutate, WebhookKind::Validate],
        "only the labelled Pod reached poolkeeper: {decisions:?}"
    );
    assert_eq!(pool_affinity(&created).as_deref(), Some("cloud"));
    let node = scheduled_node(&cluster.env, UNBOUND_NAMESPACE, "labelled").await;
    assert!(
        CLOUD_NODES.contains(&node.as_str()),
        "scheduled onto {node}"
    );

    cluster.running.stop().await;
}

/// DESIGN §7 server: the serving certificate is re-read from `certDir`
/// when it changes. A certificate from a new CA is written; the server
/// serves it (a TLS client trusting only
/// the new CA gets an answer, one trusting only the old CA is refused),
/// and once the webhooks carry the new caBundle the apiserver's Pod
/// creations are mutated again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_serving_certificate_is_served_and_trusted() {
    let cluster = setup(Webhooks::Both).await;
    let ca_files = tempfile::tempdir().unwrap();
    let old_ca = ca_files.path().join("old-ca.crt");
    std::fs::write(&old_ca, &cluster.cert.ca_pem).unwrap();

    // Before: the old CA verifies the server.
    let review = mutate_over_tls(cluster.port, &old_ca, EDGE_NAMESPACE)
        .await
        .expect("the server presents the first certificate");
    assert_mutated_review(&review);

    let rotated = WebhookCert::generate().unwrap();
    assert_ne!(rotated.ca_pem, cluster.cert.ca_pem);
    rotated.write_to_dir(cluster.cert_dir.path()).unwrap();
    let new_ca = ca_files.path().join("new-ca.crt");
    std::fs::write(&new_ca, &rotated.ca_pem).unwrap();

    // New connections get the new certificate once it is loaded.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let review = loop {
        match mutate_over_tls(cluster.port, &new_ca, EDGE_NAMESPACE).await {
            Ok(review) => break review,
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %error_chain(&error), "rotated certificate not served yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!(
                "the rotated certificate is not served: {}",
                error_chain(&error)
            ),
        }
    };
    assert_mutated_review(&review);
    let error = mutate_over_tls(cluster.port, &old_ca, EDGE_NAMESPACE)
        .await
        .expect_err("the old certificate is no longer served");
    let chain = error_chain(&error);
    assert!(
        !matches!(error, kube::Error::Api(_)) && chain.contains("invalid peer certificate"),
        "expected a certificate verification failure, got {chain}"
    );

    // The apiserver with the new caBundle: Pods are mutated and validated.
    cluster
        .env
        .register_webhooks(registration(cluster.port, &rotated.ca_pem, Webhooks::Both))
        .await
        .unwrap();
    cluster.wait_webhooks_in_effect(Webhooks::Both).await;
    let created = cluster
        .admit(EDGE_NAMESPACE, &pod("after-rotation", json!({})))
        .await;
    assert_eq!(pool_affinity(&created).as_deref(), Some("edge"));
    assert_edge_toleration(&created);
    let node = scheduled_node(&cluster.env, EDGE_NAMESPACE, "after-rotation").await;
    assert!(EDGE_NODES.contains(&node.as_str()), "scheduled onto {node}");

    cluster.running.stop().await;
}

fn assert_mutated_review(review: &Value) {
    let response = &review["response"];
    assert_eq!(response["uid"], MUTATE_OVER_TLS_UID, "{review}");
    assert_eq!(response["allowed"], true, "{review}");
    assert_eq!(response["patchType"], "JSONPatch", "{review}");
}
