//! Secret protection end to end, as machine-controller-manager does it: the
//! whole controller (placement and the webhook disabled), under poolkeeper's
//! ServiceAccount and `deploy/rbac.yaml`, against a real kube-apiserver.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, SecretReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::MachineClass;
use poolkeeper_config::Config;
use poolkeeper_executor::KubeClassWriter;
use poolkeeper_testenv::TestEnv;
use serde_json::json;
use tempfile::TempDir;

use crate::harness::{
    Running, control_plane, controller_client, metric_sum, protection_only_config, wait_until,
};
use crate::objects::{MACHINE_NAMESPACE, machine_class, poolkeeper_events};
use crate::recording::recording;

/// `machineClasses.secretFinalizer` by default: machine-controller-manager's.
const SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";
const OTHER_NAMESPACE: &str = "elsewhere";

pub(crate) struct Cluster {
    pub(crate) env: TestEnv,
    pub(crate) config: Config,
    _cert_dir: TempDir,
}

impl Cluster {
    pub(crate) async fn start() -> Self {
        let env = control_plane(TestEnv::builder(), &[MACHINE_NAMESPACE, OTHER_NAMESPACE]).await;
        let cert_dir = tempfile::tempdir().expect("a temporary directory");
        let config = protection_only_config(cert_dir.path());
        Self {
            env,
            config,
            _cert_dir: cert_dir,
        }
    }

    pub(crate) fn admin(&self) -> Client {
        self.env.client()
    }

    pub(crate) fn classes(&self) -> Api<MachineClass> {
        Api::namespaced(self.admin(), MACHINE_NAMESPACE)
    }

    pub(crate) fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.admin(), MACHINE_NAMESPACE)
    }
}

fn reference(namespace: &str, name: &str) -> SecretReference {
    SecretReference {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
    }
}

/// A class of the machine namespace referencing `secret_ref` and
/// `credentials` (`(namespace, name)`).
pub(crate) fn class_with(
    name: &str,
    secret_ref: Option<(&str, &str)>,
    credentials: Option<(&str, &str)>,
) -> MachineClass {
    let mut class = machine_class(name);
    class.secret_ref = secret_ref.map(|(ns, name)| reference(ns, name));
    class.credentials_secret_ref = credentials.map(|(ns, name)| reference(ns, name));
    class
}

pub(crate) async fn create(classes: &Api<MachineClass>, class: &MachineClass) {
    classes
        .create(&PostParams::default(), class)
        .await
        .unwrap_or_else(|e| panic!("creating MachineClass {:?}: {e}", class.metadata.name));
}

/// A Secret with `marker` as the value of its one data key.
pub(crate) async fn create_secret(secrets: &Api<Secret>, name: &str, marker: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"token": marker},
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("creating Secret {name}: {e}"));
}

/// The Secret's finalizers and whether it is being deleted; `None` once it
/// is gone.
async fn secret_state(secrets: &Api<Secret>, name: &str) -> Option<(Vec<String>, bool)> {
    secrets
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading Secret {name}: {e}"))
        .map(|secret| {
            let meta = secret.metadata;
            (
                meta.finalizers.unwrap_or_default(),
                meta.deletion_timestamp.is_some(),
            )
        })
}

/// Waits until Secret `name` has poolkeeper's finalizer (`true`) or not.
pub(crate) async fn wait_protected(secrets: &Api<Secret>, name: &str, protected: bool) {
    let what = format!("Secret {name} protected: {protected}");
    wait_until(&what, || async {
        let (finalizers, _) = secret_state(secrets, name).await?;
        (finalizers.iter().any(|f| f == SECRET_FINALIZER) == protected).then_some(())
    })
    .await;
}

/// Waits until Secret `name` is gone (404).
pub(crate) async fn wait_gone(secrets: &Api<Secret>, name: &str) {
    wait_until(&format!("Secret {name} is gone"), || async {
        secret_state(secrets, name).await.is_none().then_some(())
    })
    .await;
}

