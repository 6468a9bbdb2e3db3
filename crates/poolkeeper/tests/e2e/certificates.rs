//! The serving certificate poolkeeper issues itself (`webhook.certificate.source: self`),
//! through the real API server: the webhook configurations of `deploy/webhooks` call the
//! webhook through a Service (an ExternalName Service for `localhost`), so the API server
//! checks the certificate against the Service's DNS names and the caBundle the leader writes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use poolkeeper_config::{CertificateSource, Config};
use poolkeeper_pki::{CA_CERT, CertificateInfo, TLS_CERT};
use poolkeeper_testenv::{TestEnv, WebhookRegistration};

use crate::audit::cluster;
use crate::harness::{Running, test_config, wait_placed, wait_until};
use crate::objects::{CONTROLLER_NAMESPACE, dry_run, plain_pod, pool_affinity, write_policy};

const SHOP: &str = "shop-certificates";
const SECRET: &str = "poolkeeper-webhook-tls";
const WEBHOOK_MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/webhooks");

fn self_managed(lifetimes: Option<(u64, u64, u64)>) -> Config {
    let dir = std::env::temp_dir();
    let mut config = test_config(CONTROLLER_NAMESPACE, &dir);
    config.machine_classes.enabled = false;
    let certificate = &mut config.webhook.certificate;
    certificate.source = CertificateSource::SelfManaged;
    if let Some((ca, leaf, renew)) = lifetimes {
        certificate.ca_validity = Duration::from_secs(ca);
        certificate.leaf_validity = Duration::from_secs(leaf);
        certificate.renew_before = Duration::from_secs(renew);
    }
    config
}

/// Installs what the installer owns: `deploy/webhooks` as they are (with the webhook's
/// loopback port), and the Service `poolkeeper-webhook` as an ExternalName of `localhost`.
async fn install(env: &TestEnv, port: u16) {
    let registration = WebhookRegistration::new(port, "")
        .with_files([WEBHOOK_MANIFESTS])
        .expect("deploy/webhooks parses");
    let params = PatchParams::apply("installer").force();
    for mut configuration in registration.mutating {
        configuration.metadata.annotations = None;
        for webhook in configuration.webhooks.iter_mut().flatten() {
            if let Some(service) = webhook.client_config.service.as_mut() {
                service.port = Some(i32::from(port));
            }
        }
        let name = configuration.metadata.name.clone().unwrap();
        Api::<MutatingWebhookConfiguration>::all(env.client())
            .patch(&name, &params, &Patch::Apply(&configuration))
            .await
            .unwrap();
    }
    for mut configuration in registration.validating {
        configuration.metadata.annotations = None;
        for webhook in configuration.webhooks.iter_mut().flatten() {
            if let Some(service) = webhook.client_config.service.as_mut() {
                service.port = Some(i32::from(port));
            }
        }
        let name = configuration.metadata.name.clone().unwrap();
        Api::<ValidatingWebhookConfiguration>::all(env.client())
            .patch(&name, &params, &Patch::Apply(&configuration))
            .await
            .unwrap();
    }
    let service = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: poolkeeper-webhook\n  namespace: {CONTROLLER_NAMESPACE}\nspec:\n  type: ExternalName\n  externalName: localhost\n"
    );
    env.apply_yaml(&service, "the webhook Service")
        .await
        .unwrap();
}

async fn start(env: &TestEnv, config: &Config) -> Running {
    write_policy(&env.client(), &[(SHOP, "cloud", "enforce")]).await;
    let running = Running::start(config, env).await;
    let port = running.webhook.expect("the webhook is enabled").port();
    install(env, port).await;
    running.wait_ready().await;
    running
}

/// The CAs of every entry's caBundle of the MutatingWebhookConfiguration, one set per entry.
async fn bundles(client: &Client) -> Vec<Vec<CertificateInfo>> {
    let configuration = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get("poolkeeper")
        .await
        .unwrap();
    configuration
        .webhooks
        .unwrap_or_default()
        .iter()
        .map(|webhook| {
            webhook
                .client_config
                .ca_bundle
                .as_ref()
                .and_then(|bundle| CertificateInfo::parse_pem(&bundle.0).ok())
                .unwrap_or_default()
        })
        .collect()
}

async fn secret(client: &Client) -> Secret {
    Api::<Secret>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .get(SECRET)
        .await
        .unwrap()
}

fn data(secret: &Secret, key: &str) -> Vec<u8> {
    secret.data.as_ref().unwrap()[key].0.clone()
}

