//! Tests of the audit: rounds fed by a fake Pod source, and the component
//! on a paused clock.

mod component;
mod concurrency;
mod lister;
mod protobuf;
mod round;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use parking_lot::Mutex;
use poolkeeper_config::Config;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::{PodPlacement, PolicyCache, Workload, WorkloadKind};
use serde_json::{Value, json};

use crate::AuditSettings;
use crate::testing::{PageStart, PodLister, PodPage, PodQuery, WorkloadPage};

pub(crate) const POOL: &str = "apps.openyurt.io/nodepool";

pub(crate) const POLICY: &str = "
bindings:
  - {namespace: shop-hangzhou, nodePool: hangzhou}
  - {namespace: shop-beijing, nodePool: beijing, mode: dryrun}
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
";

pub(crate) fn settings() -> AuditSettings {
    let mut settings = AuditSettings::from(&Config::default());
    settings.page_size = 2;
    settings
}

pub(crate) fn k8s_node(name: &str, pool: Option<&str>) -> Node {
    let labels = match pool {
        Some(pool) => json!({(POOL): pool}),
        None => json!({}),
    };
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// The placement policy's holder the tests run with: the defaults.
pub(crate) fn policy() -> PolicyCache {
    PolicyCache::from(&Config::default().placement)
}

pub(crate) fn policy_config_map(yaml: &str) -> ConfigMap {
    let policy = policy();
    let source = policy.source();
    serde_json::from_value(json!({
        "metadata": {"name": source.name, "namespace": source.namespace},
        "data": {(source.key.clone()): yaml},
    }))
    .unwrap()
}

/// hangzhou (Cloud): hz-1, hz-2; beijing (Cloud): bj-1; free-1 in no pool.
pub(crate) fn cluster() -> Arc<Index> {
    let index = Index::new(POOL);
    for (name, pool) in [
        ("hz-1", Some("hangzhou")),
        ("hz-2", Some("hangzhou")),
        ("bj-1", Some("beijing")),
        ("free-1", None),
    ] {
        index.apply(k8s_node(name, pool));
    }
    for pool in ["hangzhou", "beijing"] {
        let node_pool: poolkeeper_api::NodePool = serde_json::from_value(json!({
            "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
            "metadata": {"name": pool}, "spec": {"type": "Cloud"},
        }))
        .unwrap();
        index.apply(node_pool);
    }
    index.apply(policy_config_map(POLICY));
    Arc::new(index)
}

/// A Pod of `namespace` (UID `uid-NAME`) with `labels` and `spec`.
pub(crate) fn pod(namespace: &str, name: &str, labels: Value, spec: Value) -> PodPlacement {
    serde_json::from_value(json!({
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"), "labels": labels},
        "spec": spec,
    }))
    .unwrap()
}

pub(crate) fn on(node: &str) -> Value {
    json!({"nodeName": node})
}

/// The LIST of a bound namespace's Pods, leaving out those on `leave_out`.
pub(crate) fn namespace_query(namespace: &str, leave_out: &[&str]) -> PodQuery {
    PodQuery::Namespace {
        namespace: namespace.to_owned(),
        pool_label: POOL.to_owned(),
        leave_out: leave_out.iter().map(|node| (*node).to_owned()).collect(),
    }
}

/// One LIST call: the query, its limit and where its page starts.
pub(crate) type Call = (PodQuery, u32, Start);

/// [`PageStart`], owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    Latest,
    NotOlderThan(String),
    Continue(String),
}

impl Start {
    pub(crate) fn continue_token(&self) -> Option<&str> {
        self.borrowed().continue_token()
    }

    fn borrowed(&self) -> PageStart<'_> {
        match self {
            Start::Latest => PageStart::Latest,
            Start::NotOlderThan(version) => PageStart::NotOlderThan(version),
            Start::Continue(token) => PageStart::Continue(token),
        }
    }
}

impl From<PageStart<'_>> for Start {
    fn from(start: PageStart<'_>) -> Self {
        match start {
            PageStart::Latest => Start::Latest,
            PageStart::NotOlderThan(version) => Start::NotOlderThan(version.to_owned()),
            PageStart::Continue(token) => Start::Continue(token.to_owned()),
        }
    }
}

/// The `resourceVersion` of every page the fake answers.
pub(crate) const FAKE_VERSION: &str = "42";

/// How long the fake takes to answer a page of a query (from a token).
pub(crate) type Latency = Arc<dyn Fn(&PodQuery, Option<&str>) -> Duration + Send + Sync>;

