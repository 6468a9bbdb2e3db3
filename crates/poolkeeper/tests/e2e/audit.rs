//! The audit end to end (DESIGN §12): the whole controller against a real
//! kube-apiserver and kube-scheduler, auditing Pods that kube-scheduler
//! placed before their namespace was bound, and Pods whose Node moved to
//! another pool; `poolkeeper audit --kubeconfig` against the same cluster.
//!
//! | node | pool | taint |
//! |---|---|---|
//! | `edge-1` | `edge` (Edge) | `node-role.kubernetes.io/edge:NoSchedule` |
//! | `cloud-1`, `cloud-2` | `cloud` (Cloud) | - |
//! | `loose-1` | none | - |

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::NodePoolType;
use poolkeeper_audit::KubePods;
use poolkeeper_audit::testing::{PageStart, PodLister, PodQuery, RUNNING_OR_PENDING};
use poolkeeper_bus::{Delivery, Event};
use poolkeeper_config::Config;
use poolkeeper_placement::PodPlacement;
use poolkeeper_testenv::{TestEnv, TestEnvBuilder, eventually};
use serde_json::{Value, json};

use crate::harness::{
    BINARY, Running, TIMEOUT, control_plane, metric_sum, scheduled_node, test_config,
};
use crate::objects::{
    CONTROLLER_NAMESPACE, POOL_LABEL, create_pool, pinned, poolkeeper_events, write_policy,
};

/// How often the controller audits in these tests.
const AUDIT_INTERVAL: Duration = Duration::from_secs(1);

/// The control plane with the pools and nodes of the table above.
pub(crate) async fn cluster(scheduler: bool, namespaces: &[&str]) -> TestEnv {
    cluster_from(TestEnv::builder().scheduler(scheduler), namespaces).await
}

/// [`cluster`] from the control plane `builder` describes.
pub(crate) async fn cluster_from(builder: TestEnvBuilder, namespaces: &[&str]) -> TestEnv {
    let namespaces: Vec<&str> = [CONTROLLER_NAMESPACE]
        .iter()
        .chain(namespaces)
        .copied()
        .collect();
    let env = control_plane(builder, &namespaces).await;
    create_pool(&env, "edge", NodePoolType::Edge, &["edge-1"]).await;
    create_pool(&env, "cloud", NodePoolType::Cloud, &["cloud-1", "cloud-2"]).await;
    env.ready_node("loose-1", BTreeMap::new(), Vec::new())
        .await
        .unwrap();
    env
}

/// The controller, auditing every [`AUDIT_INTERVAL`].
async fn start(env: &TestEnv, cert_dir: &std::path::Path) -> Running {
    start_with(env, audit_config(cert_dir)).await
}

/// The configuration of [`start`]: the audit alone, every [`AUDIT_INTERVAL`].
pub(crate) fn audit_config(cert_dir: &std::path::Path) -> Config {
    let mut config: Config = test_config(CONTROLLER_NAMESPACE, cert_dir);
    config.webhook.enabled = false;
    config.machine_classes.enabled = false;
    config.audit.interval = AUDIT_INTERVAL;
    config.audit.page_size = 2;
    config
}

/// The controller with `config`, ready.
pub(crate) async fn start_with(env: &TestEnv, config: Config) -> Running {
    let running = Running::start(&config, env).await;
    running.wait_ready().await;
    running
}

/// Creates the Pods and waits until kube-scheduler bound each one.
pub(crate) async fn schedule(env: &TestEnv, namespace: &str, pods: &[Pod]) {
    let api: Api<Pod> = Api::namespaced(env.client(), namespace);
    for pod in pods {
        api.create(&PostParams::default(), pod).await.unwrap();
    }
    for pod in pods {
        let name = pod.metadata.name.as_deref().unwrap();
        scheduled_node(env, namespace, name).await;
    }
}

/// `namespace/pod` of the violations of a round.
pub(crate) type Violations = BTreeSet<String>;

/// The next `AuditCompleted` whose violations satisfy `done`.
pub(crate) async fn next_round(
    running: &mut Running,
    what: &str,
    done: impl Fn(&Violations) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(200), running.events.recv()).await {
            Ok(Some(Delivery::Event(envelope))) => {
                if let Event::AuditCompleted { .. } = &envelope.event {
                    let round = serde_json::to_value(&envelope.event).unwrap();
                    if done(&violations_of(&round)) {
                        return round;
                    }
                    last = Some(round);
                }
            }
            Ok(Some(Delivery::Lagged(_))) | Err(_) => {}
            Ok(None) => panic!("the bus closed"),
        }
    }
    panic!("no audit round with {what}; the last one: {last:?}");
}

