//! Least privilege (DESIGN §11): the controller runs under poolkeeper's
//! ServiceAccount with exactly the RBAC of `deploy/rbac.yaml` (every e2e
//! test starts it that way, see `harness::controller_client`). Here: the
//! whole controller, leader election included, does its job with those
//! rights, and what lies outside them is refused with 403 under the same
//! identity.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::CronJob;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Node, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::{Api, Client};
use poolkeeper_api::{Machine, MachineClass};
use poolkeeper_testenv::{TestEnv, eventually};
use serde_json::json;

use crate::harness::{Running, TIMEOUT, control_plane, controller_client, test_config, wait_until};
use crate::objects::{
    CONTROLLER_NAMESPACE, FINALIZER, MACHINE_NAMESPACE, POLICY_CONFIG_MAP, POLICY_KEY,
    create_class, create_machine, delete_machine, has_finalizer, machine_class, plain_pod,
};

const APP_NAMESPACE: &str = "shop";
/// `machineClasses.secretFinalizer` by default.
const SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";

struct Cluster {
    env: TestEnv,
    admin: Client,
    /// poolkeeper's ServiceAccount.
    controller: Client,
    _cert_dir: tempfile::TempDir,
    config: poolkeeper_config::Config,
}

/// A control plane with one object of each kind the tests touch, created
/// by the admin.
async fn setup() -> Cluster {
    let env = control_plane(
        TestEnv::builder(),
        &[MACHINE_NAMESPACE, CONTROLLER_NAMESPACE, APP_NAMESPACE],
    )
    .await;
    let cert_dir = tempfile::tempdir().unwrap();
    let mut config = test_config(MACHINE_NAMESPACE, cert_dir.path());
    config.webhook.enabled = false;
    config.leader_election.enabled = true;
    config.leader_election.lease_duration = Duration::from_secs(4);
    config.leader_election.renew_deadline = Duration::from_secs(3);
    config.leader_election.retry_period = Duration::from_secs(1);
    let controller = controller_client(&env, &config).await;
    let admin = env.client();
    env.ready_node("node-1", BTreeMap::new(), Vec::new())
        .await
        .unwrap();
    create_class(
        &Api::namespaced(admin.clone(), MACHINE_NAMESPACE),
        "class-a",
    )
    .await;
    for (namespace, name) in [(MACHINE_NAMESPACE, "cloud"), (APP_NAMESPACE, "app-token")] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"token": "t"},
        }))
        .unwrap();
        Api::<Secret>::namespaced(admin.clone(), namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    Api::<Pod>::namespaced(admin.clone(), APP_NAMESPACE)
        .create(&PostParams::default(), &plain_pod("app"))
        .await
        .unwrap();
    for name in [POLICY_CONFIG_MAP, "other-config"] {
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": CONTROLLER_NAMESPACE},
            "data": {POLICY_KEY: ""},
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(admin.clone(), CONTROLLER_NAMESPACE)
            .create(&PostParams::default(), &config_map)
            .await
            .unwrap();
    }
    for name in ["poolkeeper", "someone-else"] {
        let configuration: ValidatingWebhookConfiguration =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .create(&PostParams::default(), &configuration)
            .await
            .unwrap();
    }
    Cluster {
        env,
        admin,
        controller,
        _cert_dir: cert_dir,
        config,
    }
}

/// The status code of the start of a watch of `api`: 200 when the API
/// server accepted it.
async fn watch_code<K>(api: Api<K>) -> u16
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::WatchParams::default().timeout(1);
    match api.watch(&params, "0").await {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("expected an answer of the API server, got {other}"),
    }
}

/// The API server's status code for a request that failed, 200 if it did
/// not.
fn code<T>(result: Result<T, kube::Error>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("expected an answer of the API server, got {other}"),
    }
}

