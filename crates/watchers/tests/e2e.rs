//! The watchers against a real kube-apiserver and etcd.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::{ClassSpec, Machine, MachineClass, MachineSpec, NodePool, NodePoolSpec};
use poolkeeper_bus::{Bus, Change, Event, IntoEnumIterator, ObjectKey, ResourceKind};
use poolkeeper_config::Config;
use poolkeeper_index::{Index, PoolType};
use poolkeeper_supervisor::testing::{BusRecorder, Running, spawn};
use poolkeeper_testenv::{Process, TestEnv, TestEnvBuilder};
use poolkeeper_watchers::{WatcherSettings, Watchers};
use serde_json::json;

const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const WAIT: Duration = Duration::from_secs(30);

/// A running set of watcher components and the bus they publish on.
struct Started {
    bus: Bus,
    /// Every event since the watchers were built.
    recorder: BusRecorder,
    /// The watchers, then the sync tracker.
    components: Vec<Running>,
}

impl Started {
    /// Builds the watchers over `index` and starts them.
    fn new(client: &Client, index: &Arc<Index>, settings: &WatcherSettings) -> Self {
        let bus = Bus::default();
        let watchers = Watchers::new(settings, &bus, client.clone(), Arc::clone(index));
        let recorder = BusRecorder::new(&bus);
        bus.start();
        let components = watchers.into_components().into_iter().map(spawn).collect();
        Self {
            bus,
            recorder,
            components,
        }
    }

    /// Waits for the `index` readiness (the sync tracker) and returns every
    /// event published until `IndexSynchronized`.
    async fn synchronized(&mut self) -> Vec<Event> {
        let tracker = self.components.last_mut().expect("the sync tracker");
        tracker.wait_ready(WAIT).await;
        self.recorder
            .wait_for(WAIT, |e| *e == Event::IndexSynchronized)
            .await;
        let mut events = self.recorder.events();
        let end = events
            .iter()
            .position(|e| *e == Event::IndexSynchronized)
            .expect("IndexSynchronized recorded");
        events.truncate(end + 1);
        events
    }

    /// Records the events published from now on.
    fn phase(&self) -> BusRecorder {
        BusRecorder::new(&self.bus)
    }

    async fn stop(self) {
        for component in self.components {
            let result = component.stop().await;
            assert!(result.is_ok(), "a watcher component failed: {result:?}");
        }
    }
}

/// The default configuration with the Machines in `namespace`, lists of 2
/// objects a page, placement `enabled` and its ConfigMap `config_map`.
fn config(namespace: &str, placement: bool, config_map: &str) -> Config {
    let yaml = format!(
        "namespace: {namespace}\nwatchers: {{pageSize: 2}}\n\
         placement: {{enabled: {placement}, policyConfigMap: {{name: {config_map}}}}}\n"
    );
    Config::from_yaml_str(&yaml).expect("a valid configuration")
}

/// Matches the `ResourceChanged` of `key`, whatever it names as related.
fn changed(
    kind: ResourceKind,
    key: &ObjectKey,
    change: Change,
    initial: bool,
) -> impl Fn(&Event) -> bool + use<> {
    let key = key.clone();
    move |event| {
        matches!(event, Event::ResourceChanged { kind: k, key: c, change: ch, initial: i, .. }
            if *k == kind && *c == key && *ch == change && *i == initial)
    }
}

fn related(event: &Event) -> Vec<ObjectKey> {
    match event {
        Event::ResourceChanged { related, .. } => related.clone(),
        other => panic!("not a ResourceChanged: {other:?}"),
    }
}

fn machine_class(name: &str) -> MachineClass {
    MachineClass::new(name, json!({"image": "ubuntu"}))
}

fn machine(name: &str, class_name: &str) -> Machine {
    Machine::new(
        name,
        MachineSpec {
            class: ClassSpec {
                kind: Some("MachineClass".to_owned()),
                name: class_name.to_owned(),
                ..ClassSpec::default()
            },
            ..MachineSpec::default()
        },
    )
}

fn node(name: &str, pool: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
    }))
    .expect("node")
}