/// poolkeeper's Kubernetes Events on Secret `name`: `(reason, note, uid)`.
async fn secret_events(client: &Client, name: &str) -> Vec<(String, String, String)> {
    poolkeeper_events(client, MACHINE_NAMESPACE)
        .await
        .into_iter()
        .filter_map(|event| {
            let regarding = event.regarding?;
            (regarding.kind.as_deref() == Some("Secret") && regarding.name.as_deref() == Some(name))
                .then(|| {
                    (
                        event.reason.unwrap_or_default(),
                        event.note.unwrap_or_default(),
                        regarding.uid.unwrap_or_default(),
                    )
                })
        })
        .collect()
}

/// A class with `secretRef` and `credentialsSecretRef` protects both
/// Secrets (an Event on each says why); a deleted Secret stays Terminating
/// while the class exists and goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_references_protect_and_a_deleted_secret_waits_for_its_class() {
    let started = Instant::now();
    let cluster = Cluster::start().await;
    let (classes, secrets) = (cluster.classes(), cluster.secrets());
    for name in ["cloud", "creds", "unrelated"] {
        create_secret(&secrets, name, "not-for-poolkeeper").await;
    }
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    let ns = MACHINE_NAMESPACE;
    create(
        &classes,
        &class_with("small", Some((ns, "cloud")), Some((ns, "creds"))),
    )
    .await;
    wait_protected(&secrets, "cloud", true).await;
    wait_protected(&secrets, "creds", true).await;

    let uid = secrets.get("cloud").await.unwrap().metadata.uid.unwrap();
    let events = wait_until("the FinalizerAdded Event on Secret cloud", || async {
        let events = secret_events(&cluster.admin(), "cloud").await;
        events
            .iter()
            .any(|(reason, _, _)| reason == "FinalizerAdded")
            .then_some(events)
    })
    .await;
    assert_eq!(
        events,
        [(
            "FinalizerAdded".to_owned(),
            format!("Added finalizer {SECRET_FINALIZER}: referenced by MachineClass small"),
            uid,
        )],
        "one Event, regarding the Secret by UID"
    );

    // `kubectl delete secret cloud`: Terminating while the class needs it.
    secrets
        .delete("cloud", &DeleteParams::default())
        .await
        .expect("deleting Secret cloud");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = secret_state(&secrets, "cloud").await;
    assert_eq!(
        held,
        Some((vec![SECRET_FINALIZER.to_owned()], true)),
        "Terminating, the finalizer kept"
    );

    // The class goes: so do both finalizers, and the deletion completes.
    classes
        .delete("small", &DeleteParams::default())
        .await
        .expect("deleting MachineClass small");
    wait_gone(&secrets, "cloud").await;
    wait_protected(&secrets, "creds", false).await;
    wait_until("the FinalizerRemoved Event on Secret creds", || async {
        secret_events(&cluster.admin(), "creds")
            .await
            .iter()
            .any(|(reason, _, _)| reason == "FinalizerRemoved")
            .then_some(())
    })
    .await;
    assert_eq!(
        secret_state(&secrets, "unrelated").await,
        Some((Vec::new(), false)),
        "a Secret no class references is left alone"
    );
    let totals = running.executor_totals().await;
    let metrics = running.metrics().await;
    let secret_outcome = |outcome: &str| {
        let series =
            format!("poolkeeper_executor_secret_reconciliations_total{{outcome=\"{outcome}\"}}");
        metric_sum(&metrics, &series)
    };
    let (added, removed) = (
        secret_outcome("finalizer_added"),
        secret_outcome("finalizer_removed"),
    );
    println!(
        "secret protection lifecycle: {added} added, {removed} removed, {} Secret errors; \
         executor {totals:?} in {:?}",
        secret_outcome("error"),
        started.elapsed()
    );
    assert_eq!(
        (added, removed),
        (2, 2),
        "one write per Secret and direction"
    );
    assert_eq!(secret_outcome("error"), 0);
    assert_eq!(totals.errors, 0, "{totals:?}");
    running.stop().await;
}