/// The controller, MachineClass protection and leader election on, does
/// its job under the ServiceAccount: it takes the Lease, adds and removes
/// the finalizer, writes the Kubernetes Events, and releases the Lease on
/// shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_does_its_job_with_the_granted_rights() {
    let cluster = setup().await;
    let running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;

    let leases = Api::<Lease>::namespaced(cluster.admin.clone(), CONTROLLER_NAMESPACE);
    let holder = eventually("the Lease is held", TIMEOUT, || async {
        leases
            .get_opt("poolkeeper")
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await
    .unwrap();
    assert!(!holder.is_empty());

    let classes = Api::<MachineClass>::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE);
    let machines = Api::<Machine>::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE);
    create_machine(&machines, "m1", "class-a").await;
    let finalized = |present: bool| {
        let classes = classes.clone();
        async move { (has_finalizer(&classes, "class-a", FINALIZER).await == present).then_some(()) }
    };
    wait_until("the finalizer added", || finalized(true)).await;
    delete_machine(&machines, "m1").await;
    wait_until("the finalizer removed", || finalized(false)).await;

    // Secret protection: watched, patched and reported under the same identity.
    let secrets = Api::<Secret>::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE);
    let mut class_s = machine_class("class-s");
    class_s.secret_ref = Some(k8s_openapi::api::core::v1::SecretReference {
        name: Some("cloud".into()),
        namespace: Some(MACHINE_NAMESPACE.into()),
    });
    classes
        .create(&PostParams::default(), &class_s)
        .await
        .unwrap();
    let secret_protected = |present: bool| {
        let secrets = secrets.clone();
        async move {
            let secret = secrets.get("cloud").await.ok()?;
            let finalizers = secret.metadata.finalizers.unwrap_or_default();
            (finalizers.iter().any(|f| f == SECRET_FINALIZER) == present).then_some(())
        }
    };
    wait_until("the Secret finalizer added", || secret_protected(true)).await;
    classes
        .delete("class-s", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the Secret finalizer removed", || secret_protected(false)).await;
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
        cluster.admin.clone(),
        MACHINE_NAMESPACE,
    );
    eventually(
        "the Kubernetes Events written, on the class and the Secret",
        TIMEOUT,
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            let reasons: Vec<String> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
            let on_secret = list
                .items
                .iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Secret"))
                .count();
            (reasons.contains(&"FinalizerAdded".to_owned())
                && reasons.contains(&"FinalizerRemoved".to_owned())
                && on_secret >= 2)
                .then_some(())
        },
    )
    .await
    .unwrap();

    running.stop().await;
    let released = leases.get("poolkeeper").await.unwrap();
    assert_ne!(
        released.spec.and_then(|spec| spec.holder_identity),
        Some(holder),
        "the Lease is released on shutdown"
    );
}

