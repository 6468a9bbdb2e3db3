//! Reliability under faults (RELIABILITY.md): the whole controller while
//! kube-apiserver is killed and started again, while its watches expire with
//! deletes missed, while another writer fights over a MachineClass, and
//! while the API server is unreachable but the webhook is asked to admit.
//! Every figure the tests print is in RELIABILITY.md.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::{Machine, MachineClass, NodePoolType};
use poolkeeper_bus::{Change, Event, ObjectKey, ResourceKind};
use poolkeeper_config::Config;
use poolkeeper_executor::KubeClassWriter;
use poolkeeper_testenv::{Process, TestEnv, TestEnvBuilder, WebhookCert};
use serde_json::Value;
use tempfile::TempDir;

use crate::harness::{
    Running, TIMEOUT, control_plane, deploy_webhooks, metric_sum, next_event, serving_cert,
    test_config, wait_placed, wait_until,
};
use crate::objects::{
    CONTROLLER_NAMESPACE, MACHINE_NAMESPACE, POOL_LABEL, create_class, create_machine, create_pool,
    delete_machine, expected_state, finalized_classes, has_finalizer, machine, mutate_over_tls,
    plain_pod, pool_affinity, used_classes, write_policy,
};

const EDGE_NAMESPACE: &str = "shop-edge";
/// How long kube-apiserver stays down, as when the defect was seen by hand.
const OUTAGE: Duration = Duration::from_secs(10);
/// A change made once the API server is back is acted on within this long,
/// debounce included.
const ACT_BOUND: Duration = Duration::from_secs(2);

/// What the controller of a test does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Features {
    MachineClasses,
    Placement,
    Both,
}

/// A control plane, and the configuration of the controller under test.
struct Plane {
    env: TestEnv,
    config: Config,
    /// The webhook's serving certificate (also in `cert_dir`) and its CA file.
    cert: WebhookCert,
    ca_file: std::path::PathBuf,
    _cert_dir: TempDir,
}

impl Plane {
    async fn start(builder: TestEnvBuilder, features: Features) -> Self {
        let env = control_plane(
            builder,
            &[MACHINE_NAMESPACE, CONTROLLER_NAMESPACE, EDGE_NAMESPACE],
        )
        .await;
        let (cert_dir, cert) = serving_cert();
        let ca_file = cert_dir.path().join("ca.crt");
        let mut config = test_config(MACHINE_NAMESPACE, cert_dir.path());
        config.machine_classes.enabled = features != Features::Placement;
        config.placement.enabled = features != Features::MachineClasses;
        config.webhook.enabled = config.placement.enabled;
        if config.placement.enabled {
            placement_cluster(&env).await;
        }
        Self {
            env,
            config,
            cert,
            ca_file,
            _cert_dir: cert_dir,
        }
    }

    fn classes(&self) -> Api<MachineClass> {
        Api::namespaced(self.env.client(), MACHINE_NAMESPACE)
    }

    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.env.client(), MACHINE_NAMESPACE)
    }

    fn finalizer(&self) -> String {
        self.config.machine_classes.finalizer.clone()
    }

    /// The webhooks of `deploy/webhooks` registered with the apiserver and in
    /// effect (a dry-run Pod of the edge namespace comes back mutated).
    async fn register_webhooks(&self, running: &Running) {
        let port = running.webhook.expect("the webhook is enabled").port();
        self.env
            .register_webhooks(deploy_webhooks(port, &self.cert.ca_pem))
            .await
            .expect("the webhooks are registered");
        wait_placed(&self.env, EDGE_NAMESPACE, "edge").await;
    }
}

/// An edge pool with one Ready node, and the policy binding the edge
/// namespace to it.
async fn placement_cluster(env: &TestEnv) {
    create_pool(env, "edge", NodePoolType::Edge, &["edge-1"]).await;
    write_policy(&env.client(), &[(EDGE_NAMESPACE, "edge", "enforce")]).await;
}

