//! Blast radius (DESIGN §11): with `failurePolicy: Fail`, a webhook blocks
//! every Pod it matches while no replica answers, so poolkeeper's match only
//! the Pods it can place. The whole controller runs against a real
//! kube-apiserver and kube-scheduler with the webhook configurations of
//! `deploy/webhooks`; the leader keeps their selectors in step with the
//! bindings.
//!
//! | node | pool |
//! |---|---|
//! | `cloud-1`, `cloud-2` | `cloud` (type Cloud) |
//! | `loose-1` | none |
//!
//! `shop` is bound to `cloud`; `plain` and `shop-new` are bound to nothing
//! until the test binds `shop-new`. The operator excludes `batch` from
//! placement (`placement.excludedNamespaces`, besides the defaults).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use poolkeeper_api::NodePoolType;
use poolkeeper_config::Config;
use poolkeeper_testenv::TestEnv;
use serde_json::{Value, json};

use crate::harness::register_webhooks_at_a_fixed_port;
use crate::harness::{
    Running, TIMEOUT, control_plane, scheduled_node, serving_cert, test_config, wait_placed,
};
use crate::objects::{
    CONTROLLER_NAMESPACE, POOL_LABEL, create_pool, labelled_pod, plain_pod, pool_affinity,
    write_policy,
};

const BOUND_NAMESPACE: &str = "shop";
const UNBOUND_NAMESPACE: &str = "plain";
const NEW_NAMESPACE: &str = "shop-new";
/// Added to `placement.excludedNamespaces` by the operator.
const EXCLUDED_NAMESPACE: &str = "batch";
const CLOUD_NODES: [&str; 2] = ["cloud-1", "cloud-2"];
const CONFIGURATION: &str = "poolkeeper";
const MUTATE_BOUND: &str = "mutate-pods.poolkeeper.io";
const MUTATE_LABELLED: &str = "mutate-labelled-pods.poolkeeper.io";

struct Cluster {
    env: TestEnv,
    client: Client,
    config: Config,
    _cert_dir: tempfile::TempDir,
}

async fn setup() -> Cluster {
    let env = control_plane(
        TestEnv::builder().scheduler(true),
        &[
            CONTROLLER_NAMESPACE,
            BOUND_NAMESPACE,
            UNBOUND_NAMESPACE,
            NEW_NAMESPACE,
            EXCLUDED_NAMESPACE,
        ],
    )
    .await;
    let client = env.client();
    create_pool(&env, "cloud", NodePoolType::Cloud, &CLOUD_NODES).await;
    env.ready_node("loose-1", BTreeMap::new(), Vec::new())
        .await
        .unwrap();
    write_bindings(&client, &[BOUND_NAMESPACE]).await;

    let (cert_dir, cert) = serving_cert();
    let mut config = test_config(CONTROLLER_NAMESPACE, cert_dir.path());
    config.machine_classes.enabled = false;
    config
        .placement
        .excluded_namespaces
        .push(EXCLUDED_NAMESPACE.to_owned());
    // A fixed port, so that a restarted controller is where the
    // configurations point.
    register_webhooks_at_a_fixed_port(&env, &mut config, &cert.ca_pem).await;
    Cluster {
        env,
        client,
        config,
        _cert_dir: cert_dir,
    }
}

/// The placement ConfigMap binding each of `namespaces` to `cloud`.
async fn write_bindings(client: &Client, namespaces: &[&str]) {
    let bindings: Vec<_> = namespaces
        .iter()
        .map(|namespace| (*namespace, "cloud", "enforce"))
        .collect();
    write_policy(client, &bindings).await;
}

/// The namespaces listed by the bound-namespaces entry of both
/// configurations (mutating, validating).
async fn listed_namespaces(client: &Client) -> (Vec<String>, Vec<String>) {
    entry_namespaces(client, "pods").await
}

/// The namespaces the pool-labelled entry of both configurations leaves
/// out (mutating, validating).
async fn left_out_namespaces(client: &Client) -> (Vec<String>, Vec<String>) {
    entry_namespaces(client, "labelled-pods").await
}

/// The namespaces of the `namespaceSelector` of the entry named
/// `{mutate,validate}-{entry}.poolkeeper.io` in both configurations.
async fn entry_namespaces(client: &Client, entry: &str) -> (Vec<String>, Vec<String>) {
    let listed = |webhooks: Value, prefix: &str| -> Vec<String> {
        webhooks
            .as_array()
            .into_iter()
            .flatten()
            .find(|found| found["name"] == format!("{prefix}-{entry}.poolkeeper.io"))
            .and_then(|webhook| {
                serde_json::from_value(
                    webhook["namespaceSelector"]["matchExpressions"][0]["values"].clone(),
                )
                .ok()
            })
            .unwrap_or_default()
    };
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(CONFIGURATION)
        .await
        .unwrap();
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(CONFIGURATION)
        .await
        .unwrap();
    (
        listed(serde_json::to_value(mutating.webhooks).unwrap(), "mutate"),
        listed(
            serde_json::to_value(validating.webhooks).unwrap(),
            "validate",
        ),
    )
}