/// A class that changes its secretRef releases the old Secret and protects
/// the new one; a reference into another namespace is not managed; a
/// Secret created after the class that names it is protected at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_reference_releases_the_old_secret() {
    let cluster = Cluster::start().await;
    let (classes, secrets) = (cluster.classes(), cluster.secrets());
    let foreign = Api::<Secret>::namespaced(cluster.admin(), OTHER_NAMESPACE);
    for name in ["cloud", "cloud-v2"] {
        create_secret(&secrets, name, "x").await;
    }
    create_secret(&foreign, "creds", "x").await;
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;
    let ns = MACHINE_NAMESPACE;
    create(
        &classes,
        &class_with(
            "small",
            Some((ns, "cloud")),
            Some((OTHER_NAMESPACE, "creds")),
        ),
    )
    .await;
    wait_protected(&secrets, "cloud", true).await;

    let moved = json!({"secretRef": {"name": "cloud-v2", "namespace": ns}});
    classes
        .patch("small", &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .expect("moving the secretRef of small");
    wait_protected(&secrets, "cloud-v2", true).await;
    wait_protected(&secrets, "cloud", false).await;
    assert_eq!(
        secret_state(&foreign, "creds").await,
        Some((Vec::new(), false)),
        "a Secret of another namespace is not managed"
    );

    // A reference to a Secret that does not exist yet: protected the moment
    // it is created (its watch event alone brings the pass).
    let ahead = json!({"secretRef": {"name": "late", "namespace": ns}});
    classes
        .patch("small", &PatchParams::default(), &Patch::Merge(&ahead))
        .await
        .expect("pointing small at a missing Secret");
    wait_protected(&secrets, "cloud-v2", false).await;
    create_secret(&secrets, "late", "x").await;
    wait_protected(&secrets, "late", true).await;
    running.stop().await;
}

/// No Secret data ever reaches the controller: every byte it receives is
/// recorded while it protects and releases a Secret, and the Secret's data
/// is not among them (its name is). The same recording client does see the
/// data when it reads the whole Secret, so the recording would have caught it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_data_reaches_the_controller() {
    let cluster = Cluster::start().await;
    let (classes, secrets) = (cluster.classes(), cluster.secrets());
    let marker = format!("marker-{}-never-read", std::process::id());
    create_secret(&secrets, "cloud", &marker).await;
    let encoded = base64_of(&marker);
    let controller = controller_client(&cluster.env, &cluster.config).await;
    let (client, recorded) = recording(controller, MACHINE_NAMESPACE);
    let writer = KubeClassWriter::new(client.clone());
    let running = Running::start_as(&cluster.config, client.clone(), writer).await;
    running.wait_ready().await;
    let ns = MACHINE_NAMESPACE;
    create(&classes, &class_with("small", Some((ns, "cloud")), None)).await;
    wait_protected(&secrets, "cloud", true).await;
    let rotated = format!("{marker}-rotated");
    let data_write = json!({"stringData": {"token": rotated}});
    secrets
        .patch("cloud", &PatchParams::default(), &Patch::Merge(&data_write))
        .await
        .expect("rotating the Secret's data");
    classes
        .delete("small", &DeleteParams::default())
        .await
        .expect("deleting MachineClass small");
    wait_protected(&secrets, "cloud", false).await;
    running.stop().await;

    let path = format!("/api/v1/namespaces/{ns}/secrets");
    let requests = recorded.requests_to(&path);
    assert!(
        requests.len() >= 3,
        "a list, a watch and two patches at least: {requests:?}"
    );
    for (path, accept) in &requests {
        assert!(
            accept.contains("as=PartialObjectMetadata"),
            "{path} asked for {accept:?}"
        );
    }
    assert!(recorded.received("\"cloud\""), "the Secret's metadata came");
    assert!(
        !recorded.received(&encoded) && !recorded.received(&base64_of(&rotated)),
        "no Secret data among {} bytes received",
        recorded.received_bytes()
    );
    // The control: reading the whole Secret brings the data.
    Api::<Secret>::namespaced(client, ns)
        .get("cloud")
        .await
        .expect("the ServiceAccount may get a Secret of its namespace");
    assert!(
        recorded.received(&base64_of(&rotated)),
        "the recording sees data"
    );
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}