/// Polls every 20 ms, for at most `limit`, until `name` has (or lacks)
/// `finalizer`; how long that took, `None` past the limit.
async fn time_to_finalizer(
    classes: &Api<MachineClass>,
    name: &str,
    finalizer: &str,
    present: bool,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    while since.elapsed() < limit {
        if has_finalizer(classes, name, finalizer).await == present {
            return Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The value of the series `name{labels}` in `/metrics`.
async fn metric(running: &Running, series: &str) -> u64 {
    metric_sum(&running.metrics().await, series)
}

/// Machines and Pods created one after the other, each create retried until
/// the API server takes it, until `stop` is set (at most `MAX_CREATED` and
/// `TIMEOUT` each).
struct Creator {
    stop: Arc<AtomicBool>,
    /// Creates that the API server did not take and that were retried.
    retried: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<u64>,
}

const MAX_CREATED: u64 = 200;
const CREATE_PAUSE: Duration = Duration::from_millis(250);
/// The classes the creator's Machines use, in turn.
const CREATED_CLASSES: [&str; 3] = ["c0", "c1", "c2"];

impl Creator {
    fn start(client: Client) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let retried = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(create_until_stopped(
            client,
            Arc::clone(&stop),
            Arc::clone(&retried),
        ));
        Self {
            stop,
            retried,
            task,
        }
    }

    /// Stops and returns how many Machines (and as many Pods) were created.
    async fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        let created = self.task.await.expect("the creator finishes");
        (created, self.retried.load(Ordering::SeqCst))
    }
}

async fn create_until_stopped(
    client: Client,
    stop: Arc<AtomicBool>,
    retried: Arc<AtomicU64>,
) -> u64 {
    let machines: Api<Machine> = Api::namespaced(client.clone(), MACHINE_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client, EDGE_NAMESPACE);
    let params = PostParams::default();
    let mut created = 0;
    while created < MAX_CREATED && !stop.load(Ordering::SeqCst) {
        let class = CREATED_CLASSES[created as usize % CREATED_CLASSES.len()];
        let machine = machine(&format!("m-{created:03}"), class);
        retry_create(&retried, || machines.create(&params, &machine)).await;
        let pod = plain_pod(&format!("p-{created:03}"));
        retry_create(&retried, || pods.create(&params, &pod)).await;
        created += 1;
        tokio::time::sleep(CREATE_PAUSE).await;
    }
    created
}

/// Retries `create` every 100 ms for at most `TIMEOUT`; an AlreadyExists
/// after a retry means the first attempt was stored (its answer was lost).
async fn retry_create<T, F, Fut>(retried: &AtomicU64, mut create: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + TIMEOUT;
    let mut attempt = 0;
    loop {
        match create().await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 && attempt > 0 => return,
            Err(error) => {
                assert!(Instant::now() < deadline, "a create kept failing: {error}");
                retried.fetch_add(1, Ordering::Relaxed);
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// kube-apiserver is killed (SIGKILL) while Machines and Pods are being
/// created and started again 10 s later with the same flags, ports and etcd.
/// Every watch reconnects (one failure streak per kind), the 410 it gets is
/// relisted at once, the class whose Machine went as the outage began loses
/// its finalizer (retried if the outage failed it), a Machine created then has
/// its class protected within 2 s, and in the end the finalizers are exactly
/// on the classes in use and every Pod was placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_restart_while_machines_and_pods_are_created_loses_nothing() {
    let mut plane = Plane::start(TestEnv::builder(), Features::Both).await;
    let (classes, machines, finalizer) = (plane.classes(), plane.machines(), plane.finalizer());
    let running = Running::start(&plane.config, &plane.env).await;
    running.wait_ready().await;
    plane.register_webhooks(&running).await;
    let all = ["c0", "c1", "c2", "c3", "c4"];
    for name in all {
        create_class(&classes, name).await;
    }
    // c3 is in use until its Machine goes during the test; c4 until a
    // Machine uses it once the API server is back.
    create_machine(&machines, "m-c3", "c3").await;
    let creator = Creator::start(plane.env.client());
    tokio::time::sleep(Duration::from_secs(2)).await;
    delete_machine(&machines, "m-c3").await;

    plane
        .env
        .kill(Process::ApiServer)
        .expect("kill kube-apiserver");
    // Mid-outage, every watch has failed by now.
    tokio::time::sleep(OUTAGE / 2).await;
    let (status, body) = running.get("/readyz?verbose").await;
    tokio::time::sleep(OUTAGE / 2).await;
    let ready_in = plane
        .env
        .start(Process::ApiServer)
        .await
        .expect("kube-apiserver starts again");
    // c3's removal, failed during the outage, is retried every
    // `executor.shortRetry`. A retry sent while the API server starts is held
    // until it serves, and passes run one at a time: the next change is
    // timed once that write is in.
    let removed = time_to_finalizer(&classes, "c3", &finalizer, false, Instant::now(), TIMEOUT)
        .await
        .expect("c3's finalizer removed once the API server is back");
    let changed = Instant::now();
    machines
        .create(&PostParams::default(), &machine("m-c4", "c4"))
        .await
        .expect("create m-c4 once the API server is back");
    let acted = time_to_finalizer(&classes, "c4", &finalizer, true, changed, TIMEOUT).await;
    println!(
        "apiserver restart: down {OUTAGE:?}, ready {ready_in:?} after its start; c3's \
         finalizer removed {removed:?} after that; a Machine created then had its class \
         protected {acted:?} later; /readyz during the outage: {status}\n{body}"
    );
    assert_eq!(status, 200, "readiness stays during an outage: {body}");
    let acted = acted.expect("c4 protected");
    assert!(acted < ACT_BOUND, "c4 protected {acted:?} after the change");

    // Creating goes on a while after the restart, then everything settles.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (created, retried) = creator.finish().await;
    let used: Vec<String> = used_classes(&machines).await.into_iter().collect();
    let expected = expected_state(&all, &used);
    assert_eq!(
        expected.values().filter(|used| **used).count(),
        4,
        "c0, c1, c2 and c4 in use, c3 not: {expected:?}"
    );
    wait_until(
        "the finalizers are exactly on the classes in use",
        || async { (finalized_classes(&classes, &finalizer).await == expected).then_some(()) },
    )
    .await;
    check_nothing_missed(&plane, &running, created).await;
    let totals = running.executor_totals().await;
    println!(
        "apiserver restart: {created} Machines and {created} Pods created, {retried} creates \
         retried during the outage; executor {totals:?}; watch failures {}",
        watch_failures(&running).await
    );
    running.stop().await;
}

/// Every Pod created went through the webhook and was placed; the index
/// holds every Machine; one watch failure streak per kind.
async fn check_nothing_missed(plane: &Plane, running: &Running, created: u64) {
    let pods: Api<Pod> = Api::namespaced(plane.env.client(), EDGE_NAMESPACE);
    let listed = pods
        .list(&ListParams::default())
        .await
        .expect("listing Pods");
    assert_eq!(
        listed.items.len() as u64,
        created,
        "every Pod was created once"
    );
    let unplaced: Vec<&str> = listed
        .items
        .iter()
        .filter(|pod| pool_affinity(pod).as_deref() != Some("edge"))
        .map(|pod| pod.metadata.name.as_deref().unwrap_or_default())
        .collect();
    assert!(
        unplaced.is_empty(),
        "Pods admitted without placement: {unplaced:?}"
    );
    let machines = plane
        .machines()
        .list(&ListParams::default())
        .await
        .expect("listing Machines")
        .items
        .len() as u64;
    assert_eq!(machines, created + 1, "the creator's Machines and m-c4");
    let indexed = wait_until("the index holds every Machine", || async {
        let indexed = metric(running, r#"poolkeeper_index_objects{kind="Machine"}"#).await;
        (indexed == machines).then_some(indexed)
    })
    .await;
    assert_eq!(indexed, machines);
    for kind in [
        "MachineClass",
        "Machine",
        "NodePool",
        "Node",
        "ConfigMap",
        "Secret",
    ] {
        let failures = metric(
            running,
            &format!("poolkeeper_watch_failures_total{{kind=\"{kind}\"}}"),
        )
        .await;
        assert_eq!(failures, 1, "one failure streak of the {kind} watch");
    }
}

async fn watch_failures(running: &Running) -> u64 {
    metric(running, "poolkeeper_watch_failures_total").await
}

/// The controller's watches are cut off (through the testenv proxy) while
/// Machines are deleted, and etcd is compacted past their resourceVersion
/// (no watch cache, so the watches go to etcd): reconnecting gets 410, the
/// relist reports the deletes, and the executor removes the finalizer of
/// the class whose last Machine went while nobody watched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_missed_during_a_watch_expiry_are_acted_on() {
    let plane = Plane::start(
        TestEnv::builder().watch_cache(false),
        Features::MachineClasses,
    )
    .await;
    let (classes, machines, finalizer) = (plane.classes(), plane.machines(), plane.finalizer());
    let proxy = plane.env.proxy().await.expect("the apiserver proxy");
    let client = proxy.client();
    let mut running =
        Running::start_as(&plane.config, client.clone(), KubeClassWriter::new(client)).await;
    running.wait_ready().await;
    for name in ["busy", "emptied"] {
        create_class(&classes, name).await;
    }
    for (name, class) in [("kept", "busy"), ("gone-1", "busy"), ("last", "emptied")] {
        create_machine(&machines, name, class).await;
    }
    wait_until("both classes protected", || async {
        let state = finalized_classes(&classes, &finalizer).await;
        (state.values().filter(|has| **has).count() == 2).then_some(())
    })
    .await;

    proxy.sever().await;
    next_event(&mut running.events, "the Machine watch failing", |event| {
        matches!(
            event,
            Event::WatchFailed {
                kind: ResourceKind::Machine,
                ..
            }
        )
    })
    .await;
    for name in ["gone-1", "last"] {
        delete_machine(&machines, name).await;
    }
    let revision = plane.env.compact_etcd().await.expect("compact etcd");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        has_finalizer(&classes, "emptied", &finalizer).await,
        "nobody saw the delete yet"
    );

    proxy.restore().await.expect("restore the proxy");
    let restored = Instant::now();
    let last = ObjectKey::namespaced(MACHINE_NAMESPACE, "last");
    next_event(&mut running.events, "the delete of last from the relist", |event| {
        matches!(event, Event::ResourceChanged { kind: ResourceKind::Machine, key, change: Change::Deleted, initial: false, .. } if *key == last)
    })
    .await;
    let reported = restored.elapsed();
    let acted = time_to_finalizer(&classes, "emptied", &finalizer, false, restored, TIMEOUT)
        .await
        .expect("emptied loses its finalizer");
    assert!(
        has_finalizer(&classes, "busy", &finalizer).await,
        "busy is still in use"
    );
    println!(
        "watch expiry: compacted at revision {revision}; the missed delete reported {reported:?} \
         and the finalizer removed {acted:?} after the watches could reconnect"
    );
    assert!(acted < ACT_BOUND, "acted on {acted:?} after the reconnect");
    running.stop().await;
}

const OTHER_FINALIZER: &str = "example.com/other";
const STORM: Duration = Duration::from_secs(15);
const STORM_PAUSE: Duration = Duration::from_millis(20);

/// What the other writer did.
#[derive(Debug, Default)]
struct OtherWriter {
    writes: u64,
    conflicts: u64,
    /// Its last write: the `storm` label and whether its finalizer was on.
    last: Option<(String, bool)>,
}

/// Another controller's way: read, change the labels (and, with
/// `finalizer_too`, its own finalizer every other round), replace with the
/// resourceVersion read (a 409 means someone else wrote in between: read
/// again). Never touches poolkeeper's finalizer.
async fn other_writer(
    classes: Api<MachineClass>,
    name: &str,
    until: Instant,
    finalizer_too: bool,
) -> OtherWriter {
    let mut done = OtherWriter::default();
    let mut round = 0_u64;
    while Instant::now() < until {
        round += 1;
        let mut class = classes.get(name).await.expect("the other writer reads");
        let label = format!("round-{round}");
        class
            .metadata
            .labels
            .get_or_insert_default()
            .insert("storm".to_owned(), label.clone());
        let finalizers = class.metadata.finalizers.get_or_insert_default();
        let mut with_finalizer = finalizers.iter().any(|f| f == OTHER_FINALIZER);
        if finalizer_too {
            with_finalizer = round.is_multiple_of(2);
            finalizers.retain(|f| f != OTHER_FINALIZER);
            if with_finalizer {
                finalizers.push(OTHER_FINALIZER.to_owned());
            }
        }
        match classes.replace(name, &PostParams::default(), &class).await {
            Ok(_) => {
                done.writes += 1;
                done.last = Some((label, with_finalizer));
            }
            Err(kube::Error::Api(status)) if status.code == 409 => done.conflicts += 1,
            Err(error) => panic!("the other writer failed: {error}"),
        }
        tokio::time::sleep(STORM_PAUSE).await;
    }
    done
}

/// Another writer keeps changing a MachineClass's labels and its own
/// finalizer while poolkeeper adds and removes its finalizer as a Machine
/// comes and goes: both writers' changes survive, poolkeeper converges, and
/// the writes and conflicts are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_storm_keeps_both_writers_changes() {
    conflict_storm(true).await;
}

/// A writer that changes only labels changes nothing poolkeeper decides on:
/// it neither restarts the debounce nor fails poolkeeper's patches, so each
/// finalizer change takes about the debounce, not `maxDelay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_writer_does_not_delay_the_finalizer() {
    let (mut toggles, max_delay) = conflict_storm(false).await;
    toggles.sort();
    let median = toggles[toggles.len() / 2];
    assert!(
        median < max_delay / 2,
        "the median add or remove took {median:?}: the label writes held the debounce open"
    );
}

