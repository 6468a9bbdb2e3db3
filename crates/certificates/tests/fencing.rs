//! The `webhook-certificates` leader against a real kube-apiserver, acting
//! as poolkeeper's ServiceAccount under `deploy/rbac.yaml`, with the webhook
//! configurations of `deploy/webhooks` registered with selectors that match
//! no namespace (nothing serves them): the Secret and the caBundles are
//! fenced by the leader's epoch.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use poolkeeper_certificates::{
    CertificateSettings, StoredBundles, WebhookCertificates, bundle_patch,
};
use poolkeeper_config::{CertificateSource, Config};
use poolkeeper_kube::{Fence, LEADER_EPOCH_ANNOTATION, stamp};
use poolkeeper_supervisor::LeaderTerm;
use poolkeeper_supervisor::testing::{Running, spawn};
use poolkeeper_testenv::{TestEnv, WebhookCert, WebhookRegistration, eventually};
use tokio::time::Instant;

const SERVICE_ACCOUNT: &str = "system:serviceaccount:poolkeeper-system:poolkeeper";
const WAIT: Duration = Duration::from_secs(30);
/// How long a deposed leader is watched for a write it must not make: its
/// pass, woken by the change, takes a few milliseconds.
const QUIET: Duration = Duration::from_secs(3);
/// No webhook server listens here.
const UNSERVED_PORT: u16 = 9;

struct Setup {
    env: TestEnv,
    identity: Client,
    settings: CertificateSettings,
}

/// The epoch and resourceVersion of the Secret and both configurations.
type Stamps = [(Option<String>, Option<String>); 3];

impl Setup {
    async fn start() -> Self {
        let env = TestEnv::builder()
            .start()
            .await
            .expect("start the local control plane (see xtask/testenv)");
        env.apply_installed_rbac()
            .await
            .expect("apply deploy/namespace.yaml and deploy/rbac.yaml");
        let ca_pem = WebhookCert::generate().unwrap().ca_pem;
        let registration = WebhookRegistration::installed(UNSERVED_PORT, ca_pem)
            .expect("deploy/webhooks parses")
            .matching_no_namespace();
        env.register_webhooks(registration).await.unwrap();
        let identity = env.impersonating(SERVICE_ACCOUNT).await.unwrap();
        let mut config = Config::default();
        config.webhook.certificate.source = CertificateSource::SelfManaged;
        Self {
            env,
            identity,
            settings: CertificateSettings::from(&config),
        }
    }

