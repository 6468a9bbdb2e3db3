//! The component on a paused clock, over an index the test changes and the
//! `ResourceChanged` events the watchers would publish.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use poolkeeper_bus::{BindingRejection, Bus, Change, Event, ObjectKey, ResourceKind};
use poolkeeper_config::PlacementConfig;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::testing::{BusRecorder, spawn};
use serde_json::json;

use crate::RejectedBindings;

const WAIT: Duration = Duration::from_secs(5);

struct Setup {
    bus: Bus,
    recorder: BusRecorder,
    index: Arc<Index>,
    policy: PolicyCache,
}

fn setup() -> Setup {
    let placement = PlacementConfig::default();
    let policy = PolicyCache::from(&placement);
    let index = Arc::new(Index::new(&placement.pool_label));
    let source = policy.source();
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": source.name, "namespace": source.namespace},
        "data": {(source.key.clone()): "bindings: [{namespace: shop, nodePool: cloud}]"},
    }))
    .unwrap();
    index.apply(config_map);
    let bus = Bus::new(64);
    let recorder = BusRecorder::new(&bus);
    Setup {
        bus,
        recorder,
        index,
        policy,
    }
}

impl Setup {
    /// Labels Namespace `name` into `pool` (none: unlabelled) and publishes
    /// the change as the watcher would.
    fn label(&self, name: &str, pool: Option<&str>) {
        let labels = match pool {
            Some(pool) => json!({"apps.openyurt.io/nodepool": pool}),
            None => json!({}),
        };
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
        }))
        .unwrap();
        self.index.apply(namespace);
        self.bus.publish(Event::ResourceChanged {
            kind: ResourceKind::Namespace,
            key: ObjectKey::cluster(name),
            change: Change::Updated,
            initial: false,
            related: Vec::new(),
        });
    }

    fn reports(&self) -> Vec<Report> {
        self.recorder
            .events()
            .into_iter()
            .filter_map(|event| match event {
                Event::BindingsRejected { rejected } => Some(
                    rejected
                        .into_iter()
                        .map(|r| (r.namespace, r.reason, r.first_found))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }

    async fn wait_reports(&self, n: usize) -> Vec<Report> {
        tokio::time::timeout(WAIT, async {
            while self.reports().len() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} reports expected, got {:?}", self.reports()));
        self.reports()
    }
}

fn reporter(s: &Setup) -> Box<RejectedBindings> {
    Box::new(RejectedBindings::new(
        &s.bus,
        s.index.clone(),
        s.policy.clone(),
    ))
}

type Report = Vec<(String, BindingRejection, bool)>;
/// Namespaces and the pool label each is given (none: removed).
type Labels<'a> = &'a [(&'a str, Option<&'a str>)];

fn rejection(
    namespace: &str,
    reason: BindingRejection,
    first_found: bool,
) -> (String, BindingRejection, bool) {
    (namespace.to_owned(), reason, first_found)
}

#[tokio::test(start_paused = true)]
async fn rejections_are_reported_when_they_change_and_again_by_a_new_leader() {
    use BindingRejection::{Conflict, Excluded};
    let s = setup();
    s.label("shop", Some("edge"));
    let running = spawn(reporter(&s));
    s.bus.start();
    // (labels set, then every report published so far)
    let steps: [(Labels, Vec<Report>); 3] = [
        (&[], vec![vec![rejection("shop", Conflict, true)]]),
        // A label binding that takes effect says nothing new.
        (
            &[("team", Some("cloud")), ("kube-public", Some("cloud"))],
            vec![
                vec![rejection("shop", Conflict, true)],
                vec![
                    rejection("kube-public", Excluded, true),
                    rejection("shop", Conflict, false),
                ],
            ],
        ),
        // Both labels gone: the empty list clears them.
        (
            &[("shop", None), ("kube-public", None)],
            vec![
                vec![rejection("shop", Conflict, true)],
                vec![
                    rejection("kube-public", Excluded, true),
                    rejection("shop", Conflict, false),
                ],
                vec![],
            ],
        ),
    ];
    for (labels, expected) in steps {
        for (namespace, pool) in labels {
            s.label(namespace, *pool);
        }
        s.wait_reports(expected.len()).await;
        // Nothing more comes of the same changes.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(s.reports(), expected, "after {labels:?}");
    }
    running.stop().await.unwrap();

    // The next term's instance starts from nothing reported.
    s.label("shop", Some("edge"));
    let running = spawn(reporter(&s));
    assert_eq!(
        s.wait_reports(4).await[3],
        [rejection("shop", Conflict, true)]
    );
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_invalid_policy_reports_nothing() {
    let s = setup();
    let source = s.policy.source();
    let broken: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": source.name, "namespace": source.namespace},
        "data": {(source.key.clone()): "bindings: [{namespace: kube-system, nodePool: cloud}]"},
    }))
    .unwrap();
    s.index.apply(broken);
    s.label("shop", Some("edge"));
    let running = spawn(reporter(&s));
    s.bus.start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(s.reports().is_empty(), "{:?}", s.reports());
    running.stop().await.unwrap();
}