/// Runs the storm and checks that both writers' last changes survive;
/// returns how long each add and remove of poolkeeper's finalizer took, and
/// the `reconciler.maxDelay` of the run.
async fn conflict_storm(finalizer_too: bool) -> (Vec<Duration>, Duration) {
    let plane = Plane::start(TestEnv::builder(), Features::MachineClasses).await;
    let (classes, machines, finalizer) = (plane.classes(), plane.machines(), plane.finalizer());
    let running = Running::start(&plane.config, &plane.env).await;
    running.wait_ready().await;
    create_class(&classes, "contested").await;
    let before = running.executor_totals().await;
    let started = Instant::now();
    let storm = tokio::spawn(other_writer(
        classes.clone(),
        "contested",
        started + STORM,
        finalizer_too,
    ));

    // The Machine comes and goes: poolkeeper's finalizer must follow.
    let mut toggles = Vec::new();
    let mut round = 0;
    while started.elapsed() + Duration::from_secs(3) < STORM {
        round += 1;
        let name = format!("user-{round}");
        let changed = Instant::now();
        create_machine(&machines, &name, "contested").await;
        let added =
            time_to_finalizer(&classes, "contested", &finalizer, true, changed, TIMEOUT).await;
        let changed = Instant::now();
        delete_machine(&machines, &name).await;
        let removed =
            time_to_finalizer(&classes, "contested", &finalizer, false, changed, TIMEOUT).await;
        toggles.push(added.expect("finalizer added"));
        toggles.push(removed.expect("finalizer removed"));
    }
    create_machine(&machines, "final-user", "contested").await;
    let other = storm.await.expect("the other writer finishes");
    let (label, other_finalizer) = other.last.clone().expect("the other writer wrote");

    let class = wait_until("both writers' last changes on the class", || async {
        let class = classes.get("contested").await.ok()?;
        let finalizers = class.metadata.finalizers.clone().unwrap_or_default();
        let ours = finalizers.contains(&finalizer);
        ours.then_some(class)
    })
    .await;
    let finalizers = class.metadata.finalizers.clone().unwrap_or_default();
    assert_eq!(
        finalizers.iter().any(|f| f == OTHER_FINALIZER),
        other_finalizer,
        "the other writer's finalizer as it left it: {finalizers:?}"
    );
    assert_eq!(
        class.metadata.labels.as_ref().and_then(|l| l.get("storm")),
        Some(&label),
        "the other writer's last label"
    );
    let totals = running.executor_totals().await;
    let writer = if finalizer_too {
        "labels and finalizer"
    } else {
        "labels only"
    };
    let mut sorted = toggles.clone();
    sorted.sort();
    println!(
        "conflict storm over {STORM:?} ({writer}): other writer {} writes, {} conflicts; \
         poolkeeper {} writes, {} conflicts, {} errors; {} finalizer adds and removes, \
         median {:?}, slowest {:?}",
        other.writes,
        other.conflicts,
        totals.writes - before.writes,
        totals.conflicts - before.conflicts,
        totals.errors - before.errors,
        toggles.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
    assert_eq!(totals.errors, before.errors, "{totals:?}");
    // An add and a remove per toggle, and the add for the final user.
    assert!(totals.writes - before.writes >= toggles.len() as u64);
    running.stop().await;
    (toggles, plane.config.reconciler.max_delay)
}

/// A mutate review over TLS, as `objects::mutate_over_tls`, and how long the
/// answer took.
async fn timed_mutate_over_tls(port: u16, ca_file: &Path) -> (Value, Duration) {
    let sent = Instant::now();
    let answer = mutate_over_tls(port, ca_file, EDGE_NAMESPACE)
        .await
        .expect("the webhook answers");
    (answer, sent.elapsed())
}

/// The review allowed the Pod with a patch that pins it to the edge pool.
fn assert_placed(review: &Value) {
    let response = &review["response"];
    assert_eq!(response["allowed"], true, "{review}");
    let patch = response["patch"].as_str().expect("a patch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .expect("a base64 patch");
    let patch = String::from_utf8(patch).expect("a UTF-8 patch");
    assert!(
        patch.contains(POOL_LABEL) && patch.contains("edge"),
        "{patch}"
    );
}

/// While kube-apiserver is down, the webhook keeps answering from the last
/// index, and `/readyz` stays 200: failing it would take the only
/// replicas' endpoints away and turn a control-plane blip into admission
/// failures for every bound Pod (failurePolicy Fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_answers_from_the_last_index_while_the_apiserver_is_down() {
    let mut plane = Plane::start(TestEnv::builder(), Features::Placement).await;
    let mut running = Running::start(&plane.config, &plane.env).await;
    running.wait_ready().await;
    let port = running.webhook.expect("the webhook is enabled").port();
    let (review, before) = timed_mutate_over_tls(port, &plane.ca_file).await;
    assert_placed(&review);

    plane
        .env
        .kill(Process::ApiServer)
        .expect("kill kube-apiserver");
    let placement_watches = BTreeSet::from([
        ResourceKind::Node,
        ResourceKind::NodePool,
        ResourceKind::ConfigMap,
        ResourceKind::Namespace,
        ResourceKind::PlacementException,
    ]);
    let mut failing = BTreeSet::new();
    while failing != placement_watches {
        next_event(
            &mut running.events,
            "the placement watches failing",
            |event| {
                if let Event::WatchFailed { kind, .. } = event {
                    failing.insert(*kind);
                }
                failing == placement_watches
            },
        )
        .await;
    }
    let mut during = Vec::new();
    for _ in 0..5 {
        let (review, took) = timed_mutate_over_tls(port, &plane.ca_file).await;
        assert_placed(&review);
        during.push(took);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (ready, readyz) = running.get("/readyz?verbose").await;
    let (live, healthz) = running.get("/healthz").await;
    println!(
        "webhook during the outage: answered in {during:?} (before: {before:?}); /readyz \
         {ready}:\n{readyz}/healthz {live}: {healthz}"
    );
    assert_eq!(
        ready, 200,
        "readiness stays while the API server is down: {readyz}"
    );
    assert_eq!(live, 200, "{healthz}");

    plane
        .env
        .start(Process::ApiServer)
        .await
        .expect("kube-apiserver starts again");
    let (review, _) = timed_mutate_over_tls(port, &plane.ca_file).await;
    assert_placed(&review);
    running.stop().await;
}