/// What the Roles grant works under the identity (so the refusals below
/// are RBAC's, not a broken token) ...
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_what_the_roles_grant_is_allowed() {
    let cluster = setup().await;
    let sa = cluster.controller.clone();
    let granted = [
        (
            "list Pods in every namespace",
            code(
                Api::<Pod>::all(sa.clone())
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "list Nodes",
            code(
                Api::<Node>::all(sa.clone())
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "list Deployments in every namespace (the audit's templates)",
            code(
                Api::<Deployment>::all(sa.clone())
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "list CronJobs in every namespace",
            code(
                Api::<CronJob>::all(sa.clone())
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "list the labelled Namespaces (label bindings)",
            code(
                Api::<Namespace>::all(sa.clone())
                    .list(&ListParams::default().labels("apps.openyurt.io/nodepool"))
                    .await,
            ),
        ),
        (
            "watch Namespaces",
            watch_code(Api::<Namespace>::all(sa.clone())).await,
        ),
        (
            "get poolkeeper's webhook configuration",
            code(
                Api::<ValidatingWebhookConfiguration>::all(sa.clone())
                    .get("poolkeeper")
                    .await,
            ),
        ),
        (
            "list the metadata of the Secrets of machine-system",
            code(
                Api::<PartialObjectMeta<Secret>>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "watch the Secrets of machine-system",
            watch_code(Api::<PartialObjectMeta<Secret>>::namespaced(
                sa.clone(),
                MACHINE_NAMESPACE,
            ))
            .await,
        ),
        (
            "get a Secret of machine-system",
            code(
                Api::<Secret>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .get("cloud")
                    .await,
            ),
        ),
        (
            "patch the finalizers of a Secret of machine-system",
            code(
                Api::<PartialObjectMeta<Secret>>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .patch(
                        "cloud",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/checked"]}})),
                    )
                    .await,
            ),
        ),
        (
            "patch poolkeeper's webhook configuration",
            code(
                Api::<ValidatingWebhookConfiguration>::all(sa.clone())
                    .patch(
                        "poolkeeper",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"labels": {"checked": "yes"}}})),
                    )
                    .await,
            ),
        ),
    ];
    for (what, code) in granted {
        assert_eq!(code, 200, "{what}");
    }

    // ... and everything else is forbidden.
    let machine_classes = Api::<MachineClass>::namespaced(sa.clone(), MACHINE_NAMESPACE);
    let mut class = Api::<MachineClass>::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE)
        .get("class-a")
        .await
        .unwrap();
    class
        .metadata
        .labels
        .get_or_insert_default()
        .insert("replaced".to_owned(), "yes".to_owned());
    create_machine(
        &Api::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE),
        "m1",
        "class-a",
    )
    .await;
    let mut stored_machine = Api::<Machine>::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE)
        .get("m1")
        .await
        .unwrap();
    stored_machine
        .metadata
        .labels
        .get_or_insert_default()
        .insert("replaced".to_owned(), "yes".to_owned());
    let mut stored_secret = Api::<Secret>::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE)
        .get("cloud")
        .await
        .unwrap();
    stored_secret
        .metadata
        .labels
        .get_or_insert_default()
        .insert("replaced".to_owned(), "yes".to_owned());
    let other_class = machine_class("class-b");
    let label = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    let forbidden = [
        (
            "get a MachineClass (Events take the UID from the watch)",
            code(
                Api::<MachineClass>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .get("class-a")
                    .await,
            ),
        ),
        (
            "get a Deployment (the audit only lists)",
            code(
                Api::<Deployment>::namespaced(sa.clone(), "default")
                    .get("web")
                    .await,
            ),
        ),
        (
            "patch a DaemonSet",
            code(
                Api::<DaemonSet>::namespaced(sa.clone(), "default")
                    .patch("agent", &PatchParams::default(), &label)
                    .await,
            ),
        ),
        (
            "label a Namespace (binding stays with those who may)",
            code(
                Api::<Namespace>::all(sa.clone())
                    .patch("default", &PatchParams::default(), &label)
                    .await,
            ),
        ),
        (
            "get a Namespace (only list and watch)",
            code(Api::<Namespace>::all(sa.clone()).get("default").await),
        ),
        (
            "delete a Node",
            code(Api::<Node>::all(sa.clone()).delete("node-1", &DeleteParams::default()).await),
        ),
        (
            "get a Node (only list and watch)",
            code(Api::<Node>::all(sa.clone()).get("node-1").await),
        ),
        (
            "create a MachineClass",
            code(machine_classes.create(&PostParams::default(), &other_class).await),
        ),
        (
            "update (PUT) a MachineClass",
            code(machine_classes.replace("class-a", &PostParams::default(), &class).await),
        ),
        (
            "delete a MachineClass",
            code(machine_classes.delete("class-a", &DeleteParams::default()).await),
        ),
        (
            "list MachineClasses outside machine-system",
            code(
                Api::<MachineClass>::namespaced(sa.clone(), APP_NAMESPACE)
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "update a Machine",
            code(
                Api::<Machine>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .replace("m1", &PostParams::default(), &stored_machine)
                    .await,
            ),
        ),
        (
            "patch a Machine",
            code(
                Api::<Machine>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .patch("m1", &PatchParams::default(), &label)
                    .await,
            ),
        ),
        (
            "create a Pod",
            code(
                Api::<Pod>::namespaced(sa.clone(), APP_NAMESPACE)
                    .create(&PostParams::default(), &plain_pod("intruder"))
                    .await,
            ),
        ),
        (
            "delete a Pod",
            code(
                Api::<Pod>::namespaced(sa.clone(), APP_NAMESPACE)
                    .delete("app", &DeleteParams::default())
                    .await,
            ),
        ),
        (
            "get a Pod (only list)",
            code(Api::<Pod>::namespaced(sa.clone(), APP_NAMESPACE).get("app").await),
        ),
        (
            "patch a webhook configuration that is not poolkeeper's",
            code(
                Api::<ValidatingWebhookConfiguration>::all(sa.clone())
                    .patch("someone-else", &PatchParams::default(), &label)
                    .await,
            ),
        ),
        (
            "list every webhook configuration",
            code(
                Api::<MutatingWebhookConfiguration>::all(sa.clone())
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "create a webhook configuration",
            code(
                Api::<MutatingWebhookConfiguration>::all(sa.clone())
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({"metadata": {"name": "poolkeeper-2"}}))
                            .unwrap(),
                    )
                    .await,
            ),
        ),
        (
            "delete poolkeeper's webhook configuration",
            code(
                Api::<ValidatingWebhookConfiguration>::all(sa.clone())
                    .delete("poolkeeper", &DeleteParams::default())
                    .await,
            ),
        ),
        (
            "update the placement ConfigMap",
            code(
                Api::<ConfigMap>::namespaced(sa.clone(), CONTROLLER_NAMESPACE)
                    .patch(POLICY_CONFIG_MAP, &PatchParams::default(), &label)
                    .await,
            ),
        ),
        (
            "list every ConfigMap of its namespace",
            code(
                Api::<ConfigMap>::namespaced(sa.clone(), CONTROLLER_NAMESPACE)
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "read a Secret",
            code(
                Api::<Secret>::namespaced(sa.clone(), CONTROLLER_NAMESPACE)
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "get a Secret outside machine-system",
            code(
                Api::<Secret>::namespaced(sa.clone(), APP_NAMESPACE)
                    .get("app-token")
                    .await,
            ),
        ),
        (
            "list Secrets in every namespace",
            code(
                Api::<PartialObjectMeta<Secret>>::all(sa.clone())
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "watch Secrets outside machine-system",
            watch_code(Api::<PartialObjectMeta<Secret>>::namespaced(sa.clone(), APP_NAMESPACE))
                .await,
        ),
        (
            "patch a Secret outside machine-system",
            code(
                Api::<Secret>::namespaced(sa.clone(), APP_NAMESPACE)
                    .patch("app-token", &PatchParams::default(), &label)
                    .await,
            ),
        ),
        (
            "create a Secret in machine-system",
            code(
                Api::<Secret>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({"metadata": {"name": "planted"}})).unwrap(),
                    )
                    .await,
            ),
        ),
        (
            "update (PUT) a Secret of machine-system",
            code(
                Api::<Secret>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .replace("cloud", &PostParams::default(), &stored_secret)
                    .await,
            ),
        ),
        (
            "delete a Secret of machine-system",
            code(
                Api::<Secret>::namespaced(sa.clone(), MACHINE_NAMESPACE)
                    .delete("cloud", &DeleteParams::default())
                    .await,
            ),
        ),
        (
            "get another Lease",
            code(
                Api::<Lease>::namespaced(sa.clone(), CONTROLLER_NAMESPACE)
                    .get("someone-else")
                    .await,
            ),
        ),
        (
            "write a core/v1 Event",
            code(
                Api::<CoreEvent>::namespaced(sa.clone(), APP_NAMESPACE)
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({
                            "metadata": {"name": "made-up"},
                            "involvedObject": {"kind": "Pod", "name": "app", "namespace": APP_NAMESPACE},
                        }))
                        .unwrap(),
                    )
                    .await,
            ),
        ),
    ];
    let allowed: Vec<&str> = forbidden
        .iter()
        .filter(|(_, code)| *code != 403)
        .map(|(what, _)| *what)
        .collect();
    assert!(
        allowed.is_empty(),
        "not refused with 403: {:?}",
        forbidden
            .iter()
            .filter(|(what, _)| allowed.contains(what))
            .collect::<Vec<_>>()
    );
    // Nothing was changed by the refused requests.
    let nodes = Api::<Node>::all(cluster.admin.clone());
    assert!(nodes.get_opt("node-1").await.unwrap().is_some());
    let cloud = Api::<Secret>::namespaced(cluster.admin.clone(), MACHINE_NAMESPACE)
        .get("cloud")
        .await
        .unwrap();
    assert!(
        !cloud
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("replaced")
    );
}

