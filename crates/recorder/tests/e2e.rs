//! The event recorder against a real kube-apiserver and etcd: bus events in,
//! `events.k8s.io/v1` Events out.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::MachineClass;
use poolkeeper_bus::{
    AuditViolation, Bus, Change, ClassOutcome, Event, Mode, ObjectKey, Requeue, ResourceKind,
};
use poolkeeper_config::Config;
use poolkeeper_recorder::{EventRecorder, RecorderSettings};
use poolkeeper_supervisor::testing::{Running, spawn};
use poolkeeper_testenv::{TestEnv, eventually};
use serde_json::json;

const NS: &str = "machine-system";
const INSTANCE: &str = "poolkeeper-0_1a2b3c4d";
const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:poolkeeper-system:poolkeeper";
const WAIT: Duration = Duration::from_secs(30);

/// A client acting as poolkeeper's ServiceAccount with the RBAC of
/// `deploy/`, so the recorder runs with no more rights than deployed.
async fn controller_identity(env: &TestEnv) -> Client {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    env.apply_files([deploy.join("namespace.yaml"), deploy.join("rbac.yaml")])
        .await
        .expect("apply deploy/namespace.yaml and deploy/rbac.yaml");
    env.impersonating(SERVICE_ACCOUNT)
        .await
        .expect("a client acting as poolkeeper's ServiceAccount")
}

/// A control plane with the CRDs and a recorder running as poolkeeper.
struct Setup {
    _env: TestEnv,
    client: Client,
    bus: Bus,
    running: Running,
    /// The UID of each class created, as the index would hold it.
    uids: parking_lot::Mutex<std::collections::HashMap<String, String>>,
}

impl Setup {
    async fn start() -> Self {
        let env = TestEnv::builder()
            .crds(poolkeeper_api::crds())
            .start()
            .await
            .expect("start the local control plane (see xtask/testenv)");
        env.create_namespace(NS).await.expect("namespace");
        let client = env.client();
        let bus = Bus::default();
        let settings = RecorderSettings::from(&Config::default());
        let identity = controller_identity(&env).await;
        let recorder = EventRecorder::new(settings, &bus, identity, INSTANCE);
        bus.start();
        let mut running = spawn(Box::new(recorder));
        running.wait_ready(WAIT).await;
        Self {
            _env: env,
            client,
            bus,
            running,
            uids: Default::default(),
        }
    }

    async fn create_class(&self, name: &str) -> String {
        let classes: Api<MachineClass> = Api::namespaced(self.client.clone(), NS);
        let class = MachineClass::new(name, json!({"image": "ubuntu"}));
        let created = classes
            .create(&PostParams::default(), &class)
            .await
            .expect("create class");
        let uid = created.metadata.uid.expect("a created object has a UID");
        self.uids.lock().insert(name.to_owned(), uid.clone());
        uid
    }

    async fn delete_class(&self, name: &str) {
        let classes: Api<MachineClass> = Api::namespaced(self.client.clone(), NS);
        classes
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete class");
    }

    /// What the executor publishes after reconciling class `name`: with the
    /// UID its index snapshot held (none for a class never seen).
    fn reconciled(&self, name: &str, outcome: ClassOutcome) {
        let (requeue, requeue_after) = match outcome {
            ClassOutcome::Error => (Requeue::Short, Duration::from_secs(5)),
            ClassOutcome::Conflict => (Requeue::Conflict, Duration::from_millis(200)),
            ClassOutcome::Gone => (Requeue::Never, Duration::ZERO),
            _ => (Requeue::Long, Duration::from_secs(600)),
        };
        self.bus.publish(Event::MachineClassReconciled {
            key: ObjectKey::namespaced(NS, name),
            uid: self.uids.lock().get(name).cloned(),
            outcome,
            requeue,
            requeue_after,
            duration: Duration::from_millis(2),
        });
    }

    /// What the MachineClass watcher publishes.
    fn class_changed(&self, name: &str, change: Change) {
        self.bus.publish(Event::ResourceChanged {
            kind: ResourceKind::MachineClass,
            key: ObjectKey::namespaced(NS, name),
            change,
            initial: false,
            related: Vec::new(),
        });
    }

