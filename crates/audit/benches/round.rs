//! One audit round over 10,000 realistic Pods and 1,000 Nodes: its time and
//! the memory it needs while it runs, against an in-process Pod source that
//! serves each page as the API server's JSON bytes.
//!
//! Layout: 1,000 Nodes in 50 pools of 20; 20 namespaces bound to pools 0-19
//! with 450 Pods each (2 % of them scheduled outside their pool, 1 %
//! pending with a selector that reaches outside), and 1,000 Pods carrying
//! the pool label in 10 unbound namespaces. Pages of 500 (`audit.pageSize`).
//!
//! Each page is received as its real path receives it: `KubePods` joins the
//! body's chunks, freeing each once copied, and decodes the one copy into
//! projections (`join_chunks` and the JSON decoding of `decode_page`, the crate's own); beside it, kube's `Client::request` (the body
//! collected, then copied into a String) decoded into projections, and
//! `Api::<Pod>::list` (the same, decoded into full Pods, then projected).
//!
//! The global allocator is `stats_alloc`'s instrumented system allocator.
//! Live bytes are sampled whenever a page's memory is at its height (both
//! copies of a body, a body and its decoded objects, and for chunks each
//! time one is freed after it was copied), and after the round, with its
//! result and after dropping it. Figures are
//! bytes above the live heap before the round.
//!
//! Then the paced round: 200 bound namespaces of 300 Pods (one page each),
//! every page answered after 20 ms as from a busy API server, then decoded
//! as `KubePods` decodes it: wall time per round with 1, 4, 8 and 16 LISTs
//! in flight (`audit.concurrency`), and with no latency (the round's own
//! work).
//!
//! `cargo bench -p poolkeeper-audit --bench round` prints the tables;
//! without `--bench` (as under `cargo test --benches`) a small smoke run.

use std::alloc::System;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::core::ObjectList;
use poolkeeper_audit::testing::{PageStart, PodLister, PodPage, PodQuery, join_chunks};
use poolkeeper_audit::{AuditSettings, audit_round};
use poolkeeper_config::Config;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::{PodPlacement, PolicyCache};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NAME: &str = "audit_round";
const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const POOLS: usize = 50;
const BOUND: usize = 20;
const UNBOUND_NAMESPACES: usize = 10;
const PAGE_SIZE: u32 = 500;

/// Sizes of one run.
#[derive(Clone, Copy)]
struct Scale {
    nodes: usize,
    /// Bound namespaces, namespace `team-b` to pool `b % POOLS`.
    bound: usize,
    pods_per_bound_namespace: usize,
    labelled_pods: usize,
    rounds: usize,
}

const FULL: Scale = Scale {
    nodes: 1_000,
    bound: BOUND,
    pods_per_bound_namespace: 450,
    labelled_pods: 1_000,
    rounds: 7,
};

const SMOKE: Scale = Scale {
    nodes: 100,
    bound: BOUND,
    pods_per_bound_namespace: 10,
    labelled_pods: 20,
    rounds: 1,
};