/// A fresh installation: the leader creates the Secret (owned by the
/// MutatingWebhookConfiguration), writes its CA into every entry's caBundle, the replica
/// serves it, and the API server calls the webhook through the Service: a Pod of a bound
/// namespace is placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_start_issues_the_certificate_and_the_api_server_trusts_it() {
    let env = cluster(false, &[SHOP]).await;
    let running = start(&env, &self_managed(None)).await;
    wait_placed(&env, SHOP, "cloud").await;

    let client = env.client();
    let secret = secret(&client).await;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("MutatingWebhookConfiguration", "poolkeeper")
    );
    let cas = CertificateInfo::parse_pem(&data(&secret, CA_CERT)).unwrap();
    let leaf = CertificateInfo::parse_first(&data(&secret, TLS_CERT)).unwrap();
    assert_eq!(
        leaf.dns_names,
        [
            "poolkeeper-webhook.poolkeeper-system.svc",
            "poolkeeper-webhook.poolkeeper-system.svc.cluster.local"
        ]
    );
    for bundle in bundles(&client).await {
        assert_eq!(bundle, cas, "every entry trusts the Secret's CA");
    }
    let (_, readyz) = running.get("/readyz?verbose").await;
    assert!(
        readyz.contains(&format!(
            "[+]webhook ok: serving {}; CA {}",
            leaf.describe(),
            cas[0].describe()
        )),
        "{readyz}"
    );
    let metrics = running.metrics().await;
    for line in [
        format!(
            "poolkeeper_certificate_expiry_timestamp_seconds{{certificate=\"leaf\"}} {}",
            leaf.expiry_seconds()
        ),
        format!(
            "poolkeeper_certificate_expiry_timestamp_seconds{{certificate=\"ca\"}} {}",
            cas[0].expiry_seconds()
        ),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    running.stop().await;
}

/// What the rotation run saw.
#[derive(Default)]
struct Seen {
    leaves: BTreeSet<String>,
    cas: BTreeSet<String>,
    /// Longest time from a new leaf in the Secret to the replica serving it.
    longest_swap: Duration,
}

/// Lifetimes of seconds (CA 24 s, leaf 8 s, renewed 4 s early) under a stream of Pod
/// creates in a bound namespace: at least two leaf rotations and one CA rotation, no create
/// fails or goes unplaced, and the served leaf is always signed by a CA of the caBundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_without_a_failed_admission() {
    let env = cluster(false, &[SHOP]).await;
    let running = start(&env, &self_managed(Some((24, 8, 4)))).await;
    wait_placed(&env, SHOP, "cloud").await;
    let client = env.client();

    let failures = Arc::new(AtomicUsize::new(0));
    let creates = Arc::new(AtomicUsize::new(0));
    let stream = {
        let (client, failures, creates) = (client.clone(), failures.clone(), creates.clone());
        tokio::spawn(async move {
            let pods = Api::<Pod>::namespaced(client, SHOP);
            let end = Instant::now() + Duration::from_secs(32);
            while Instant::now() < end {
                creates.fetch_add(1, Ordering::Relaxed);
                match pods.create(&dry_run(), &plain_pod("stream")).await {
                    Ok(pod) if pool_affinity(&pod).as_deref() == Some("cloud") => {}
                    other => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        eprintln!("create failed or unplaced: {:?}", other.err());
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let mut seen = Seen::default();
    let mut pending: Option<(String, Instant)> = None;
    while !stream.is_finished() {
        let secret = secret(&client).await;
        let leaf = CertificateInfo::parse_first(&data(&secret, TLS_CERT)).unwrap();
        for ca in CertificateInfo::parse_pem(&data(&secret, CA_CERT)).unwrap() {
            seen.cas.insert(ca.serial);
        }
        if seen.leaves.insert(leaf.serial.clone()) {
            pending = Some((leaf.serial.clone(), Instant::now()));
        }
        for bundle in bundles(&client).await {
            assert!(
                leaf.signer_among(&bundle).is_some(),
                "the leaf in the Secret, {}, is signed by no CA of the caBundle",
                leaf.describe()
            );
        }
        let (_, readyz) = running.get("/readyz?verbose").await;
        if let Some((serial, since)) = &pending
            && readyz.contains(&format!("serial {serial} "))
        {
            seen.longest_swap = seen.longest_swap.max(since.elapsed());
            pending = None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stream.await.unwrap();
    let (failed, total) = (
        failures.load(Ordering::Relaxed),
        creates.load(Ordering::Relaxed),
    );
    println!(
        "{total} creates, {failed} failed; {} leaves, {} CAs; a new leaf served within {:?}",
        seen.leaves.len(),
        seen.cas.len(),
        seen.longest_swap
    );
    assert_eq!(failed, 0, "of {total} creates");
    assert!(
        seen.leaves.len() >= 3,
        "{} leaves: two rotations at least",
        seen.leaves.len()
    );
    assert!(
        seen.cas.len() >= 2,
        "{} CAs: one rotation at least",
        seen.cas.len()
    );
    assert!(
        seen.longest_swap < Duration::from_secs(2),
        "a new leaf served after {:?}",
        seen.longest_swap
    );
    wait_until("the last leaf served", || async {
        let leaf = CertificateInfo::parse_first(&data(&secret(&client).await, TLS_CERT)).ok()?;
        let (_, readyz) = running.get("/readyz?verbose").await;
        readyz.contains(&leaf.serial).then_some(())
    })
    .await;
    running.stop().await;
}