    /// A leader whose term `epoch` holds for the whole test.
    fn leader(&self, epoch: i64) -> Running {
        let term = LeaderTerm::new();
        term.confirm(epoch, Instant::now() + Duration::from_secs(3600));
        let component =
            WebhookCertificates::new(self.settings.clone(), self.identity.clone()).guarded_by(term);
        spawn(Box::new(component))
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.env.client(), &self.settings.namespace)
    }

    async fn secret(&self) -> Option<Secret> {
        self.secrets()
            .get_opt(&self.settings.secret_name)
            .await
            .unwrap()
    }

    async fn stamps(&self) -> Stamps {
        fn of<K: Resource>(object: Option<&K>) -> (Option<String>, Option<String>) {
            let meta = object.map(Resource::meta);
            (
                meta.and_then(|m| m.annotations.as_ref())
                    .and_then(|a| a.get(LEADER_EPOCH_ANNOTATION).cloned()),
                meta.and_then(|m| m.resource_version.clone()),
            )
        }
        let name = &self.settings.configuration_name;
        let admin = self.env.client();
        let mutating = Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .get(name)
            .await
            .unwrap();
        let validating = Api::<ValidatingWebhookConfiguration>::all(admin)
            .get(name)
            .await
            .unwrap();
        [
            of(self.secret().await.as_ref()),
            of(Some(&mutating)),
            of(Some(&validating)),
        ]
    }

    /// Waits until the Secret and both configurations carry `epoch`.
    async fn stamped(&self, epoch: &str) -> Stamps {
        eventually(
            &format!("the Secret and both configurations stamped {epoch}"),
            WAIT,
            || async {
                let stamps = self.stamps().await;
                stamps
                    .iter()
                    .all(|(e, _)| e.as_deref() == Some(epoch))
                    .then_some(stamps)
            },
        )
        .await
        .unwrap_or_else(|error| panic!("{error}"))
    }

    /// `QUIET` passes with the objects as they are.
    async fn unchanged(&self, stamps: &Stamps, what: &str) {
        let until = Instant::now() + QUIET;
        while Instant::now() < until {
            assert_eq!(&self.stamps().await, stamps, "{what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Drops the serving certificate from the Secret, as the admin: a leader
    /// issues a new one at once, a deposed one must not.
    async fn break_secret(&self) -> Stamps {
        let mut secret = self.secret().await.unwrap();
        secret
            .data
            .get_or_insert_default()
            .insert("tls.crt".to_owned(), ByteString(b"broken".to_vec()));
        secret.metadata.managed_fields = None;
        self.secrets()
            .replace(&self.settings.secret_name, &PostParams::default(), &secret)
            .await
            .unwrap();
        self.stamps().await
    }
}

/// The Secret and both configurations carry the epoch of the term that
/// wrote them last: a deposed leader's late replace of the Secret (409) and
/// caBundle patch (422) are refused by the API server; the deposed leader,
/// still running, reads the newer epoch and writes nothing, not even a
/// certificate it would otherwise reissue; a replica of an older term neither.
#[tokio::test]
async fn a_deposed_leaders_late_writes_are_refused_by_the_api_server() {
    let setup = Setup::start().await;
    let old = setup.leader(3);
    let seen_by_old = setup.stamped("3").await;
    let old_secret = setup.secret().await.unwrap();
    let name = &setup.settings.configuration_name;
    let old_configuration = Api::<MutatingWebhookConfiguration>::all(setup.env.client())
        .get(name)
        .await
        .unwrap();

    let new = setup.leader(4);
    let stamped = setup.stamped("4").await;
    new.stop().await.unwrap();
    assert_ne!(stamped, seen_by_old);

    // The old term's in-flight writes, as it computed them before the stamp.
    let mut late = old_secret.clone();
    let version = late.metadata.resource_version.clone();
    stamp(&mut late.metadata, 3, version);
    late.metadata.managed_fields = None;
    let replaced = Api::<Secret>::namespaced(setup.identity.clone(), &setup.settings.namespace)
        .replace(&setup.settings.secret_name, &PostParams::default(), &late)
        .await;
    assert!(
        matches!(&replaced, Err(kube::Error::Api(status)) if status.code == 409),
        "the late replace is refused: {replaced:?}"
    );
    let meta = &old_configuration.metadata;
    let entries = old_configuration.webhooks.iter().flatten();
    let bundles = StoredBundles {
        resource_version: None,
        injected: false,
        entries: entries.map(|w| (w.name.as_str(), None)).collect(),
    };
    let patch = Fence::new(
        meta.annotations.as_ref(),
        meta.resource_version.as_deref(),
        3,
    )
    .unwrap()
    .around(bundle_patch(&bundles, b"late"))
    .unwrap();
    let patched = Api::<MutatingWebhookConfiguration>::all(setup.identity.clone())
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await;
    assert!(
        matches!(&patched, Err(kube::Error::Api(status)) if status.code == 422),
        "the late caBundle patch is refused: {patched:?}"
    );

    // The old leader, still running, was woken by the stamps and now by a
    // broken certificate: it reads epoch 4 and writes nothing.
    setup.unchanged(&stamped, "nothing written by term 3").await;
    let broken = setup.break_secret().await;
    setup
        .unchanged(&broken, "no certificate reissued by term 3")
        .await;
    old.stop().await.unwrap();

    // A replica of an older term reads epoch 4 and writes nothing.
    let older = setup.leader(2);
    setup.unchanged(&broken, "nothing written by term 2").await;
    older.stop().await.unwrap();

    // A newer term reissues it at once.
    let newer = setup.leader(5);
    setup.stamped("5").await;
    let secret = setup.secret().await.unwrap();
    let data: BTreeMap<String, ByteString> = secret.data.unwrap_or_default();
    assert_ne!(
        data["tls.crt"].0, b"broken",
        "term 5 reissued the certificate"
    );
    newer.stop().await.unwrap();
}
