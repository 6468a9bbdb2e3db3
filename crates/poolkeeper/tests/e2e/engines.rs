//! The CEL engine end to end (`placement.engine: cel`): the whole controller
//! against a real kube-apiserver, kube-scheduler and kube-controller-manager
//! with the webhook configurations of `deploy/webhooks`. The leader writes
//! the admission policies and the webhooks' routing; then every replica
//! stops, and the API server alone places the Pods it can decide.
//!
//! | node | pool |
//! |---|---|
//! | `edge-1` | `edge` (type Edge, tainted) |
//! | `cloud-1` | `cloud` (type Cloud) |
//!
//! `shop` is bound to `edge`.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::NodePoolType;
use poolkeeper_config::{Config, EngineChoice};
use poolkeeper_testenv::TestEnv;
use serde_json::{Value, json};

use crate::harness::register_webhooks_at_a_fixed_port;
use crate::harness::{
    Running, control_plane, scheduled_node, serving_cert, test_config, wait_until,
};
use crate::objects::{
    CONTROLLER_NAMESPACE, EDGE_TAINT, POOL_LABEL, create_pool, dry_run, plain_pod, pod,
    pool_affinity, write_policy,
};

const SHOP: &str = "shop";
const MUTATING_POLICY: &str = "poolkeeper-placement";

struct Cluster {
    env: TestEnv,
    client: Client,
    config: Config,
    _cert_dir: tempfile::TempDir,
}

async fn setup(engine: EngineChoice) -> Cluster {
    let env = control_plane(
        TestEnv::builder().scheduler(true).controller_manager(true),
        &[CONTROLLER_NAMESPACE, SHOP],
    )
    .await;
    let client = env.client();
    create_pool(&env, "edge", NodePoolType::Edge, &["edge-1"]).await;
    create_pool(&env, "cloud", NodePoolType::Cloud, &["cloud-1"]).await;
    write_policy(&client, &[(SHOP, "edge", "enforce")]).await;
    let (cert_dir, cert) = serving_cert();
    let mut config = test_config(CONTROLLER_NAMESPACE, cert_dir.path());
    config.machine_classes.enabled = false;
    config.placement.engine = engine;
    register_webhooks_at_a_fixed_port(&env, &mut config, &cert.ca_pem).await;
    Cluster {
        env,
        client,
        config,
        _cert_dir: cert_dir,
    }
}

/// The names of the matchConditions of every poolkeeper entry of the
/// mutating configuration.
async fn engine_conditions(client: &Client) -> Vec<Vec<Value>> {
    let stored = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get("poolkeeper")
        .await
        .unwrap();
    serde_json::to_value(stored.webhooks)
        .unwrap()
        .as_array()
        .into_iter()
        .flatten()
        .map(|entry| {
            entry["matchConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|condition| condition["name"].clone())
                .collect()
        })
        .collect()
}

/// Creates `pod` in [`SHOP`]: the stored Pod, or the API server's message.
async fn create(client: &Client, pod: &Pod) -> Result<Pod, String> {
    Api::<Pod>::namespaced(client.clone(), SHOP)
        .create(&PostParams::default(), pod)
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) => status.message,
            other => other.to_string(),
        })
}

/// With engine `cel` and every replica stopped: a `kubectl run`-like Pod of
/// a bound namespace is created, placed (affinity, edge toleration, record)
/// and scheduled onto the pool; a Pod with a foreign nodeSelector and one
/// with hand-written constraints are refused (they need poolkeeper, fail
/// closed); a replica comes back and nothing else changes; without the
/// MutatingAdmissionPolicy a plain Pod is refused by the validating policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_cel_engine_plain_pods_are_placed_while_no_replica_answers() {
    let cluster = setup(EngineChoice::Cel).await;
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    let (_, readyz) = running.get("/readyz?verbose").await;
    assert!(readyz.contains("[+]placement-engine ok: cel"), "{readyz}");
    let metrics = running.metrics().await;
    assert!(
        metrics.contains("poolkeeper_placement_engine{engine=\"cel\"} 1"),
        "{metrics}"
    );
    wait_until("the webhooks' routing and the mutating policy", || async {
        let routed = engine_conditions(&cluster.client)
            .await
            .iter()
            .all(|names| names.contains(&json!("poolkeeper.io/engine-cel-cannot-decide")));
        let placed = Api::<Pod>::namespaced(cluster.client.clone(), SHOP)
            .create(&dry_run(), &plain_pod("probe"))
            .await
            .ok()
            .and_then(|pod| pool_affinity(&pod));
        if let Some(pool) = &placed {
            assert_eq!(pool, "edge");
        }
        (routed && placed.is_some()).then_some(())
    })
    .await;
    running.stop().await;

    let started = std::time::Instant::now();
    let created = create(&cluster.client, &plain_pod("run"))
        .await
        .expect("a plain Pod is created with no replica running");
    let took = started.elapsed();
    println!("poolkeeper down: a plain Pod of a bound namespace created and placed in {took:?}");
    assert_eq!(pool_affinity(&created).as_deref(), Some("edge"));
    let value = serde_json::to_value(&created).unwrap();
    assert!(
        value["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == EDGE_TAINT),
        "{value:#}"
    );
    assert_eq!(
        value["metadata"]["annotations"]["poolkeeper.io/placement"],
        r#"{"pool":"edge","binding":"namespace","mode":"enforce","constraints":"judge"}"#
    );
    assert_eq!(scheduled_node(&cluster.env, SHOP, "run").await, "edge-1");

    let foreign = pod("foreign", json!({"nodeSelector": {POOL_LABEL: "cloud"}}));
    let refused = create(&cluster.client, &foreign).await.unwrap_err();
    assert!(refused.contains("failed calling webhook"), "{refused}");
    let own = pod(
        "own",
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}}),
    );
    let refused = create(&cluster.client, &own).await.unwrap_err();
    assert!(
        refused.contains("failed calling webhook \"mutate-pods.poolkeeper.io\""),
        "{refused}"
    );

    // A replica comes back: the Pods poolkeeper decides are decided again.
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    wait_until(
        "a Pod with its own constraints decided by the webhook",
        || async {
            match create(
                &cluster.client,
                &pod("own-again", json!({"nodeSelector": {POOL_LABEL: "cloud"}})),
            )
            .await
            {
                Err(message) if message.contains("denied the request") => Some(()),
                _ => None,
            }
        },
    )
    .await;
    running.stop().await;

    // Without the mutating policy a plain Pod reaches the validating one unplaced.
    Api::<MutatingAdmissionPolicy>::all(cluster.client.clone())
        .delete(MUTATING_POLICY, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "a plain Pod refused without the mutating policy",
        || async {
            match create(&cluster.client, &plain_pod("unplaced")).await {
                // The first rule it breaks: on an Edge pool, the missing toleration.
                Err(message)
                    if message
                        .contains("ValidatingAdmissionPolicy 'poolkeeper-placement-enforce'")
                        && message.contains("pod must tolerate") =>
                {
                    Some(())
                }
                Ok(pod) => {
                    Api::<Pod>::namespaced(cluster.client.clone(), SHOP)
                        .delete(
                            &pod.metadata.name.unwrap_or_default(),
                            &DeleteParams::default(),
                        )
                        .await
                        .ok();
                    None
                }
                Err(_) => None,
            }
        },
    )
    .await;
}