/// Live heap bytes. stats_alloc already counts a reallocation's growth in
/// `bytes_allocated` (and its shrinking in `bytes_deallocated`), so
/// `bytes_reallocated` must not be added again.
fn live() -> i64 {
    let s = INSTRUMENTED_SYSTEM.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

fn node_name(i: usize) -> String {
    format!("ip-10-0-{}-{}.eu-west-1.compute.internal", i / 250, i % 250)
}

fn node(i: usize, nodes: usize) -> Node {
    let pool = i * POOLS / nodes;
    serde_json::from_value(json!({
        "metadata": {"name": node_name(i), "labels": {
            POOL_LABEL: format!("pool-{pool}"),
            "kubernetes.io/hostname": node_name(i),
            "topology.kubernetes.io/zone": format!("eu-west-1{}", ["a", "b", "c"][i % 3]),
            "node.kubernetes.io/instance-type": "m5.xlarge",
        }},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("node parses")
}

/// The placement policy's holder of the default configuration.
fn policy() -> PolicyCache {
    PolicyCache::from(&Config::default().placement)
}

fn index(scale: Scale) -> Arc<Index> {
    let index = Index::new(POOL_LABEL);
    index.reset(
        (0..scale.nodes)
            .map(|i| node(i, scale.nodes))
            .collect::<Vec<_>>(),
    );
    let pools: Vec<poolkeeper_api::NodePool> = (0..POOLS)
        .map(|p| {
            serde_json::from_value(json!({
                "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
                "metadata": {"name": format!("pool-{p}")}, "spec": {"type": "Cloud"},
            }))
            .expect("pool parses")
        })
        .collect();
    index.reset(pools);
    let bindings: Vec<Value> = (0..scale.bound)
        .map(|b| json!({"namespace": format!("team-{b}"), "nodePool": format!("pool-{}", b % POOLS)}))
        .collect();
    let policy = serde_json::to_string(&json!({"bindings": bindings})).expect("policy");
    let source = PolicyCache::from(&Config::default().placement)
        .source()
        .clone();
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": source.name, "namespace": source.namespace},
        "data": {(source.key.clone()): policy},
    }))
    .expect("config map parses");
    index.apply(config_map);
    Arc::new(index)
}

/// A Pod as the API server returns it: a Deployment's replica with
/// managedFields, two containers, the default tolerations and a status.
fn pod(namespace: &str, i: usize, node: Option<String>, labels: Value, spec: Value) -> Value {
    let name = format!("checkout-api-7d9f8b6c5d-{i:05}");
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace,
            "uid": format!("0b5e6f3a-1c2d-4e5f-8a9b-{i:012}"),
            "resourceVersion": format!("{}", 1_000_000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "generateName": "checkout-api-7d9f8b6c5d-",
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "checkout-api-7d9f8b6c5d",
                "uid": "5a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                    "f:ownerReferences": {".": {}, "k:{\"uid\":\"5a1b2c3d\"}": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"api\"}": {".": {}, "f:image": {}, "f:name": {}, "f:resources": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2025-01-01T00:00:10Z",
                "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:podIP": {}, "f:startTime": {}}}}]
        },
        "spec": {
            "containers": [
                {"name": "api", "image": "registry.example.com/shop/checkout-api:v2.31.4",
                 "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                 "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                 "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
                {"name": "envoy", "image": "registry.example.com/mesh/envoy:v1.32.1",
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler", "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        },
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" },
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:10Z"},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:01Z"}],
            "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}], "hostIP": "10.0.1.2", "qosClass": "Burstable",
            "startTime": "2025-01-01T00:00:02Z",
            "containerStatuses": [{"name": "api", "ready": true, "restartCount": 0, "image": "registry.example.com/shop/checkout-api:v2.31.4",
                "imageID": "registry.example.com/shop/checkout-api@sha256:4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b",
                "containerID": "containerd://9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b", "started": true,
                "state": {"running": {"startedAt": "2025-01-01T00:00:05Z"}}}]}
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    if let (Some(target), Value::Object(extra)) = (pod["spec"].as_object_mut(), spec) {
        target.extend(extra);
    }
    pod
}

/// A node of `pool` (scheduled inside) or of the next pool (outside).
fn node_of(pool: usize, i: usize, scale: Scale) -> String {
    let per_pool = scale.nodes / POOLS;
    node_name(pool * per_pool + i % per_pool)
}

/// Every Pod by query, each query's pages serialized as the API server
/// would send them.
fn pages(scale: Scale) -> Vec<(PodQuery, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for b in 0..scale.bound {
        let namespace = format!("team-{b}");
        let pods: Vec<Value> = (0..scale.pods_per_bound_namespace)
            .map(|i| {
                let labels = json!({"app": "checkout-api", "pod-template-hash": "7d9f8b6c5d"});
                match i % 100 {
                    0 | 1 => pod(
                        &namespace,
                        i,
                        Some(node_of((b + 1) % POOLS, i, scale)),
                        labels,
                        json!({}),
                    ),
                    2 => pod(
                        &namespace,
                        i,
                        None,
                        labels,
                        json!({"nodeSelector": {"topology.kubernetes.io/zone": "eu-west-1a"}}),
                    ),
                    _ => pod(
                        &namespace,
                        i,
                        Some(node_of(b % POOLS, i, scale)),
                        labels,
                        json!({}),
                    ),
                }
            })
            .collect();
        let query = PodQuery::Namespace {
            namespace,
            pool_label: POOL_LABEL.to_owned(),
            leave_out: Vec::new(),
        };
        out.push((query, serialize_pages(&pods)));
    }
    let labelled: Vec<Value> = (0..scale.labelled_pods)
        .map(|i| {
            // Pools no namespace is bound to, while there are some.
            let pool = if scale.bound < POOLS {
                scale.bound + i % (POOLS - scale.bound)
            } else {
                i % POOLS
            };
            let labels = json!({"app": "edge-agent", POOL_LABEL: format!("pool-{pool}")});
            let namespace = format!("edge-{}", i % UNBOUND_NAMESPACES);
            pod(
                &namespace,
                i,
                Some(node_of(pool, i, scale)),
                labels,
                json!({}),
            )
        })
        .collect();
    out.push((
        PodQuery::Labelled {
            pool_label: POOL_LABEL.to_owned(),
        },
        serialize_pages(&labelled),
    ));
    out
}