/// Pods served a page at a time, as the API server would select them; the
/// continue token is the offset of the next page.
#[derive(Clone, Default)]
pub(crate) struct FakePods {
    pub(crate) pods: Arc<Mutex<Vec<PodPlacement>>>,
    pub(crate) workloads: Arc<Mutex<Vec<Workload>>>,
    pub(crate) calls: Arc<Mutex<Vec<Call>>>,
    pub(crate) failing: Arc<AtomicBool>,
    /// Only this query fails (every one does while `failing`).
    pub(crate) failing_query: Arc<Mutex<Option<PodQuery>>>,
    /// Each page's answer waits this long (on tokio's clock); none without.
    pub(crate) latency: Option<Latency>,
    /// Pages being answered now, and the most ever at once.
    pub(crate) in_flight: Arc<AtomicUsize>,
    pub(crate) max_in_flight: Arc<AtomicUsize>,
}

/// One page being answered: counted in flight until it is dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(fake: &FakePods) -> Self {
        let now = fake.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        fake.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(fake.in_flight.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FakePods {
    /// Workloads of every namespace, listed in one page per kind.
    pub(crate) fn with_workloads(self, workloads: Vec<Workload>) -> Self {
        *self.workloads.lock() = workloads;
        self
    }

    /// Every page answered after `latency` of tokio's clock.
    pub(crate) fn with_latency(
        mut self,
        latency: impl Fn(&PodQuery, Option<&str>) -> Duration + Send + Sync + 'static,
    ) -> Self {
        self.latency = Some(Arc::new(latency));
        self
    }

    pub(crate) fn new(pods: Vec<PodPlacement>) -> Self {
        let fake = Self::default();
        *fake.pods.lock() = pods;
        fake
    }

    fn selected(&self, query: &PodQuery) -> Vec<PodPlacement> {
        self.pods
            .lock()
            .iter()
            .filter(|pod| match query {
                PodQuery::Namespace {
                    namespace,
                    pool_label,
                    leave_out,
                } => {
                    pod.namespace == *namespace
                        && !pod.labels.contains_key(pool_label)
                        && pod
                            .node_name()
                            .is_none_or(|node| !leave_out.iter().any(|out| out == node))
                }
                PodQuery::Labelled { pool_label } => pod.labels.contains_key(pool_label),
            })
            .cloned()
            .collect()
    }
}

impl PodLister for FakePods {
    fn page<'a>(
        &'a self,
        query: &'a PodQuery,
        limit: u32,
        start: PageStart<'a>,
    ) -> BoxFuture<'a, Result<PodPage, kube::Error>> {
        let continue_token = start.continue_token();
        self.calls
            .lock()
            .push((query.clone(), limit, Start::from(start)));
        let fails = self.failing.load(Ordering::SeqCst)
            || self.failing_query.lock().as_ref() == Some(query);
        let result = if fails {
            Err(kube::Error::Api(Box::new(kube::core::Status::failure(
                "etcd is down",
                "InternalError",
            ))))
        } else {
            let selected = self.selected(query);
            let start: usize = continue_token.map_or(0, |token| token.parse().unwrap());
            let end = (start + limit as usize).min(selected.len());
            Ok(PodPage {
                pods: selected[start..end].to_vec(),
                continue_token: (end < selected.len()).then(|| end.to_string()),
                resource_version: Some(FAKE_VERSION.to_owned()),
            })
        };
        let latency = self
            .latency
            .as_ref()
            .map_or(Duration::ZERO, |latency| latency(query, continue_token));
        let in_flight = InFlight::new(self);
        Box::pin(async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            drop(in_flight);
            result
        })
    }

    fn workloads<'a>(
        &'a self,
        kind: WorkloadKind,
        _limit: u32,
        _continue_token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<WorkloadPage, kube::Error>> {
        let workloads = self
            .workloads
            .lock()
            .iter()
            .filter(|w| w.kind == kind)
            .cloned()
            .collect();
        Box::pin(async move {
            Ok(WorkloadPage {
                workloads,
                continue_token: None,
            })
        })
    }
}

/// The round failed on the LIST of `namespace`'s Pods, and says so.
pub(crate) fn assert_failed_listing(error: &crate::AuditError, namespace: &str) {
    assert!(
        matches!(error, crate::AuditError::ListPods { .. }),
        "{error}"
    );
    let expected = format!("listing the Pods of namespace {namespace} failed");
    assert!(error.to_string().starts_with(&expected), "{error}");
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect::<serde_json::Map<_, _>>(),
    )
}

pub(crate) fn counts(round: &crate::Round) -> BTreeMap<(String, String, &'static str), usize> {
    round
        .counts
        .iter()
        .map(|c| ((c.namespace.clone(), c.pool.clone(), c.reason), c.pods))
        .collect()
}