async fn set_node_ready(nodes: &Api<Node>, name: &str, ready: bool, heartbeat: &str) {
    let status = json!({"status": {"conditions": [{
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": "KubeletReady",
        "message": "e2e",
        "lastHeartbeatTime": heartbeat,
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch node status");
}

fn pool_of(index: &Index, node: &str) -> Option<String> {
    index
        .placement()
        .node(node)
        .and_then(|n| n.labels.get(POOL_LABEL).cloned())
}

fn names_in_pool(index: &Index, pool: &str) -> Vec<String> {
    index
        .placement()
        .nodes_in_pool(pool)
        .map(|n| n.name.to_string())
        .collect()
}

async fn start_env() -> TestEnv {
    start_env_with(TestEnv::builder()).await
}

async fn start_env_with(builder: TestEnvBuilder) -> TestEnv {
    // The checked-in CRD files, so the apiserver validates what is deployed.
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    builder
        .crd_files([crds])
        .start()
        .await
        .expect("start the local control plane (see xtask/testenv)")
}

/// Objects present before the watchers start: part of the initial list.
/// Three Machines: more than one page.
async fn create_initial_objects(client: &Client, ns: &str, config_map: &ConfigMap) {
    let pp = PostParams::default();
    let classes: Api<MachineClass> = Api::namespaced(client.clone(), ns);
    for name in ["c1", "c2"] {
        classes
            .create(&pp, &machine_class(name))
            .await
            .expect("create class");
    }
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    for name in ["m1", "m2", "m3"] {
        machines
            .create(&pp, &machine(name, "c1"))
            .await
            .expect("create machine");
    }
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&pp, &node("n1", "hangzhou"))
        .await
        .expect("create node");
    set_node_ready(&nodes, "n1", true, "2024-01-01T00:00:00Z").await;
    let pools: Api<NodePool> = Api::all(client.clone());
    pools
        .create(&pp, &NodePool::new("hangzhou", NodePoolSpec::default()))
        .await
        .expect("create pool");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "poolkeeper-system");
    config_maps
        .create(&pp, config_map)
        .await
        .expect("create config map");
}

/// The initial list: every kind synced, every object `initial`.
fn check_initial_list(before_sync: &[Event], ns: &str) {
    let synced: BTreeSet<ResourceKind> = before_sync
        .iter()
        .filter_map(|e| match e {
            Event::ResourceSynced { kind } => Some(*kind),
            _ => None,
        })
        .collect();
    assert_eq!(synced, ResourceKind::iter().collect(), "{before_sync:#?}");
    for name in ["m1", "m2", "m3"] {
        let key = ObjectKey::namespaced(ns, name);
        let is_created = changed(ResourceKind::Machine, &key, Change::Created, true);
        let created = before_sync
            .iter()
            .find(|e| is_created(e))
            .unwrap_or_else(|| panic!("initial {key} in {before_sync:#?}"));
        assert_eq!(related(created), [ObjectKey::namespaced(ns, "c1")]);
    }
    assert!(
        before_sync
            .iter()
            .all(|e| !matches!(e, Event::ResourceChanged { initial: false, .. })),
        "the first list is initial: {before_sync:#?}"
    );
}

/// A Machine is created, moved to another class and deleted; each change
/// names the classes it touched.
async fn follow_a_machine(started: &Started, index: &Index, machines: &Api<Machine>, ns: &str) {
    let m4 = ObjectKey::namespaced(ns, "m4");
    let (c1, c2) = (
        ObjectKey::namespaced(ns, "c1"),
        ObjectKey::namespaced(ns, "c2"),
    );
    let phase = started.phase();
    machines
        .create(&PostParams::default(), &machine("m4", "c1"))
        .await
        .expect("create m4");
    let created = phase
        .wait_for(
            WAIT,
            changed(ResourceKind::Machine, &m4, Change::Created, false),
        )
        .await;
    assert_eq!(related(&created), std::slice::from_ref(&c1));

    let moved = Patch::Merge(json!({"spec": {"class": {"name": "c2"}}}));
    machines
        .patch("m4", &PatchParams::default(), &moved)
        .await
        .expect("move m4");
    let updated = phase
        .wait_for(
            WAIT,
            changed(ResourceKind::Machine, &m4, Change::Updated, false),
        )
        .await;
    assert_eq!(related(&updated), [c1, c2.clone()]);
    {
        let view = index.machines();
        assert_eq!(view.machines_of_class(ns, "c1").count(), 3);
        assert_eq!(view.machines_of_class(ns, "c2").count(), 1);
    }

    machines
        .delete("m4", &DeleteParams::default())
        .await
        .expect("delete m4");
    let deleted = phase
        .wait_for(
            WAIT,
            changed(ResourceKind::Machine, &m4, Change::Deleted, false),
        )
        .await;
    assert_eq!(related(&deleted), [c2]);
    assert_eq!(index.machines().machines_of_class(ns, "c2").count(), 0);
}

/// A heartbeat publishes nothing, a label change or readiness flip does.
async fn follow_nodes(started: &Started, index: &Index, nodes: &Api<Node>) {
    // Watch events are published in order, so once n2's creation is seen,
    // everything the heartbeat and the relabel published has been seen too.
    let n1 = ObjectKey::cluster("n1");
    let n2 = ObjectKey::cluster("n2");
    let phase = started.phase();
    set_node_ready(nodes, "n1", true, "2024-01-01T00:01:00Z").await;
    let relabel = Patch::Merge(json!({"metadata": {"labels": {POOL_LABEL: "beijing"}}}));
    nodes
        .patch("n1", &PatchParams::default(), &relabel)
        .await
        .expect("relabel n1");
    nodes
        .create(&PostParams::default(), &node("n2", "hangzhou"))
        .await
        .expect("create n2");
    phase
        .wait_for(
            WAIT,
            changed(ResourceKind::Node, &n2, Change::Created, false),
        )
        .await;
    let n1_changes = phase.count(|e| matches!(e, Event::ResourceChanged { key, .. } if *key == n1));
    let n1_updates = phase.count(changed(ResourceKind::Node, &n1, Change::Updated, false));
    assert_eq!(
        (n1_changes, n1_updates),
        (1, 1),
        "one event for heartbeat + relabel: {:#?}",
        phase.events()
    );
    assert_eq!(pool_of(index, "n1").as_deref(), Some("beijing"));
    assert_eq!(names_in_pool(index, "hangzhou"), ["n2"]);

    let phase = started.phase();
    set_node_ready(nodes, "n1", false, "2024-01-01T00:02:00Z").await;
    phase
        .wait_for(
            WAIT,
            changed(ResourceKind::Node, &n1, Change::Updated, false),
        )
        .await;
    assert!(index.placement().node("n1").is_some_and(|n| !n.ready));

    nodes
        .delete("n2", &DeleteParams::default())
        .await
        .expect("delete n2");
    phase
        .wait_for(
            WAIT,
            changed(ResourceKind::Node, &n2, Change::Deleted, false),
        )
        .await;
    assert!(index.placement().node("n2").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_follow_machines_and_nodes() {
    let env = start_env().await;
    let client = env.client();
    let ns = "machine-system";
    for namespace in [ns, "poolkeeper-system"] {
        env.create_namespace(namespace)
            .await
            .expect("create namespace");
    }
    let config = config(ns, true, "poolkeeper-placement");
    let config_map_key = ObjectKey::namespaced("poolkeeper-system", "poolkeeper-placement");
    let placement: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": config_map_key.name},
        "data": {"placement.yaml": "bindings: []"},
    }))
    .expect("config map");
    create_initial_objects(&client, ns, &placement).await;

    let index = Arc::new(Index::new(&config.placement.pool_label));
    let mut started = Started::new(&client, &index, &WatcherSettings::from(&config));
    check_initial_list(&started.synchronized().await, ns);
    {
        let view = index.machines();
        assert_eq!(view.machines_of_class(ns, "c1").count(), 3);
        assert_eq!(view.machine_classes().count(), 2);
        let placement = index.placement();
        assert!(placement.node("n1").is_some_and(|n| n.ready));
        assert_eq!(
            placement.node_pool("hangzhou").map(|p| p.pool_type),
            Some(PoolType::Edge)
        );
        assert!(placement.config_map(&config_map_key).is_some());
    }
    assert_eq!(pool_of(&index, "n1").as_deref(), Some("hangzhou"));

    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    follow_a_machine(&started, &index, &machines, ns).await;
    let nodes: Api<Node> = Api::all(client.clone());
    follow_nodes(&started, &index, &nodes).await;

    // The placement ConfigMap: a data change bumps the generation.
    let generation = index.placement().policy_generation();
    let phase = started.phase();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "poolkeeper-system");
    let bound = Patch::Merge(
        json!({"data": {"placement.yaml": "bindings: [{namespace: a, nodePool: hangzhou}]"}}),
    );
    config_maps
        .patch(&config_map_key.name, &PatchParams::default(), &bound)
        .await
        .expect("patch config map");
    phase
        .wait_for(
            WAIT,
            changed(
                ResourceKind::ConfigMap,
                &config_map_key,
                Change::Updated,
                false,
            ),
        )
        .await;
    assert!(index.placement().policy_generation() > generation);

    started.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_while_stopped_is_reported_after_restart() {
    let env = start_env().await;
    let client = env.client();
    let ns = "restart";
    for namespace in [ns, "poolkeeper-system"] {
        env.create_namespace(namespace)
            .await
            .expect("create namespace");
    }
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    let classes: Api<MachineClass> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    classes
        .create(&pp, &machine_class("c1"))
        .await
        .expect("create class");
    for name in ["keep", "gone"] {
        machines
            .create(&pp, &machine(name, "c1"))
            .await
            .expect("create machine");
    }
    let config = config(ns, false, "absent");
    let settings = WatcherSettings::from(&config);
    let index = Arc::new(Index::new(POOL_LABEL));

    let mut started = Started::new(&client, &index, &settings);
    started.synchronized().await;
    assert_eq!(index.object_count(ResourceKind::Machine), 2);
    started.stop().await;

    machines
        .delete("gone", &DeleteParams::default())
        .await
        .expect("delete while stopped");
    machines
        .create(&pp, &machine("new", "c1"))
        .await
        .expect("create while stopped");

    // A new watcher set over the same (now stale) index.
    let mut started = Started::new(&client, &index, &settings);
    let seen = started.synchronized().await;
    let gone = ObjectKey::namespaced(ns, "gone");
    let is_deleted = changed(ResourceKind::Machine, &gone, Change::Deleted, false);
    let deleted = seen
        .iter()
        .find(|e| is_deleted(e))
        .unwrap_or_else(|| panic!("missed delete reported: {seen:#?}"));
    assert_eq!(related(deleted), [ObjectKey::namespaced(ns, "c1")]);
    let new = ObjectKey::namespaced(ns, "new");
    assert!(
        seen.iter()
            .any(changed(ResourceKind::Machine, &new, Change::Created, true)),
        "{seen:#?}"
    );
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, Event::ResourceChanged { key, .. } if key.name == "keep")),
        "an unchanged machine publishes nothing: {seen:#?}"
    );
    let names: Vec<String> = index
        .machines()
        .machines_of_class(ns, "c1")
        .map(|m| m.key.name.clone())
        .collect();
    assert_eq!(names, ["keep", "new"]);
    started.stop().await;
}