fn serialize_pages(pods: &[Value]) -> Vec<Vec<u8>> {
    let chunks: Vec<&[Value]> = pods.chunks(PAGE_SIZE as usize).collect();
    let last = chunks.len().saturating_sub(1);
    chunks
        .iter()
        .enumerate()
        .map(|(n, items)| {
            let token = if n < last {
                json!(format!("{}", n + 1))
            } else {
                json!("")
            };
            serde_json::to_vec(&json!({
                "apiVersion": "v1", "kind": "PodList",
                "metadata": {"resourceVersion": "123", "continue": token},
                "items": items,
            }))
            .expect("page serializes")
        })
        .collect()
}

/// How a page is received and decoded.
#[derive(Clone, Copy, PartialEq)]
enum Decode {
    /// `Api::<Pod>::list`: kube's `Client::request` collects the body
    /// (`Bytes`), copies it into a `String`, decodes `ObjectList<Pod>`; then
    /// `PodPlacement::from` each.
    FullPods,
    /// `Client::request::<ObjectList<PodPlacement>>`: the same two copies of
    /// the body, decoded straight into projections.
    Projections,
    /// `KubePods`: the body's chunks as they arrived (16 KiB here), joined
    /// (each chunk freed once copied) and decoded into projections, as
    /// `join_chunks` and `decode_page` do with a JSON body.
    Chunks,
}

/// Bytes of one received chunk in `Decode::Chunks`.
const CHUNK: usize = 16 * 1024;

/// The highest live heap seen at any sample.
fn sample(peak: &AtomicI64) {
    peak.fetch_max(live(), Ordering::SeqCst);
}

/// A chunk of a body that samples the live heap when it is freed: the
/// moment after it was read, with the projections so far and the chunks
/// still to read all alive.
struct Sampled {
    bytes: Vec<u8>,
    peak: Arc<AtomicI64>,
}

