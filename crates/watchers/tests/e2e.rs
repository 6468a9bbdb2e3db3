//! The watchers against a real kube-apiserver and etcd.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::{ClassSpec, Machine, MachineClass, MachineSpec, NodePool, NodePoolSpec};
use poolkeeper_bus::{Bus, Change, Delivery, Event, ObjectKey, ResourceKind, Subscription};
use poolkeeper_index::{Index, PoolType};
use poolkeeper_supervisor::{Activity, BoxError, Component, Context};
use poolkeeper_testenv::TestEnv;
use poolkeeper_watchers::{WatcherSettings, Watchers};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const WAIT: Duration = Duration::from_secs(30);

/// A running set of watcher components.
struct Running {
    cancel: CancellationToken,
    tasks: Vec<(&'static str, JoinHandle<Result<(), BoxError>>)>,
}

impl Running {
    fn start(components: Vec<Box<dyn Component>>) -> Self {
        let cancel = CancellationToken::new();
        let tasks = components
            .into_iter()
            .map(|component| {
                let (ready, _) = tokio::sync::watch::channel(false);
                let ctx = Context::new(cancel.child_token(), Activity::default(), ready);
                (component.name(), tokio::spawn(component.run(ctx)))
            })
            .collect();
        Self { cancel, tasks }
    }