    async fn events(&self, namespace: &str) -> Vec<KubeEvent> {
        let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), namespace);
        events
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
    }

    /// Waits for an Event in `namespace` that `matches`.
    async fn wait_for(
        &self,
        namespace: &str,
        what: &str,
        matches: impl Fn(&KubeEvent) -> bool,
    ) -> KubeEvent {
        let matches = &matches;
        let found = eventually(what, WAIT, || async move {
            self.events(namespace)
                .await
                .into_iter()
                .find(|e| matches(e))
        })
        .await;
        match found {
            Ok(event) => event,
            Err(error) => panic!("{error}; events: {:#?}", self.events(namespace).await),
        }
    }

    async fn stop(self) {
        let result = self.running.stop().await;
        assert!(result.is_ok(), "the recorder failed: {result:?}");
    }
}

fn reason(event: &KubeEvent) -> &str {
    event.reason.as_deref().unwrap_or_default()
}

/// The regarding object's (name, uid).
fn regarding(event: &KubeEvent) -> (Option<&str>, Option<&str>) {
    let reference = event.regarding.as_ref().expect("regarding");
    (reference.name.as_deref(), reference.uid.as_deref())
}

fn series_count(event: &KubeEvent) -> i32 {
    event.series.as_ref().map_or(1, |series| series.count)
}

fn with_reason<'a>(events: &'a [KubeEvent], wanted: &str) -> Vec<&'a KubeEvent> {
    events.iter().filter(|e| reason(e) == wanted).collect()
}

#[tokio::test]
async fn finalizer_changes_and_failures_become_aggregated_events() {
    let setup = Setup::start().await;
    let uid = setup.create_class("worker").await;

    setup.reconciled("worker", ClassOutcome::FinalizerAdded);
    let added = setup
        .wait_for(NS, "FinalizerAdded Event", |e| {
            reason(e) == "FinalizerAdded"
        })
        .await;
    assert_eq!(added.type_.as_deref(), Some("Normal"));
    assert_eq!(added.action.as_deref(), Some("AddFinalizer"));
    assert!(
        added
            .note
            .as_deref()
            .unwrap_or_default()
            .contains(FINALIZER)
    );
    assert_eq!(added.reporting_controller.as_deref(), Some("poolkeeper"));
    assert_eq!(added.reporting_instance.as_deref(), Some(INSTANCE));
    assert_eq!(added.series, None);
    let reference = added.regarding.as_ref().expect("regarding");
    assert_eq!(
        (
            reference.api_version.as_deref(),
            reference.kind.as_deref(),
            reference.namespace.as_deref(),
            reference.name.as_deref(),
            reference.uid.as_deref(),
        ),
        (
            Some("machine.sapcloud.io/v1alpha1"),
            Some("MachineClass"),
            Some(NS),
            Some("worker"),
            Some(uid.as_str()),
        )
    );

    setup.reconciled("worker", ClassOutcome::FinalizerRemoved);
    let removed = setup
        .wait_for(NS, "FinalizerRemoved Event", |e| {
            reason(e) == "FinalizerRemoved"
        })
        .await;
    assert_eq!(removed.type_.as_deref(), Some("Normal"));
    assert_eq!(regarding(&removed), (Some("worker"), Some(uid.as_str())));
    assert_eq!(setup.events(NS).await.len(), 2);

    for _ in 0..5 {
        setup.reconciled("worker", ClassOutcome::Error);
    }
    let failed = setup
        .wait_for(NS, "ReconcileFailed Event counted 5 times", |e| {
            reason(e) == "ReconcileFailed" && series_count(e) == 5
        })
        .await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(regarding(&failed), (Some("worker"), Some(uid.as_str())));
    let events = setup.events(NS).await;
    assert_eq!(
        with_reason(&events, "ReconcileFailed").len(),
        1,
        "{events:#?}"
    );

    steady_state_writes_nothing(&setup).await;
    shown_by_kubectl_describe(&setup, "worker", &uid).await;
    setup.stop().await;
}

/// Periodic passes of a settled class, conflicts and vanished classes: no
/// Event. A finalizer change of another class published after them marks
/// the point where the recorder has handled them all.
async fn steady_state_writes_nothing(setup: &Setup) {
    let before = setup.events(NS).await;
    for _ in 0..100 {
        setup.reconciled("worker", ClassOutcome::Unchanged);
    }
    for outcome in [
        ClassOutcome::Unused,
        ClassOutcome::Gone,
        ClassOutcome::Conflict,
    ] {
        setup.reconciled("worker", outcome);
    }
    setup.class_changed("worker", Change::Updated);
    let marker_uid = setup.create_class("marker").await;
    setup.reconciled("marker", ClassOutcome::FinalizerAdded);
    setup
        .wait_for(NS, "the marker's Event", |e| {
            regarding(e) == (Some("marker"), Some(marker_uid.as_str()))
        })
        .await;
    let after = setup.events(NS).await;
    assert_eq!(after.len(), before.len() + 1, "{after:#?}");
    let failed = with_reason(&after, "ReconcileFailed");
    assert_eq!(series_count(failed[0]), 5, "unchanged by the steady state");
}