/// Polls every 20 ms until both configurations list exactly `namespaces`;
/// the time it took.
async fn wait_listed(client: &Client, namespaces: &[&str]) -> Duration {
    let started = Instant::now();
    let expected: Vec<String> = namespaces.iter().map(|ns| (*ns).to_owned()).collect();
    loop {
        let (mutating, validating) = listed_namespaces(client).await;
        if mutating == expected && validating == expected {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "the webhook selectors list {mutating:?} / {validating:?}, not {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls every 20 ms until the pool-labelled entries of both
/// configurations leave out exactly `namespaces`, as the leader writes them.
async fn wait_left_out(client: &Client, namespaces: &[&str]) {
    let started = Instant::now();
    let expected: Vec<String> = namespaces.iter().map(|ns| (*ns).to_owned()).collect();
    loop {
        let (mutating, validating) = left_out_namespaces(client).await;
        if mutating == expected && validating == expected {
            return;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "the pool-labelled entries leave out {mutating:?} / {validating:?}, not {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the apiserver (which loads configurations asynchronously)
/// has poolkeeper place a dry-run Pod of `namespace`; the time it took.
async fn time_to_placed(cluster: &Cluster, namespace: &str) -> Duration {
    let started = Instant::now();
    wait_placed(&cluster.env, namespace, "cloud").await;
    started.elapsed()
}

/// A create the apiserver must refuse because the webhook `entry` does not
/// answer (fail closed).
async fn assert_refused(client: &Client, namespace: &str, pod: &Pod, entry: &str) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    match Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), pod)
        .await
    {
        Err(kube::Error::Api(status)) => assert!(
            status
                .message
                .contains(&format!("failed calling webhook \"{entry}\"")),
            "{namespace}/{name}: refused, but not for {entry}: {status:?}"
        ),
        Err(other) => panic!("{namespace}/{name}: expected the apiserver's refusal, got {other}"),
        Ok(_) => panic!("{namespace}/{name} was created while no webhook answers"),
    }
}

/// DESIGN §11 "Blast radius": once the leader has set the selectors, every
/// replica is stopped. Pods of an unbound namespace, and pool-labelled Pods
/// of the excluded namespaces, are still created at once; Pods poolkeeper
/// would place (bound namespace, pool label) are refused, failing closed. Restarted, the controller follows a new binding
/// within moments and its Pods are placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_pods_poolkeeper_places_depend_on_it() {
    let cluster = setup().await;
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    wait_listed(&cluster.client, &[BOUND_NAMESPACE]).await;
    // The placement policy's exclusions, the operator's among them, and the
    // bound namespace, as the leader wrote them: `deploy/webhooks` ships no
    // selectors.
    wait_left_out(
        &cluster.client,
        &[
            EXCLUDED_NAMESPACE,
            "kube-node-lease",
            "kube-public",
            "kube-system",
            CONTROLLER_NAMESPACE,
            BOUND_NAMESPACE,
        ],
    )
    .await;
    time_to_placed(&cluster, BOUND_NAMESPACE).await;
    running.stop().await;

    let plain = Api::<Pod>::namespaced(cluster.client.clone(), UNBOUND_NAMESPACE);
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let one = Instant::now();
        let created = plain
            .create(&PostParams::default(), &plain_pod(&format!("plain-{i}")))
            .await
            .unwrap_or_else(|e| panic!("plain-{i} while poolkeeper is down: {e}"));
        slowest = slowest.max(one.elapsed());
        assert_eq!(pool_affinity(&created), None);
    }
    let total = started.elapsed();
    println!(
        "poolkeeper down: 20 Pods of an unbound namespace created in {total:?} (slowest {slowest:?})"
    );
    // Far below the webhooks' 5 s timeout: no webhook was called.
    assert!(
        slowest < Duration::from_secs(2),
        "slowest create {slowest:?}"
    );

    let labelled = json!({POOL_LABEL: "cloud"});
    assert_refused(
        &cluster.client,
        BOUND_NAMESPACE,
        &plain_pod("bound"),
        MUTATE_BOUND,
    )
    .await;
    assert_refused(
        &cluster.client,
        BOUND_NAMESPACE,
        &labelled_pod("bound-labelled", labelled.clone(), json!({})),
        MUTATE_BOUND,
    )
    .await;
    assert_refused(
        &cluster.client,
        UNBOUND_NAMESPACE,
        &labelled_pod("labelled", labelled.clone(), json!({})),
        MUTATE_LABELLED,
    )
    .await;
    // The namespaces poolkeeper never places (placement.excludedNamespaces,
    // the operator's addition among them, and its own) never wait for it:
    // their pool-labelled Pods are created, unplaced.
    for namespace in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        EXCLUDED_NAMESPACE,
        CONTROLLER_NAMESPACE,
    ] {
        let created = Api::<Pod>::namespaced(cluster.client.clone(), namespace)
            .create(
                &PostParams::default(),
                &labelled_pod("labelled", labelled.clone(), json!({})),
            )
            .await
            .unwrap_or_else(|e| panic!("a labelled Pod in {namespace}: {e}"));
        assert_eq!(pool_affinity(&created), None, "{namespace}");
    }

    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    time_to_placed(&cluster, BOUND_NAMESPACE).await;
    let written = Instant::now();
    write_bindings(&cluster.client, &[BOUND_NAMESPACE, NEW_NAMESPACE]).await;
    let followed = wait_listed(&cluster.client, &[BOUND_NAMESPACE, NEW_NAMESPACE]).await;
    let in_effect = time_to_placed(&cluster, NEW_NAMESPACE).await;
    println!(
        "new binding: selectors followed in {followed:?}; the apiserver called the webhooks \
         {in_effect:?} later; Pods placed {:?} after the ConfigMap write",
        written.elapsed()
    );
    assert!(
        followed < Duration::from_secs(5),
        "selectors followed in {followed:?}"
    );

    let created = Api::<Pod>::namespaced(cluster.client.clone(), NEW_NAMESPACE)
        .create(&PostParams::default(), &plain_pod("app"))
        .await
        .unwrap();
    assert_eq!(pool_affinity(&created).as_deref(), Some("cloud"));
    let node = scheduled_node(&cluster.env, NEW_NAMESPACE, "app").await;
    assert!(
        CLOUD_NODES.contains(&node.as_str()),
        "scheduled onto {node}"
    );
    running.stop().await;
}