/// RBAC cannot restrict a verb to some fields: the `patch` on MachineClasses
/// that the finalizer needs reaches every field of a MachineClass in
/// `machine-system` (a merge patch of `spec` is accepted too, and pruned:
/// the kind has no `spec`). Pinned here so that a change of it is a
/// decision; restricting it takes an admission policy (see the crate
/// README of poolkeeper-selectors, "RBAC").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_class_patch_reaches_every_field() {
    let cluster = setup().await;
    let classes = Api::<MachineClass>::namespaced(cluster.controller.clone(), MACHINE_NAMESPACE);
    let spec = Patch::Merge(json!({"spec": {"replicas": 3}}));
    classes
        .patch("class-a", &PatchParams::default(), &spec)
        .await
        .expect("a merge patch of spec is allowed");
    let provider = Patch::Merge(json!({"providerSpec": {"machineType": "m5.xlarge"}}));
    let patched = classes
        .patch("class-a", &PatchParams::default(), &provider)
        .await
        .expect("a merge patch of providerSpec is allowed");
    assert_eq!(patched.provider_spec["machineType"], "m5.xlarge");
    assert!(
        !serde_json::to_value(&patched)
            .unwrap()
            .as_object()
            .unwrap()
            .contains_key("spec"),
        "spec is pruned"
    );
}