/// `kubectl describe` finds an object's Events through the core/v1 API by
/// the involved object's kind, name, namespace and UID.
async fn shown_by_kubectl_describe(setup: &Setup, name: &str, uid: &str) {
    let core: Api<CoreEvent> = Api::namespaced(setup.client.clone(), NS);
    let selector = format!(
        "involvedObject.kind=MachineClass,involvedObject.name={name},\
         involvedObject.namespace={NS},involvedObject.uid={uid}"
    );
    let found = core
        .list(&ListParams::default().fields(&selector))
        .await
        .expect("list core/v1 events");
    let mut reasons: Vec<&str> = found
        .items
        .iter()
        .filter_map(|e| e.reason.as_deref())
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        ["FinalizerAdded", "FinalizerRemoved", "ReconcileFailed"]
    );
    let failed = found
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("ReconcileFailed"))
        .expect("ReconcileFailed");
    // describe shows it as "(x5 over …)".
    let count = failed.series.as_ref().and_then(|series| series.count);
    assert_eq!(count, Some(5), "{failed:#?}");
}

#[tokio::test]
async fn events_follow_the_class_identity_and_reach_other_objects() {
    let setup = Setup::start().await;
    let first_uid = setup.create_class("worker").await;
    setup.reconciled("worker", ClassOutcome::FinalizerAdded);
    setup
        .wait_for(NS, "FinalizerAdded of the first class", |e| {
            regarding(e) == (Some("worker"), Some(first_uid.as_str()))
        })
        .await;

    // The last finalizer of a class being deleted goes: the class is gone
    // by the time the Event is written, and the UID it had is still known.
    setup.delete_class("worker").await;
    setup.reconciled("worker", ClassOutcome::FinalizerRemoved);
    let removed = setup
        .wait_for(NS, "FinalizerRemoved of the deleted class", |e| {
            reason(e) == "FinalizerRemoved"
        })
        .await;
    assert_eq!(
        regarding(&removed),
        (Some("worker"), Some(first_uid.as_str()))
    );

    // A new class of the same name is another object.
    setup.class_changed("worker", Change::Deleted);
    let second_uid = setup.create_class("worker").await;
    setup.class_changed("worker", Change::Created);
    setup.reconciled("worker", ClassOutcome::FinalizerAdded);
    setup
        .wait_for(NS, "FinalizerAdded of the recreated class", |e| {
            regarding(e) == (Some("worker"), Some(second_uid.as_str()))
        })
        .await;

    // A class this recorder never saw and that is gone: no UID to give.
    setup.reconciled("ghost", ClassOutcome::FinalizerRemoved);
    setup
        .wait_for(NS, "FinalizerRemoved of a vanished class", |e| {
            regarding(e) == (Some("ghost"), None)
        })
        .await;

    warning_on_a_pod(&setup).await;
    setup.stop().await;
}

/// What the audit publishes: a round with a violation found for the first
/// time becomes a Warning on the Pod, regarding it by UID.
async fn warning_on_a_pod(setup: &Setup) {
    let namespace = "shop";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(setup.client.clone());
    let shop = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    namespaces
        .create(&PostParams::default(), &shop)
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    }))
    .unwrap();
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let uid = pod.metadata.uid.clone().expect("uid");
    setup.bus.publish(Event::AuditCompleted {
        pods: 1,
        duration: Duration::from_millis(3),
        counts: Vec::new(),
        violations: vec![AuditViolation {
            namespace: namespace.to_owned(),
            pod: "web".to_owned(),
            kind: "Pod",
            api_version: "v1",
            name: "web".to_owned(),
            uid: uid.clone(),
            mode: Mode::Enforce,
            first_found: true,
            pool: "hangzhou".to_owned(),
            reason: "outside_pool",
            node: Some("n1".to_owned()),
            message: "node n1 is outside pool hangzhou".to_owned(),
        }],
        truncated: false,
        results: Default::default(),
    });
    let event = setup
        .wait_for(namespace, "the Pod's Warning", |e| {
            reason(e) == "OutsidePool"
        })
        .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(regarding(&event), (Some("web"), Some(uid.as_str())));
    assert_eq!(
        event.note.as_deref(),
        Some("node n1 is outside pool hangzhou (binding mode enforce)")
    );
}