impl AsRef<[u8]> for Sampled {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Sampled {
    fn drop(&mut self) {
        sample(&self.peak);
    }
}

struct BytesLister {
    pages: Vec<(PodQuery, Vec<Vec<u8>>)>,
    decode: Decode,
    /// Each page is answered after this long (tokio's clock), as an API
    /// server would, then decoded.
    latency: Duration,
    /// The most live bytes seen while a page was received and decoded.
    peak: Arc<AtomicI64>,
}

impl BytesLister {
    /// The page as `decode` receives it from the body bytes `sent`.
    fn receive(&self, sent: &[u8]) -> ObjectList<PodPlacement> {
        match self.decode {
            Decode::FullPods | Decode::Projections => {
                let collected: Vec<u8> = sent.to_vec();
                let text = String::from_utf8(collected.to_vec()).expect("utf-8");
                sample(&self.peak);
                drop(collected);
                if self.decode == Decode::Projections {
                    let list: ObjectList<PodPlacement> =
                        serde_json::from_str(&text).expect("page decodes");
                    sample(&self.peak);
                    return list;
                }
                let list: ObjectList<Pod> = serde_json::from_str(&text).expect("page decodes");
                sample(&self.peak);
                drop(text);
                ObjectList {
                    types: list.types,
                    metadata: list.metadata,
                    items: list.items.into_iter().map(PodPlacement::from).collect(),
                }
            }
            Decode::Chunks => {
                let chunks: Vec<Sampled> = sent
                    .chunks(CHUNK)
                    .map(|chunk| Sampled {
                        bytes: chunk.to_vec(),
                        peak: self.peak.clone(),
                    })
                    .collect();
                sample(&self.peak);
                // `join_chunks`, then the decoding, sampling the height between them.
                let body = join_chunks(chunks);
                let list = serde_json::from_slice(&body).expect("page decodes");
                sample(&self.peak);
                list
            }
        }
    }
}

impl BytesLister {
    fn serve(&self, query: &PodQuery, continue_token: Option<&str>) -> PodPage {
        let page: usize = continue_token.map_or(0, |t| t.parse().expect("token"));
        // Every Pod of a page is read and judged as sent: the Nodes the
        // round asks to leave out are not.
        let sent_for = match query {
            PodQuery::Namespace {
                namespace,
                pool_label,
                ..
            } => PodQuery::Namespace {
                namespace: namespace.clone(),
                pool_label: pool_label.clone(),
                leave_out: Vec::new(),
            },
            labelled => labelled.clone(),
        };
        let pages = self
            .pages
            .iter()
            .find(|(q, _)| *q == sent_for)
            .map(|(_, pages)| pages.as_slice())
            .unwrap_or_default();
        match pages.get(page) {
            None => PodPage::default(),
            Some(sent) => {
                let list = self.receive(sent);
                sample(&self.peak);
                PodPage {
                    pods: list.items,
                    continue_token: list.metadata.continue_.filter(|t| !t.is_empty()),
                    resource_version: list.metadata.resource_version,
                }
            }
        }
    }
}

impl PodLister for BytesLister {
    fn page<'a>(
        &'a self,
        query: &'a PodQuery,
        _limit: u32,
        start: PageStart<'a>,
    ) -> BoxFuture<'a, Result<PodPage, kube::Error>> {
        let continue_token = start.continue_token();
        Box::pin(async move {
            if !self.latency.is_zero() {
                tokio::time::sleep(self.latency).await;
            }
            Ok(self.serve(query, continue_token))
        })
    }
}

/// Figures of one way of decoding.
struct Measured {
    decode: &'static str,
    /// The largest page body, in bytes.
    page_bytes: usize,
    pods: usize,
    violations: usize,
    times: Vec<Duration>,
    peak: i64,
    with_result: i64,
    after: i64,
}