fn violations_of(round: &Value) -> Violations {
    round["violations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            format!(
                "{}/{}",
                v["namespace"].as_str().unwrap(),
                v["pod"].as_str().unwrap()
            )
        })
        .collect()
}

pub(crate) fn set(items: &[&str]) -> Violations {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The Warning Events the audit wrote in `namespace`: `(pod, reason)` with
/// the regarded UID.
async fn audit_events(client: &Client, namespace: &str) -> Vec<(String, String, Option<String>)> {
    let mut found: Vec<_> = poolkeeper_events(client, namespace)
        .await
        .into_iter()
        .map(|event| {
            let regarding = event.regarding.unwrap_or_default();
            (
                regarding.name.unwrap_or_default(),
                event.reason.unwrap_or_default(),
                regarding.uid,
            )
        })
        .collect();
    found.sort();
    found
}

/// `poolkeeper audit --kubeconfig` as a user runs it: exit code and stdout.
fn audit_command(env: &TestEnv, output: &str) -> (i32, String) {
    let run = Command::new(BINARY)
        .args(["audit", "--kubeconfig"])
        .arg(env.kubeconfig_path())
        .args(["-o", output])
        .output()
        .expect("the poolkeeper binary runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let code = run.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "exit {code}\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    (code, stdout)
}

/// DESIGN §12: Pods placed before their namespace was bound are found by
/// the next round, each once (gauge, `/debug/audit`, one Warning Event), and
/// none of those inside the pool; `poolkeeper audit` agrees and exits 1;
/// deleting them clears the gauge and the command exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_placed_before_their_namespace_was_bound_are_reported_once() {
    const LATE: &str = "shop-late";
    let env = cluster(true, &[LATE]).await;
    let client = env.client();
    write_policy(&client, &[]).await;
    schedule(
        &env,
        LATE,
        &[
            pinned("out-loose", "loose-1"),
            pinned("out-edge", "edge-1"),
            pinned("in-1", "cloud-1"),
            pinned("in-2", "cloud-2"),
        ],
    )
    .await;
    let cert_dir = tempfile::tempdir().unwrap();
    let mut running = start(&env, cert_dir.path()).await;
    next_round(
        &mut running,
        "no violation while unbound",
        Violations::is_empty,
    )
    .await;

    write_policy(&client, &[(LATE, "cloud", "enforce")]).await;
    let expected = set(&["shop-late/out-edge", "shop-late/out-loose"]);
    let round = next_round(&mut running, "the two Pods outside", |v| *v == expected).await;
    assert_eq!(
        round["counts"],
        json!([{"namespace": LATE, "pool": "cloud", "reason": "outside_pool", "pods": 2}])
    );
    // in-1 and in-2 run on Nodes of cloud: the API server leaves them out.
    assert_eq!(round["pods"], 2);

    // Three more rounds: still one Event per Pod.
    for _ in 0..3 {
        next_round(&mut running, "the same violations", |v| *v == expected).await;
    }
    let metrics = running.metrics().await;
    let gauge = format!(
        "poolkeeper_audit_violations{{namespace=\"{LATE}\",pool=\"cloud\",reason=\"outside_pool\"}}"
    );
    assert_eq!(metric_sum(&metrics, &gauge), 2, "{metrics}");
    let (status, debug) = running.get("/debug/audit").await;
    assert_eq!(status, 200, "{debug}");
    // The envelope of the last round: the event with its sequence and time.
    let debug: Value = serde_json::from_str(&debug).unwrap();
    assert_eq!(debug["event"]["type"], "AuditCompleted", "{debug}");
    assert_eq!(violations_of(&debug["event"]), expected, "{debug}");

    let pods: Api<Pod> = Api::namespaced(client.clone(), LATE);
    let uid = |name: &'static str| {
        let pods = pods.clone();
        async move { pods.get(name).await.unwrap().metadata.uid }
    };
    let events = eventually("two Warning Events", TIMEOUT, || async {
        let events = audit_events(&client, LATE).await;
        (events.len() >= 2).then_some(events)
    })
    .await
    .unwrap();
    assert_eq!(
        events,
        [
            (
                "out-edge".to_owned(),
                "OutsidePool".to_owned(),
                uid("out-edge").await
            ),
            (
                "out-loose".to_owned(),
                "OutsidePool".to_owned(),
                uid("out-loose").await
            ),
        ]
    );

    let (code, table) = audit_command(&env, "table");
    assert_eq!(code, 1, "{table}");
    assert!(
        table.contains("out-edge") && table.contains("out-loose"),
        "{table}"
    );
    assert!(
        !table.contains("in-1") && !table.contains("in-2"),
        "{table}"
    );
    let (code, json_out) = audit_command(&env, "json");
    assert_eq!(code, 1);
    let printed: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(violations_of(&printed), expected, "{json_out}");

    for name in ["out-edge", "out-loose"] {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    eventually("the Pods gone", TIMEOUT, || async {
        let left = pods.list(&ListParams::default()).await.ok()?.items.len();
        (left == 2).then_some(())
    })
    .await
    .unwrap();
    next_round(&mut running, "no violation", Violations::is_empty).await;
    let metrics = running.metrics().await;
    assert_eq!(metric_sum(&metrics, &gauge), 0, "{metrics}");
    let (code, table) = audit_command(&env, "table");
    assert_eq!(code, 0, "{table}");
    assert!(
        table.contains("0 pods and 0 workloads checked") && table.contains("no violations"),
        "{table}"
    );
    assert_eq!(audit_events(&client, LATE).await.len(), 2, "no new Events");
    running.stop().await;
}

/// DESIGN §12: a Node moved to another pool under a running Pod makes the
/// Pod a violation in the next round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_moved_to_another_pool_makes_its_pods_violations() {
    const SHOP: &str = "shop-cloud";
    let env = cluster(true, &[SHOP]).await;
    let client = env.client();
    write_policy(&client, &[(SHOP, "cloud", "enforce")]).await;
    // On a Node of its namespace's pool, but labelled with edge, outside
    // its namespace's binding: the namespace's LIST leaves its Nodes out,
    // the labelled Pods' LIST reads it.
    let mut tagged = pinned("tagged", "cloud-1");
    tagged
        .metadata
        .labels
        .get_or_insert_default()
        .insert(POOL_LABEL.to_owned(), "edge".to_owned());
    schedule(
        &env,
        SHOP,
        &[
            pinned("web-1", "cloud-1"),
            pinned("web-2", "cloud-2"),
            tagged,
        ],
    )
    .await;
    let cert_dir = tempfile::tempdir().unwrap();
    let mut running = start(&env, cert_dir.path()).await;
    let round = next_round(&mut running, "the tagged Pod only", |v| {
        *v == set(&["shop-cloud/tagged"])
    })
    .await;
    assert_eq!(round["pods"], 1, "web-1 and web-2 left out");
    assert_eq!(
        round["violations"][0]["reason"], "label_outside_binding",
        "{round}"
    );

    let relabel = json!({"metadata": {"labels": {POOL_LABEL: "edge"}}});
    Api::<Node>::all(client.clone())
        .patch("cloud-2", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    let round = next_round(&mut running, "web-2 on a node of edge", |v| {
        *v == set(&["shop-cloud/tagged", "shop-cloud/web-2"])
    })
    .await;
    assert_eq!(round["pods"], 2, "web-1 left out");
    let violation = &round["violations"][0];
    assert_eq!(violation["node"], "cloud-2");
    assert_eq!(violation["reason"], "outside_pool");
    assert_eq!(
        violation["message"],
        "pod is bound to node pool \"cloud\" but runs on node \"cloud-2\", which is in node pool \"edge\""
    );
    running.stop().await;
}

/// Workloads created before their namespace was bound whose Pod template
/// would now be denied are reported on the workload itself (a Warning Event
/// regarding the Deployment), and `poolkeeper audit` lists them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_whose_template_reaches_outside_are_reported_on_the_workload() {
    const LATE: &str = "shop-late";
    let env = cluster(false, &[LATE]).await;
    let client = env.client();
    write_policy(&client, &[]).await;
    let yaml = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: stray, namespace: {LATE}}}\n\
         spec:\n  replicas: 0\n  selector: {{matchLabels: {{app: stray}}}}\n  template:\n\
         \x20   metadata: {{labels: {{app: stray}}}}\n\
         \x20   spec: {{nodeSelector: {{kubernetes.io/hostname: loose-1}}, containers: [{{name: c, image: i}}]}}\n\
         ---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: fine, namespace: {LATE}}}\n\
         spec:\n  replicas: 0\n  selector: {{matchLabels: {{app: fine}}}}\n  template:\n\
         \x20   metadata: {{labels: {{app: fine}}}}\n    spec: {{containers: [{{name: c, image: i}}]}}\n"
    );
    env.apply_yaml(&yaml, "workloads").await.unwrap();
    let cert_dir = tempfile::tempdir().unwrap();
    let mut running = start(&env, cert_dir.path()).await;
    next_round(
        &mut running,
        "no violation while unbound",
        Violations::is_empty,
    )
    .await;

    write_policy(&client, &[(LATE, "cloud", "enforce")]).await;
    let expected = set(&["shop-late/Deployment/stray"]);
    let round = next_round(&mut running, "the stray Deployment", |v| *v == expected).await;
    assert_eq!(round["violations"][0]["reason"], "outside_pool", "{round}");
    let events = eventually("a Warning Event on the Deployment", TIMEOUT, || async {
        let events: Vec<_> = poolkeeper_events(&client, LATE)
            .await
            .into_iter()
            .filter_map(|event| {
                let regarding = event.regarding?;
                Some((regarding.kind?, regarding.name?, event.reason?))
            })
            .collect();
        (!events.is_empty()).then_some(events)
    })
    .await
    .unwrap();
    assert_eq!(
        events,
        [(
            "Deployment".to_owned(),
            "stray".to_owned(),
            "OutsidePool".to_owned()
        )]
    );
    let (code, table) = audit_command(&env, "table");
    assert_eq!(code, 1, "{table}");
    assert!(table.contains("Deployment/stray"), "{table}");
    assert!(!table.contains("Deployment/fine"), "{table}");
    assert!(table.contains("0 pods and 2 workloads checked"), "{table}");
    running.stop().await;
}