/// How long kube-apiserver stays down in the restart test.
const OUTAGE: Duration = Duration::from_secs(5);
/// From the apiserver's readiness to the watchers having relisted, at most: a probe interval
/// (500 ms), the 410 and the list.
const RECONNECT_BOUND: Duration = Duration::from_millis(1_500);

/// Namespace `ns` with class `c1` and the Machines `names` of it; MachineClass and Machine
/// watchers over `client` (the apiserver, or a proxy in front of it), synchronized.
async fn machines_watched(
    env: &TestEnv,
    client: &Client,
    ns: &str,
    names: &[&str],
) -> (Arc<Index>, Started) {
    env.create_namespace(ns).await.expect("create namespace");
    let pp = PostParams::default();
    let direct = env.client();
    Api::<MachineClass>::namespaced(direct.clone(), ns)
        .create(&pp, &machine_class("c1"))
        .await
        .expect("create class");
    let machines: Api<Machine> = Api::namespaced(direct, ns);
    for name in names {
        machines
            .create(&pp, &machine(name, "c1"))
            .await
            .expect("create machine");
    }
    let settings = WatcherSettings::from(&config(ns, false, "absent"));
    let index = Arc::new(Index::new(POOL_LABEL));
    let mut started = Started::new(client, &index, &settings);
    started.synchronized().await;
    assert_eq!(index.object_count(ResourceKind::Machine), names.len());
    (index, started)
}