fn measure(scale: Scale, decode: Decode) -> Measured {
    let mut settings = AuditSettings::from(&Config::default());
    settings.page_size = PAGE_SIZE;
    let index = index(scale);
    let peak = Arc::new(AtomicI64::new(0));
    let pages = pages(scale);
    let page_bytes = pages
        .iter()
        .flat_map(|(_, bodies)| bodies.iter().map(Vec::len))
        .max()
        .unwrap_or_default();
    let lister = BytesLister {
        pages,
        decode,
        latency: Duration::ZERO,
        peak: peak.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let previous = HashSet::new();
    let mut times = Vec::new();
    let (mut pods, mut violations, mut peak_extra, mut with_result, mut after) = (0, 0, 0, 0, 0);
    for _ in 0..scale.rounds {
        let before = live();
        peak.store(before, Ordering::SeqCst);
        let started = Instant::now();
        let round = runtime
            .block_on(audit_round(
                &lister,
                &index,
                &policy(),
                &settings,
                &previous,
            ))
            .expect("round");
        times.push(started.elapsed());
        with_result = live() - before;
        peak_extra = peak_extra.max(peak.load(Ordering::SeqCst).max(live()) - before);
        pods = round.pods;
        violations = round.violations();
        drop(round);
        after = live() - before;
    }
    times.sort();
    Measured {
        page_bytes,
        decode: match decode {
            Decode::FullPods => "Api::<Pod>::list",
            Decode::Projections => "request::<ObjectList<PodPlacement>>",
            Decode::Chunks => "KubePods (chunks)",
        },
        pods,
        violations,
        times,
        peak: peak_extra,
        with_result,
        after,
    }
}

fn print(rows: &[Measured], scale: Scale) {
    println!(
        "audit round: {} Pods ({} namespaces bound, {} labelled Pods elsewhere), {} Nodes in {POOLS} pools, pages of {PAGE_SIZE}, {} rounds",
        rows[0].pods, scale.bound, scale.labelled_pods, scale.nodes, scale.rounds
    );
    println!("largest page body: {} bytes", rows[0].page_bytes);
    println!(
        "{:<36} {:>10} {:>10} {:>10} {:>12} {:>10} {:>14} {:>10}",
        "decoding", "violations", "median", "min", "peak extra", "per Pod", "with result", "after"
    );
    for row in rows {
        let median = row.times[row.times.len() / 2];
        println!(
            "{:<36} {:>10} {:>8.1}ms {:>8.1}ms {:>12} {:>10} {:>14} {:>10}",
            row.decode,
            row.violations,
            median.as_secs_f64() * 1e3,
            row.times[0].as_secs_f64() * 1e3,
            row.peak,
            row.peak / row.pods.max(1) as i64,
            row.with_result,
            row.after,
        );
    }
}

/// The paced case: many bound namespaces, every page answered after a fixed
/// latency, as from a busy API server.
struct Paced {
    scale: Scale,
    latency: Duration,
    concurrency: &'static [usize],
}

const PACED_FULL: Paced = Paced {
    scale: Scale {
        nodes: 1_000,
        bound: 200,
        pods_per_bound_namespace: 300,
        labelled_pods: 1_000,
        rounds: 3,
    },
    latency: Duration::from_millis(20),
    concurrency: &[1, 4, 8, 16],
};

const PACED_SMOKE: Paced = Paced {
    scale: Scale {
        nodes: 100,
        bound: 10,
        pods_per_bound_namespace: 5,
        labelled_pods: 20,
        rounds: 1,
    },
    latency: Duration::from_millis(1),
    concurrency: &[1, 4],
};

/// Wall time per round (median, min) for each concurrency, and with no
/// latency at all (the round's own work, one LIST at a time).
fn paced(paced: &Paced) {
    let scale = paced.scale;
    let mut settings = AuditSettings::from(&Config::default());
    settings.page_size = PAGE_SIZE;
    let index = index(scale);
    let mut lister = BytesLister {
        pages: pages(scale),
        decode: Decode::Chunks,
        latency: Duration::ZERO,
        peak: Arc::new(AtomicI64::new(0)),
    };
    let requests: usize = lister.pages.iter().map(|(_, pages)| pages.len()).sum();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    println!(
        "paced audit round: {} namespaces bound x {} Pods, {} labelled Pods elsewhere, {requests} Pod LISTs (pages of {PAGE_SIZE}), {} ms per page, {} rounds",
        scale.bound,
        scale.pods_per_bound_namespace,
        scale.labelled_pods,
        paced.latency.as_millis(),
        scale.rounds,
    );
    println!(
        "{:<24} {:>10} {:>10} {:>10}",
        "LISTs in flight", "median", "min", "vs 1"
    );
    let runs = std::iter::once((1, Duration::ZERO))
        .chain(paced.concurrency.iter().map(|&c| (c, paced.latency)));
    let mut sequential = None;
    for (concurrency, latency) in runs {
        settings.concurrency = concurrency;
        lister.latency = latency;
        let mut times: Vec<Duration> = (0..scale.rounds)
            .map(|_| {
                let started = Instant::now();
                let round = runtime
                    .block_on(audit_round(
                        &lister,
                        &index,
                        &policy(),
                        &settings,
                        &HashSet::new(),
                    ))
                    .expect("round");
                assert!(round.violations() > 0, "the layout has violations");
                started.elapsed()
            })
            .collect();
        times.sort();
        let median = times[times.len() / 2];
        let label = if latency.is_zero() {
            "1, no latency".to_owned()
        } else {
            concurrency.to_string()
        };
        let ratio = match sequential {
            Some(base) if !latency.is_zero() => {
                format!("{:.2}x", median.as_secs_f64() / f64::max(base, 1e-9))
            }
            _ => String::new(),
        };
        if !latency.is_zero() && concurrency == 1 {
            sequential = Some(median.as_secs_f64());
        }
        println!(
            "{label:<24} {:>8.0}ms {:>8.0}ms {ratio:>10}",
            median.as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        return;
    }
    let scale = if benching { FULL } else { SMOKE };
    let rows = [
        measure(scale, Decode::Chunks),
        measure(scale, Decode::Projections),
        measure(scale, Decode::FullPods),
    ];
    assert!(
        rows.iter().all(|row| row.violations > 0),
        "the layout has violations"
    );
    print(&rows, scale);
    paced(if benching { &PACED_FULL } else { &PACED_SMOKE });
}