/// The Pods of every shape placement reads, listed by the audit in the protobuf encoding a page
/// at a time, project exactly what kube's JSON LIST of the full Pods projects; a LIST the API
/// server refuses is its `Status`, decoded from protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audits_protobuf_lists_read_what_json_reads() {
    const FIXTURE: &str = "fixture";
    let env = control_plane(TestEnv::builder().scheduler(false), &[FIXTURE]).await;
    let client = env.client();
    let manifest = include_str!("../../../audit/src/tests/data/pods.yaml");
    let pods: Api<Pod> = Api::namespaced(client.clone(), FIXTURE);
    for document in poolkeeper_testenv::parse_yaml_documents(manifest, "pods.yaml").unwrap() {
        let pod: Pod = serde_json::from_value(document).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let lister = KubePods::new(client.clone());
    // The namespace's Pods without the pool label, then the labelled ones.
    let queries = [
        PodQuery::Namespace {
            namespace: FIXTURE.to_owned(),
            pool_label: POOL_LABEL.to_owned(),
            leave_out: vec!["no-such-node".to_owned()],
        },
        PodQuery::Labelled {
            pool_label: POOL_LABEL.to_owned(),
        },
    ];
    // The first LIST at the latest version, the second not older than the
    // first one's answer, as a round reads them.
    let (mut listed, mut pages, mut version) = (Vec::new(), 0, None::<String>);
    for query in &queries {
        let mut token = None::<String>;
        loop {
            let start = PageStart::of(token.as_deref(), version.as_deref());
            let page = lister.page(query, 4, start).await.unwrap();
            listed.extend(page.pods);
            pages += 1;
            version = version.or(page.resource_version);
            token = page.continue_token;
            if token.is_none() {
                break;
            }
        }
    }
    assert!(version.is_some(), "the API server's resourceVersion");
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let params = ListParams::default().fields(RUNNING_OR_PENDING);
    let json: Vec<PodPlacement> = pods
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(PodPlacement::from)
        .collect();
    assert_eq!(json.len(), 6);
    assert_eq!(pages, 3, "5 Pods in pages of 4, then the labelled one");
    assert_eq!(listed, json);

    let invalid = PodQuery::Labelled {
        pool_label: "no spaces allowed".to_owned(),
    };
    match lister.page(&invalid, 4, PageStart::Latest).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
            assert!(
                status.message.starts_with("unable to parse requirement"),
                "{status:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}