/// When each kind's watch recovered, after `since`.
fn recoveries(recorder: &BusRecorder) -> Vec<(ResourceKind, Duration)> {
    recorder
        .timed()
        .into_iter()
        .filter_map(|(at, event)| match event {
            Event::WatchRecovered { kind } => Some((kind, at)),
            _ => None,
        })
        .collect()
}

/// kube-apiserver killed (SIGKILL) and started again: each watch fails once (one
/// `WatchFailed` per kind), gets 410 on reconnect and relists at once, so that a Machine
/// created the moment the apiserver is ready again is in the index within
/// `RECONNECT_BOUND`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_relist_at_once_after_an_apiserver_restart() {
    let mut env = start_env().await;
    let ns = "apiserver-restart";
    let client = env.client();
    let (index, started) = machines_watched(&env, &client, ns, &["m1", "m2"]).await;
    let outage = started.phase();

    env.kill(Process::ApiServer).expect("kill kube-apiserver");
    tokio::time::sleep(OUTAGE).await;
    let ready_in = env
        .start(Process::ApiServer)
        .await
        .expect("kube-apiserver starts again");
    let back = started.phase();
    let back_at = Instant::now();
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    machines
        .create(&PostParams::default(), &machine("m3", "c1"))
        .await
        .expect("create m3 after the restart");
    let m3 = ObjectKey::namespaced(ns, "m3");
    back.wait_for(
        WAIT,
        changed(ResourceKind::Machine, &m3, Change::Created, false),
    )
    .await;
    let seen_after = back_at.elapsed();
    back.wait_for(WAIT, |e| {
        matches!(
            e,
            Event::WatchRecovered {
                kind: ResourceKind::MachineClass
            }
        )
    })
    .await;
    let recovered = recoveries(&back);
    println!(
        "apiserver down {OUTAGE:?}, ready {ready_in:?} after its start; m3 (created once it \
         was ready) in the index {seen_after:?} later; watches recovered at {recovered:?}"
    );
    assert!(
        seen_after < RECONNECT_BOUND,
        "m3 seen {seen_after:?} after the restart: {:#?}",
        back.timed()
    );
    for kind in [ResourceKind::MachineClass, ResourceKind::Machine] {
        let failed =
            outage.count(|e| matches!(e, Event::WatchFailed { kind: k, .. } if *k == kind));
        assert_eq!(
            failed,
            1,
            "one failure streak for {kind}: {:#?}",
            outage.events()
        );
    }
    assert_eq!(index.machines().machines_of_class(ns, "c1").count(), 3);
    started.stop().await;
}