/// `auto` on Kubernetes 1.36 runs `cel`; switching to `webhook` (a config
/// change and a restart) leaves no admission policy behind and no
/// engine condition on the webhooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_runs_cel_and_switching_to_webhook_leaves_nothing_behind() {
    let mut cluster = setup(EngineChoice::Auto).await;
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    let (_, readyz) = running.get("/readyz?verbose").await;
    assert!(readyz.contains("[+]placement-engine ok: cel"), "{readyz}");
    wait_until("the mutating policy written", || async {
        Api::<MutatingAdmissionPolicy>::all(cluster.client.clone())
            .get_opt(MUTATING_POLICY)
            .await
            .ok()
            .flatten()
            .map(|_| ())
    })
    .await;
    running.stop().await;

    cluster.config.placement.engine = EngineChoice::Webhook;
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    let (_, readyz) = running.get("/readyz?verbose").await;
    assert!(
        readyz.contains("[+]placement-engine ok: webhook"),
        "{readyz}"
    );
    wait_until("nothing of the CEL engine left", || async {
        let policy = Api::<MutatingAdmissionPolicy>::all(cluster.client.clone())
            .get_opt(MUTATING_POLICY)
            .await
            .ok()?;
        let conditions = engine_conditions(&cluster.client).await;
        let routed = conditions.iter().flatten().any(|name| {
            name.as_str()
                .unwrap_or_default()
                .starts_with("poolkeeper.io/engine-")
        });
        (policy.is_none() && !routed).then_some(())
    })
    .await;
    // Placed by the webhook again.
    let mut running = running;
    let created = create(&cluster.client, &plain_pod("by-webhook"))
        .await
        .unwrap();
    assert_eq!(pool_affinity(&created).as_deref(), Some("edge"));
    assert!(
        !running.admission_decisions().is_empty(),
        "the webhook decided the Pod"
    );
    running.stop().await;
}

/// An API server that does not serve v1 MutatingAdmissionPolicies (turned
/// off with `--runtime-config`, as a cluster before 1.36): `auto` runs the
/// webhook engine and the webhooks place every Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_runs_the_webhook_engine_where_mutating_admission_policies_are_not_served() {
    let env = control_plane(
        TestEnv::builder().runtime_config(
            "admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,\
             admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false",
        ),
        &[CONTROLLER_NAMESPACE, SHOP],
    )
    .await;
    let client = env.client();
    create_pool(&env, "cloud", NodePoolType::Cloud, &["cloud-1"]).await;
    write_policy(&client, &[(SHOP, "cloud", "enforce")]).await;
    let (cert_dir, cert) = serving_cert();
    let mut config = test_config(CONTROLLER_NAMESPACE, cert_dir.path());
    config.machine_classes.enabled = false;
    config.placement.engine = EngineChoice::Auto;
    register_webhooks_at_a_fixed_port(&env, &mut config, &cert.ca_pem).await;
    assert!(
        !poolkeeper_cel::serves_mutating_admission_policies(&client)
            .await
            .unwrap()
    );
    let running = Running::start(&config, &env).await;
    running.wait_ready().await;
    let (_, readyz) = running.get("/readyz?verbose").await;
    assert!(
        readyz.contains("[+]placement-engine ok: webhook"),
        "{readyz}"
    );
    let metrics = running.metrics().await;
    assert!(
        metrics.contains("poolkeeper_placement_engine{engine=\"webhook\"} 1"),
        "{metrics}"
    );
    wait_until("a plain Pod placed by the webhook", || async {
        let created = Api::<Pod>::namespaced(client.clone(), SHOP)
            .create(&dry_run(), &plain_pod("probe"))
            .await
            .ok()?;
        (pool_affinity(&created).as_deref() == Some("cloud")).then_some(())
    })
    .await;
    running.stop().await;
}
