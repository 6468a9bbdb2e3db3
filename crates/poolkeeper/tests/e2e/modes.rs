//! Binding modes end to end (DESIGN §12): the whole controller with its
//! webhooks registered from `deploy/webhooks`, one namespace rolled out
//! warn -> dryrun -> enforce by rewriting the placement ConfigMap, without
//! restarting anything. The nodes are those of `audit.rs`.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::PostParams;
use kube::{Api, Client};
use poolkeeper_bus::{AdmissionResult, Mode, WebhookKind};
use poolkeeper_testenv::{Process, WebhookRegistration, eventually};

use crate::audit::cluster;
use crate::harness::{Running, TIMEOUT, deploy_webhooks, serving_cert, test_config, wait_until};
use crate::objects::{CONTROLLER_NAMESPACE, pinned, plain_pod, pool_affinity, write_policy};

const SHOP: &str = "shop-rollout";

/// The webhook configurations of `deploy/webhooks`, their bound-namespace
/// entries selecting [`SHOP`] (what the leader's selector upkeep makes of
/// them once `SHOP` is bound).
fn registration(port: u16, ca_pem: &str) -> WebhookRegistration {
    let mut registration = deploy_webhooks(port, ca_pem);
    let selector = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".to_owned(),
            operator: "In".to_owned(),
            values: Some(vec![SHOP.to_owned()]),
        }]),
        match_labels: None,
    };
    for configuration in &mut registration.mutating {
        if let Some(first) = configuration.webhooks.as_mut().and_then(|w| w.first_mut()) {
            first.namespace_selector = Some(selector.clone());
        }
    }
    for configuration in &mut registration.validating {
        if let Some(first) = configuration.webhooks.as_mut().and_then(|w| w.first_mut()) {
            first.namespace_selector = Some(selector.clone());
        }
    }
    registration
}

/// A create's answer: HTTP status, the admission warnings, the stored Pod.
struct Created {
    status: u16,
    warnings: Vec<String>,
}

/// Creates `pod` in [`SHOP`] (or only tries, with `dry_run`) and keeps the
/// `Warning` headers, which the typed client drops.
async fn create(client: &Client, pod: &Pod, dry_run: bool) -> Created {
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    let request = kube::core::Request::new(format!("/api/v1/namespaces/{SHOP}/pods"))
        .create(&params, serde_json::to_vec(pod).unwrap())
        .unwrap();
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("the apiserver answers");
    Created {
        status: response.status().as_u16(),
        warnings: response
            .headers()
            .get_all("warning")
            .iter()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .collect(),
    }
}

/// Selects `edge-1`, a node of another pool than `SHOP`'s `cloud`.
fn foreign(name: &str) -> Pod {
    pinned(name, "edge-1")
}

/// The denial of [`foreign`], as the validating webhook words it.
const DENIAL: &str = "1 node outside the pool matches its nodeSelector: edge-1";

fn warned(created: &Created) -> bool {
    created.warnings.iter().any(|w| {
        w.contains("poolkeeper would deny this pod (binding mode warn)") && w.contains(DENIAL)
    })
}

/// Waits until the webhooks answer [`foreign`] as `in_effect` says.
async fn wait_for(client: &Client, what: &str, in_effect: impl Fn(&Created) -> bool) {
    wait_until(what, || async {
        in_effect(&create(client, &foreign("probe"), true).await).then_some(())
    })
    .await;
}

/// DESIGN §12: in `warn` a Pod with a foreign nodeSelector is created and
/// the create answer carries poolkeeper's denial as a warning (a plain Pod
/// is still pinned); in `dryrun` both are created unchanged and only
/// counted; back to `enforce` in the ConfigMap, the next such create fails
/// — the same controller all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_rolls_out_warn_dryrun_enforce_without_restart() {
    let env = cluster(false, &[SHOP]).await;
    let client = env.client();
    write_policy(&client, &[(SHOP, "cloud", "warn")]).await;
    let (cert_dir, cert) = serving_cert();
    let mut config = test_config(CONTROLLER_NAMESPACE, cert_dir.path());
    config.machine_classes.enabled = false;
    let mut running = Running::start(&config, &env).await;
    running.wait_ready().await;
    let port = running.webhook.expect("the webhook is enabled").port();
    env.register_webhooks(registration(port, &cert.ca_pem))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), SHOP);

    // warn
    wait_for(&client, "warn in effect", warned).await;
    let created = create(&client, &foreign("foreign-warn"), false).await;
    assert_eq!(created.status, 201, "{:?}", created.warnings);
    assert!(warned(&created), "{:?}", created.warnings);
    let plain = pods
        .create(&PostParams::default(), &plain_pod("plain-warn"))
        .await
        .unwrap();
    assert!(
        pool_affinity(&plain).as_deref() == Some("cloud"),
        "warn still patches: {:?}",
        plain.spec
    );

    // dryrun
    write_policy(&client, &[(SHOP, "cloud", "dryrun")]).await;
    wait_for(&client, "dryrun in effect", |c| {
        c.status == 201 && c.warnings.is_empty()
    })
    .await;
    running.admission_decisions();
    let created = create(&client, &foreign("foreign-dryrun"), false).await;
    assert_eq!(
        (created.status, created.warnings.len()),
        (201, 0),
        "{:?}",
        created.warnings
    );
    let stored = pods.get("foreign-dryrun").await.unwrap();
    assert_eq!(stored.spec.as_ref().unwrap().affinity, None, "unchanged");
    let plain = pods
        .create(&PostParams::default(), &plain_pod("plain-dryrun"))
        .await
        .unwrap();
    assert_eq!(
        plain.spec.as_ref().unwrap().affinity,
        None,
        "dryrun patches nothing"
    );
    let validated = (
        WebhookKind::Validate,
        AdmissionResult::Allowed,
        Mode::Dryrun,
        "outside_pool",
    );
    let mutated = (
        WebhookKind::Mutate,
        AdmissionResult::Allowed,
        Mode::Dryrun,
        "patched",
    );
    let mut seen = Vec::new();
    let counted = eventually("the dryrun decisions counted", TIMEOUT, || {
        seen.extend(running.admission_decisions());
        let done = seen.contains(&validated) && seen.contains(&mutated);
        async move { done.then_some(()) }
    })
    .await;
    assert!(counted.is_ok(), "{counted:?}: {seen:?}");
    let metrics = running.metrics().await;
    assert!(
        metrics.lines().any(
            |line| line.starts_with("poolkeeper_webhook_admissions_total{")
                && line.contains("mode=\"dryrun\"")
                && line.contains("webhook=\"validate\"")
        ),
        "{metrics}"
    );

    // enforce
    write_policy(&client, &[(SHOP, "cloud", "enforce")]).await;
    wait_for(&client, "enforce in effect", |c| c.status == 403).await;
    let denied = pods
        .create(&PostParams::default(), &foreign("foreign-enforce"))
        .await
        .expect_err("enforce denies");
    match denied {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403);
            assert!(status.message.contains(DENIAL), "{}", status.message);
        }
        other => panic!(
            "expected a denial, got {other}\n{}",
            env.log_tail(Process::ApiServer, 20)
        ),
    }
    running.stop().await;
}
