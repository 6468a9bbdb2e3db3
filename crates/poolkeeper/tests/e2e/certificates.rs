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

fn self_managed(lifetimes: Option<(u64, u64, u64)>) -> Config {
    let dir = std::env::temp_dir();
    let mut config = test_config(CONTROLLER_NAMESPACE, &dir);
    config.machine_classes.enabled = false;
    // Two replicas may run: one leader issues, every replica serves.
    config.leader_election.enabled = true;
    config.leader_election.lease_duration = Duration::from_secs(4);
    config.leader_election.renew_deadline = Duration::from_secs(3);
    config.leader_election.retry_period = Duration::from_secs(1);
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
    let registration = WebhookRegistration::installed(port, "").expect("deploy/webhooks parses");
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
    /// Every leaf the Secret held, to check that a CA stays while a leaf it signed is valid.
    served: Vec<CertificateInfo>,
    cas: BTreeSet<String>,
    /// Longest time from a new leaf in the Secret to each replica serving it.
    longest_swap: [Duration; 2],
}

/// Lifetimes of seconds (CA 24 s, leaf 8 s, renewed 4 s early) under a stream of Pod
/// creates in a bound namespace: at least two leaf rotations and one CA rotation, each ahead
/// of expiry; no create fails or goes unplaced; every leaf still valid is signed by a CA of
/// the caBundle (an old CA stays as long as needed); both replicas (the API server calls the
/// first) serve a new leaf within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_without_a_failed_admission() {
    let env = cluster(false, &[SHOP]).await;
    let config = self_managed(Some((24, 8, 4)));
    let running = start(&env, &config).await;
    let second = Running::start(&config, &env).await;
    second.wait_ready().await;
    let replicas = [&running, &second];
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
    let mut pending: [Option<(String, Instant)>; 2] = [None, None];
    while !stream.is_finished() {
        let secret = secret(&client).await;
        let now = std::time::SystemTime::now();
        let leaf = CertificateInfo::parse_first(&data(&secret, TLS_CERT)).unwrap();
        let cas = CertificateInfo::parse_pem(&data(&secret, CA_CERT)).unwrap();
        // Renewed ahead of time, not when it runs out: renewBefore (4 s) early, postponed
        // by at most the new CA's settling (1 s).
        let left = leaf.not_after.duration_since(now).unwrap_or_default();
        assert!(
            left >= Duration::from_secs(2),
            "{} has {left:?} left",
            leaf.describe()
        );
        // A CA that can sign a full-lifetime leaf (8 s) is always there: CAs are rotated ahead.
        let longest = cas
            .iter()
            .map(|ca| ca.not_after.duration_since(now).unwrap_or_default())
            .max()
            .unwrap_or_default();
        assert!(
            longest >= Duration::from_secs(8),
            "the newest CA has {longest:?} left"
        );
        for ca in &cas {
            seen.cas.insert(ca.serial.clone());
        }
        if seen.leaves.insert(leaf.serial.clone()) {
            pending = [0, 1].map(|_| Some((leaf.serial.clone(), Instant::now())));
            seen.served.push(leaf.clone());
        }
        for bundle in bundles(&client).await {
            for served in seen.served.iter().filter(|served| served.is_valid_at(now)) {
                assert!(
                    served.signer_among(&bundle).is_some(),
                    "{}, still valid, is signed by no CA of the caBundle",
                    served.describe()
                );
            }
        }
        for (replica, running) in replicas.iter().enumerate() {
            let (_, readyz) = running.get("/readyz?verbose").await;
            if let Some((serial, since)) = &pending[replica]
                && readyz.contains(&format!("serial {serial} "))
            {
                let longest = &mut seen.longest_swap[replica];
                *longest = (*longest).max(since.elapsed());
                pending[replica] = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stream.await.unwrap();
    let (failed, total) = (
        failures.load(Ordering::Relaxed),
        creates.load(Ordering::Relaxed),
    );
    println!(
        "{total} creates, {failed} failed; {} leaves, {} CAs; a new leaf served within {:?} by \
         the replicas",
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
    for longest in seen.longest_swap {
        assert!(
            longest < Duration::from_secs(2),
            "a new leaf served after {longest:?}"
        );
    }
    wait_until("the last leaf served by both replicas", || async {
        let leaf = CertificateInfo::parse_first(&data(&secret(&client).await, TLS_CERT)).ok()?;
        for running in replicas {
            let (_, readyz) = running.get("/readyz?verbose").await;
            readyz.contains(&leaf.serial).then_some(())?;
        }
        Some(())
    })
    .await;
    second.stop().await;
    running.stop().await;
}

/// A CA and serving certificate for the webhook Service, as another issuer would make them.
fn issued_elsewhere() -> std::collections::BTreeMap<String, Vec<u8>> {
    use poolkeeper_certificates::{Lifetimes, Stored, issue, plan, service_dns_names};
    let names = service_dns_names("poolkeeper-webhook", CONTROLLER_NAMESPACE);
    let lifetimes = Lifetimes {
        ca: Duration::from_secs(3600),
        leaf: Duration::from_secs(1800),
        renew_before: Duration::from_secs(300),
    };
    let now = std::time::SystemTime::now();
    let empty = std::collections::BTreeMap::new();
    let stored = Stored::read(&empty, &names, now);
    let plan = plan(&stored, now, &lifetimes, false);
    let mut data = issue(&empty, &stored, &plan, now, &lifetimes, &names).unwrap();
    data.remove(poolkeeper_pki::CA_KEY);
    data
}

async fn put_secret(env: &TestEnv, data: &std::collections::BTreeMap<String, Vec<u8>>) {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.to_owned()),
            namespace: Some(CONTROLLER_NAMESPACE.to_owned()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.clone())))
                .collect(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(env.client(), CONTROLLER_NAMESPACE)
        .patch(
            SECRET,
            &PatchParams::apply("another-issuer").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

/// The caBundle of every entry of the ValidatingWebhookConfiguration.
async fn validating_bundles(client: &Client) -> Vec<Option<Vec<u8>>> {
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("poolkeeper")
        .await
        .unwrap()
        .webhooks
        .unwrap_or_default()
        .iter()
        .map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()))
        .collect()
}

/// Source `secret`: a Secret issued elsewhere is served as it changes, and its `ca.crt` copied
/// into the caBundle, except where cert-manager's CA injector annotation says the injector
/// owns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_issued_elsewhere_is_served_and_its_ca_published_unless_injected() {
    let env = cluster(false, &[SHOP]).await;
    let first = issued_elsewhere();
    put_secret(&env, &first).await;
    let mut config = self_managed(None);
    config.webhook.certificate.source = CertificateSource::Secret;
    let running = start(&env, &config).await;
    wait_placed(&env, SHOP, "cloud").await;
    let client = env.client();
    let first_cas = CertificateInfo::parse_pem(&first[CA_CERT]).unwrap();
    for bundle in bundles(&client).await {
        assert_eq!(bundle, first_cas);
    }

    // cert-manager's injector owns the validating configuration's caBundle from now on.
    let annotation = serde_json::json!({"metadata": {"annotations": {
        "cert-manager.io/inject-ca-from": "poolkeeper-system/poolkeeper-webhook"
    }}});
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            "poolkeeper",
            &PatchParams::default(),
            &Patch::Merge(&annotation),
        )
        .await
        .unwrap();
    let second = issued_elsewhere();
    put_secret(&env, &second).await;
    let second_cas = CertificateInfo::parse_pem(&second[CA_CERT]).unwrap();
    let leaf = CertificateInfo::parse_first(&second[TLS_CERT]).unwrap();
    wait_until("the new CA published and the new leaf served", || async {
        let published = bundles(&client).await.iter().all(|b| *b == second_cas);
        let (_, readyz) = running.get("/readyz?verbose").await;
        (published && readyz.contains(&format!("serial {} ", leaf.serial))).then_some(())
    })
    .await;
    for bundle in validating_bundles(&client).await {
        assert_eq!(
            bundle.as_deref(),
            Some(first[CA_CERT].as_slice()),
            "left to the CA injector"
        );
    }
    let secret = secret(&client).await;
    assert_eq!(
        data(&secret, TLS_CERT),
        second[TLS_CERT],
        "the Secret is not written"
    );
    assert!(!secret.data.unwrap().contains_key(poolkeeper_pki::CA_KEY));
    running.stop().await;
}