/// A watcher cut off from the apiserver (the testenv proxy) misses the deletes made
/// meanwhile; etcd is compacted past its resourceVersion (no watch cache, so the watch goes
/// to etcd), so reconnecting gets 410 and a relist. The relist removes what is gone and
/// reports it as live deletes, with the classes the Machines referenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_after_compaction_reports_deletes_missed_while_cut_off() {
    let env = start_env_with(TestEnv::builder().watch_cache(false)).await;
    let proxy = env.proxy().await.expect("the apiserver proxy");
    let ns = "compacted";
    let (index, started) =
        machines_watched(&env, &proxy.client(), ns, &["keep", "gone-1", "gone-2"]).await;
    let cut = started.phase();
    proxy.sever().await;
    cut.wait_for(WAIT, |e| {
        matches!(
            e,
            Event::WatchFailed {
                kind: ResourceKind::Machine,
                ..
            }
        )
    })
    .await;

    let machines: Api<Machine> = Api::namespaced(env.client(), ns);
    for name in ["gone-1", "gone-2"] {
        machines
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete while cut off");
    }
    machines
        .create(&PostParams::default(), &machine("new", "c1"))
        .await
        .expect("create while cut off");
    let revision = env.compact_etcd().await.expect("compact etcd");
    assert_eq!(
        index.object_count(ResourceKind::Machine),
        3,
        "nothing seen yet"
    );

    proxy.restore().await.expect("restore the proxy");
    let restored = Instant::now();
    let c1 = ObjectKey::namespaced(ns, "c1");
    for name in ["gone-1", "gone-2"] {
        let key = ObjectKey::namespaced(ns, name);
        let deleted = cut
            .wait_for(
                WAIT,
                changed(ResourceKind::Machine, &key, Change::Deleted, false),
            )
            .await;
        assert_eq!(related(&deleted), std::slice::from_ref(&c1));
    }
    let new = ObjectKey::namespaced(ns, "new");
    cut.wait_for(
        WAIT,
        changed(ResourceKind::Machine, &new, Change::Created, false),
    )
    .await;
    println!(
        "compacted at revision {revision}; deletes reported {:?} after the proxy was restored",
        restored.elapsed()
    );
    let names: Vec<String> = index
        .machines()
        .machines_of_class(ns, "c1")
        .map(|m| m.key.name.clone())
        .collect();
    assert_eq!(names, ["keep", "new"]);
    assert!(
        !cut.events()
            .iter()
            .any(|e| matches!(e, Event::ResourceChanged { key, .. } if key.name == "keep")),
        "an unchanged Machine publishes nothing: {:#?}",
        cut.events()
    );
    started.stop().await;
}