    async fn stop(self) {
        self.cancel.cancel();
        for (name, task) in self.tasks {
            let result = task.await.expect("component task joins");
            assert!(result.is_ok(), "{name} ended with {result:?}");
        }
    }
}

fn settings(namespace: &str, config_map: ObjectKey) -> WatcherSettings {
    WatcherSettings {
        kinds: ResourceKind::ALL.into_iter().collect(),
        namespace: namespace.to_owned(),
        page_size: 2,
        placement_config_map: config_map,
        pool_label: POOL_LABEL.to_owned(),
    }
}

/// Subscribes an observer, builds the watchers over `index` and starts them.
fn start_watchers(
    client: &Client,
    index: &Arc<Index>,
    settings: &WatcherSettings,
) -> (Running, Subscription) {
    let bus = Bus::default();
    let observer = bus.subscribe("e2e-observer");
    let watchers =
        Watchers::new(client.clone(), &bus, Arc::clone(index), settings).expect("valid settings");
    bus.start();
    (Running::start(watchers.into_components()), observer)
}

/// Reads events until one matches `wanted`, returning everything read.
async fn wait_for(
    sub: &mut Subscription,
    what: &str,
    wanted: impl Fn(&Event) -> bool,
) -> Vec<Event> {
    let mut seen = Vec::new();
    let result = tokio::time::timeout(WAIT, async {
        loop {
            match sub.recv().await {
                Some(Delivery::Event(envelope)) => {
                    let hit = wanted(&envelope.event);
                    seen.push(envelope.event.clone());
                    if hit {
                        return;
                    }
                }
                Some(Delivery::Lagged(n)) => {
                    panic!("observer lagged by {n} while waiting for {what}")
                }
                None => panic!("bus closed while waiting for {what}"),
            }
        }
    })
    .await;
    assert!(
        result.is_ok(),
        "timed out waiting for {what}; saw {seen:#?}"
    );
    seen
}

fn changed(
    kind: ResourceKind,
    key: &ObjectKey,
    change: Change,
    initial: bool,
) -> impl Fn(&Event) -> bool {
    let key = key.clone();
    move |event| {
        *event
            == Event::ResourceChanged {
                kind,
                key: key.clone(),
                change,
                initial,
            }
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

async fn start_env() -> TestEnv {
    // The checked-in CRD files, so the apiserver validates what is deployed.
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    TestEnv::builder()
        .crd_files([crds])
        .start()
        .await
        .expect("start the local control plane (see crates/testenv)")
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
    let config_map_key = ObjectKey::namespaced("poolkeeper-system", "poolkeeper-placement");

    let classes: Api<MachineClass> = Api::namespaced(client.clone(), ns);
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let pools: Api<NodePool> = Api::all(client.clone());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "poolkeeper-system");
    let pp = PostParams::default();

    // Present before the watchers start: part of the initial list.
    for name in ["c1", "c2"] {
        classes
            .create(&pp, &machine_class(name))
            .await
            .expect("create class");
    }
    // More than one page (page size 2).
    for name in ["m1", "m2", "m3"] {
        machines
            .create(&pp, &machine(name, "c1"))
            .await
            .expect("create machine");
    }
    nodes
        .create(&pp, &node("n1", "hangzhou"))
        .await
        .expect("create node");
    set_node_ready(&nodes, "n1", true, "2024-01-01T00:00:00Z").await;
    pools
        .create(&pp, &NodePool::new("hangzhou", NodePoolSpec::default()))
        .await
        .expect("create pool");
    let placement: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": config_map_key.name},
        "data": {"placement.yaml": "bindings: []"},
    }))
    .expect("config map");
    config_maps
        .create(&pp, &placement)
        .await
        .expect("create config map");

    let index = Arc::new(Index::new(POOL_LABEL));
    let (running, mut observer) =
        start_watchers(&client, &index, &settings(ns, config_map_key.clone()));

    let before_sync = wait_for(&mut observer, "IndexSynchronized", |e| {
        *e == Event::IndexSynchronized
    })
    .await;
    let synced: BTreeSet<ResourceKind> = before_sync
        .iter()
        .filter_map(|e| match e {
            Event::ResourceSynced { kind } => Some(*kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        synced,
        ResourceKind::ALL.into_iter().collect(),
        "{before_sync:#?}"
    );
    for name in ["m1", "m2", "m3"] {
        let key = ObjectKey::namespaced(ns, name);
        assert!(
            before_sync
                .iter()
                .any(changed(ResourceKind::Machine, &key, Change::Created, true)),
            "initial {key} in {before_sync:#?}"
        );
    }
    assert!(
        before_sync
            .iter()
            .all(|e| !matches!(e, Event::ResourceChanged { initial: false, .. })),
        "the first list is initial: {before_sync:#?}"
    );
    {
        let view = index.machines();
        assert_eq!(view.machines_of_class(ns, "c1").count(), 3);
        assert_eq!(view.machine_class_count(), 2);
        let placement = index.placement();
        assert!(placement.node("n1").is_some_and(|n| n.ready));
        assert_eq!(placement.pool_of_node("n1"), Some("hangzhou"));
        assert_eq!(
            placement.node_pool("hangzhou").map(|p| p.pool_type),
            Some(PoolType::Edge)
        );
        assert!(placement.config_map(&config_map_key).is_some());
    }

    // Machine: create, move to another class, delete.
    let m4 = ObjectKey::namespaced(ns, "m4");
    machines
        .create(&pp, &machine("m4", "c1"))
        .await
        .expect("create m4");
    wait_for(
        &mut observer,
        "m4 created",
        changed(ResourceKind::Machine, &m4, Change::Created, false),
    )
    .await;
    machines
        .patch(
            "m4",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"class": {"name": "c2"}}})),
        )
        .await
        .expect("move m4");
    wait_for(
        &mut observer,
        "m4 updated",
        changed(ResourceKind::Machine, &m4, Change::Updated, false),
    )
    .await;
    {
        let view = index.machines();
        assert_eq!(view.machines_of_class(ns, "c1").count(), 3);
        assert_eq!(view.machines_of_class(ns, "c2").count(), 1);
    }
    machines
        .delete("m4", &DeleteParams::default())
        .await
        .expect("delete m4");
    wait_for(
        &mut observer,
        "m4 deleted",
        changed(ResourceKind::Machine, &m4, Change::Deleted, false),
    )
    .await;
    assert_eq!(index.machines().machines_of_class(ns, "c2").count(), 0);

    // Node: a heartbeat publishes nothing, a label change does. Watch events
    // are published in order, so once n2's creation is seen, everything the
    // heartbeat and the relabel published has been seen too.
    let n1 = ObjectKey::cluster("n1");
    let n2 = ObjectKey::cluster("n2");
    set_node_ready(&nodes, "n1", true, "2024-01-01T00:01:00Z").await;
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {POOL_LABEL: "beijing"}}})),
        )
        .await
        .expect("relabel n1");
    nodes
        .create(&pp, &node("n2", "hangzhou"))
        .await
        .expect("create n2");
    let seen = wait_for(
        &mut observer,
        "n2 created",
        changed(ResourceKind::Node, &n2, Change::Created, false),
    )
    .await;
    let n1_changes: Vec<&Event> = seen
        .iter()
        .filter(|e| matches!(e, Event::ResourceChanged { key, .. } if *key == n1))
        .collect();
    assert_eq!(
        n1_changes,
        [&Event::ResourceChanged {
            kind: ResourceKind::Node,
            key: n1.clone(),
            change: Change::Updated,
            initial: false,
        }],
        "one event for heartbeat + relabel"
    );
    {
        let placement = index.placement();
        assert_eq!(placement.pool_of_node("n1"), Some("beijing"));
        let hangzhou: Vec<&str> = placement
            .nodes_in_pool("hangzhou")
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(hangzhou, ["n2"]);
    }

    set_node_ready(&nodes, "n1", false, "2024-01-01T00:02:00Z").await;
    wait_for(
        &mut observer,
        "n1 not ready",
        changed(ResourceKind::Node, &n1, Change::Updated, false),
    )
    .await;
    assert!(index.placement().node("n1").is_some_and(|n| !n.ready));

    nodes
        .delete("n2", &DeleteParams::default())
        .await
        .expect("delete n2");
    wait_for(
        &mut observer,
        "n2 deleted",
        changed(ResourceKind::Node, &n2, Change::Deleted, false),
    )
    .await;
    assert!(index.placement().node("n2").is_none());

    // The placement ConfigMap: a data change bumps the generation.
    let generation = index.placement().config_maps_generation();
    config_maps
        .patch(
            &config_map_key.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"placement.yaml": "bindings: [{namespace: a, nodePool: hangzhou}]"}})),
        )
        .await
        .expect("patch config map");
    wait_for(
        &mut observer,
        "config map updated",
        changed(
            ResourceKind::ConfigMap,
            &config_map_key,
            Change::Updated,
            false,
        ),
    )
    .await;
    assert!(index.placement().config_maps_generation() > generation);

    running.stop().await;
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
    let mut settings = settings(ns, ObjectKey::namespaced("poolkeeper-system", "absent"));
    settings.kinds = WatcherSettings::kinds_for(true, false);
    let index = Arc::new(Index::new(POOL_LABEL));

    let (running, mut observer) = start_watchers(&client, &index, &settings);
    wait_for(&mut observer, "IndexSynchronized", |e| {
        *e == Event::IndexSynchronized
    })
    .await;
    assert_eq!(index.count(ResourceKind::Machine), 2);
    running.stop().await;

    machines
        .delete("gone", &DeleteParams::default())
        .await
        .expect("delete while stopped");
    machines
        .create(&pp, &machine("new", "c1"))
        .await
        .expect("create while stopped");

    // A new watcher set over the same (now stale) index.
    let (running, mut observer) = start_watchers(&client, &index, &settings);
    let seen = wait_for(&mut observer, "IndexSynchronized", |e| {
        *e == Event::IndexSynchronized
    })
    .await;
    let gone = ObjectKey::namespaced(ns, "gone");
    assert!(
        seen.iter().any(changed(
            ResourceKind::Machine,
            &gone,
            Change::Deleted,
            false
        )),
        "missed delete reported: {seen:#?}"
    );
    assert!(
        seen.iter().any(changed(
            ResourceKind::Machine,
            &ObjectKey::namespaced(ns, "new"),
            Change::Created,
            true
        )),
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
    running.stop().await;
}