/// Secrets are indexed from their metadata: a finalizer change and a
/// deletion are reported, a data write is not (only the kept resourceVersion
/// moves); a class names the Secrets it references as related.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_followed_from_their_metadata() {
    use k8s_openapi::api::core::v1::Secret;

    let env = start_env().await;
    let client = env.client();
    let ns = "machine-system";
    env.create_namespace(ns).await.expect("create namespace");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cloud"},
        "stringData": {"token": "t0"},
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create Secret");
    let index = Arc::new(Index::new(POOL_LABEL));
    let mut started = Started::new(
        &client,
        &index,
        &WatcherSettings::from(&config(ns, false, "p")),
    );
    let cloud = ObjectKey::namespaced(ns, "cloud");
    let listed = started.synchronized().await;
    assert!(
        listed
            .iter()
            .any(changed(ResourceKind::Secret, &cloud, Change::Created, true)),
        "{listed:#?}"
    );
    let version = index
        .secrets()
        .secret(&cloud)
        .unwrap()
        .resource_version
        .clone();

    let phase = started.phase();
    let rotate = Patch::Merge(json!({"stringData": {"token": "t1"}}));
    secrets
        .patch("cloud", &PatchParams::default(), &rotate)
        .await
        .expect("rotate the data");
    let finalize = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep"]}}));
    secrets
        .patch("cloud", &PatchParams::default(), &finalize)
        .await
        .expect("add a finalizer");
    let updated = changed(ResourceKind::Secret, &cloud, Change::Updated, false);
    phase.wait_for(WAIT, &updated).await;
    assert_eq!(phase.count(&updated), 1, "the data write published nothing");
    let indexed = index.secrets().secret(&cloud).cloned().unwrap();
    assert_eq!(indexed.finalizers, ["example.com/keep"]);
    assert_ne!(indexed.resource_version, version);

    let classes: Api<MachineClass> = Api::namespaced(client.clone(), ns);
    let mut class = machine_class("c1");
    class.secret_ref = Some(k8s_openapi::api::core::v1::SecretReference {
        name: Some("cloud".into()),
        namespace: None,
    });
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("create class");
    let class_created = phase
        .wait_for(
            WAIT,
            changed(
                ResourceKind::MachineClass,
                &ObjectKey::namespaced(ns, "c1"),
                Change::Created,
                false,
            ),
        )
        .await;
    assert_eq!(related(&class_created), std::slice::from_ref(&cloud));
    assert_eq!(index.secrets().referrer_count(&cloud), 1);

    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    secrets
        .patch("cloud", &PatchParams::default(), &release)
        .await
        .expect("release");
    secrets
        .delete("cloud", &DeleteParams::default())
        .await
        .expect("delete Secret");
    phase
        .wait_for(
            WAIT,
            changed(ResourceKind::Secret, &cloud, Change::Deleted, false),
        )
        .await;
    assert!(index.secrets().secret(&cloud).is_none());
    started.stop().await;
}
