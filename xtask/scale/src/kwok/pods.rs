//! Pods as a cluster gets them, two ways. One Deployment per bound tenant namespace, created
//! by `parallel` clients at once: kube-controller-manager creates the Pods (each through both
//! webhooks), kube-scheduler binds them, kwok moves them to Running; progress is read from
//! the Deployments' status (a LIST of a few hundred objects). And Pods bound to a Node of
//! their pool at creation (`spec.nodeName`, as a DaemonSet's or a static Pod's), created
//! straight by `parallel` clients at the highest rate the API server takes them: each goes
//! through both webhooks, none waits for kube-scheduler; progress is the count of creates and
//! of kwok's status writes, never a LIST of the Pods.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::error::{Result, ScaleError};
use crate::objects::{self, Sizes};

/// The label of the benchmark's Deployments.
const APP: &str = "kwok-scale";
/// The label of the Pods created bound to a Node.
const BOUND_APP: &str = "kwok-scale-bound";
/// The scheduler of the Pods bound outside their pool by hand: none runs by that name.
const NO_SCHEDULER: &str = "kwok-scale-by-hand";
/// Attempts per bound Pod: an API server at its limit answers 429 or times a webhook out.
const CREATE_ATTEMPTS: u32 = 4;
/// How often progress is read.
pub const POLL: Duration = Duration::from_secs(5);

/// Replicas created and ready, summed over the Deployments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub created: i64,
    pub ready: i64,
}

/// One reading of the progress, `at` after the Deployments were created.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    pub at: Duration,
    pub progress: Progress,
}

/// The Deployment of `pool`'s tenant: `replicas` Pods of a shop service.
fn deployment(pool: usize, replicas: usize) -> serde_json::Value {
    let pod = objects::pod(pool);
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": objects::tenant_namespace(pool), "labels": {"app": APP}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": pod["spec"],
            },
        },
    })
}

/// Bound Pod `index`: in the tenant namespace of pool `index % pools`, on the pool's Node
/// `index / pools` (modulo the pool's Nodes), so that every pool and every Node gets its share.
pub fn bound_pod(index: usize, sizes: &Sizes) -> serde_json::Value {
    let pools = sizes.pools.max(1);
    let pool = index % pools;
    let nodes_in_pool = (sizes.nodes / pools).max(1);
    let node = pool + (index / pools % nodes_in_pool) * pools;
    let mut pod = objects::pod(index);
    pod["metadata"]["name"] = json!(format!("bound-{index:06}"));
    pod["metadata"]["namespace"] = json!(objects::tenant_namespace(pool));
    pod["metadata"]["labels"]["app"] = json!(BOUND_APP);
    pod["spec"]["nodeName"] = json!(objects::node_name(node));
    pod
}

/// The Node outside its pool that bound Pod `index` runs on, for `violating_percent` of
/// each namespace's Pods (every hundredth from the first, spread over the namespaces): a
/// Node of the next pool. The audit finds these Pods outside their pool.
pub fn outside_node(index: usize, sizes: &Sizes, violating_percent: u8) -> Option<String> {
    let pools = sizes.pools.max(1);
    if pools < 2 || (index / pools) % 100 >= usize::from(violating_percent) {
        return None;
    }
    Some(objects::node_name((index + 1) % pools))
}

/// Creates bound Pod `index`. A Pod meant to run outside its pool cannot be created there
/// (the webhooks refuse it); it is created for no scheduler and then bound to the outside
/// Node through its `binding` subresource, which admission does not see: a Pod placed by
/// hand past the scheduler, as the audit exists to find.
async fn create_bound_pod(
    client: &Client,
    index: usize,
    sizes: &Sizes,
    violating_percent: u8,
    retries: &AtomicUsize,
) -> Result<()> {
    let mut object = bound_pod(index, sizes);
    let outside = outside_node(index, sizes, violating_percent);
    if outside.is_some() {
        object["spec"]
            .as_object_mut()
            .map(|spec| spec.remove("nodeName"));
        object["spec"]["schedulerName"] = json!(NO_SCHEDULER);
    }
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod =
        serde_json::from_value(object).map_err(|e| ScaleError::json("building a Pod", e))?;
    create_with_retries(&api, &pod, retries).await?;
    match outside {
        Some(node) => bind(&api, &pod.metadata.name.unwrap_or_default(), &node).await,
        None => Ok(()),
    }
}

async fn bind(api: &Api<Pod>, name: &str, node: &str) -> Result<()> {
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    match api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => Ok(()),
        // Bound already: an earlier attempt went through.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(ScaleError::kube(format!("binding Pod {name} to {node}"), e)),
    }
}

/// Bound Pods `first..first + count`, `parallel` creates in flight; `created` counts those
/// the API server accepted. A create refused `CREATE_ATTEMPTS` times fails the run.
pub async fn create_bound(
    client: &Client,
    sizes: &Sizes,
    pods: std::ops::Range<usize>,
    (parallel, violating_percent): (usize, u8),
    created: Arc<AtomicUsize>,
) -> Result<BoundCreates> {
    let retries = Arc::new(AtomicUsize::new(0));
    futures::stream::iter(pods)
        .map(|index| {
            let (created, retries) = (created.clone(), retries.clone());
            async move {
                create_bound_pod(client, index, sizes, violating_percent, &retries).await?;
                created.fetch_add(1, Ordering::Relaxed);
                Ok::<(), ScaleError>(())
            }
        })
        .buffer_unordered(parallel.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(BoundCreates {
        retries: retries.load(Ordering::Relaxed),
    })
}

/// What the bound creates met on the way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoundCreates {
    /// Creates the API server refused once and took on a later attempt.
    pub retries: usize,
}

async fn create_with_retries(api: &Api<Pod>, pod: &Pod, retries: &AtomicUsize) -> Result<()> {
    let mut attempt = 1;
    loop {
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => return Ok(()),
            // An earlier attempt that timed out on the client's side may have been stored.
            Err(kube::Error::Api(status)) if status.code == 409 && attempt > 1 => return Ok(()),
            Err(error) if attempt < CREATE_ATTEMPTS => {
                retries.fetch_add(1, Ordering::Relaxed);
                backoff(attempt, &error).await;
                attempt += 1;
            }
            Err(error) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                return Err(ScaleError::kube(format!("creating Pod {name}"), error));
            }
        }
    }
}

/// 0.5 s, 1 s, 2 s before the next attempt.
async fn backoff(attempt: u32, error: &kube::Error) {
    if attempt == 1 {
        println!("  a create was refused, retrying: {error}");
    }
    tokio::time::sleep(Duration::from_millis(500 << (attempt - 1))).await;
}

/// Replaces bound Pods for `window`, `per_second` at a time evenly spaced: the oldest of
/// `existing` is deleted (kwok removes it) and the next bound Pod after `existing` created.
/// Returns how many were replaced; stops at the window's end or when `existing` runs out.
pub async fn churn_bound(
    client: &Client,
    sizes: &Sizes,
    existing: std::ops::Range<usize>,
    (per_second, violating_percent): (u32, u8),
    window: Duration,
) -> Result<usize> {
    if per_second == 0 {
        return Ok(0);
    }
    let deadline = Instant::now() + window;
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / per_second);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let retries = AtomicUsize::new(0);
    let mut replaced = 0;
    for (old, new) in existing.clone().zip(existing.end..) {
        ticker.tick().await;
        if Instant::now() >= deadline {
            break;
        }
        let gone = bound_pod(old, sizes);
        let name = gone["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = gone["metadata"]["namespace"].as_str().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        match api.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(ScaleError::kube(format!("deleting Pod {name}"), e)),
        }
        create_bound_pod(client, new, sizes, violating_percent, &retries).await?;
        replaced += 1;
    }
    Ok(replaced)
}

/// The bound Pods not Running yet: one paginated LIST of their metadata, selected by label and
/// phase on the API server's side.
pub async fn bound_not_running(client: &Client) -> Result<usize> {
    let api: Api<Pod> = Api::all(client.clone());
    let mut params = ListParams::default()
        .labels(&format!("app={BOUND_APP}"))
        .fields("status.phase!=Running")
        .limit(5_000);
    let mut count = 0;
    loop {
        let page = api
            .list_metadata(&params)
            .await
            .map_err(|e| ScaleError::kube("listing the bound Pods not Running", e))?;
        count += page.items.len();
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(count),
        }
    }
}

/// Creates the Deployments of `pools` tenants, `parallel` requests at a time, holding
/// `pods` replicas in all (spread evenly, the first ones one more).
pub async fn create(client: &Client, pools: usize, pods: usize, parallel: usize) -> Result<()> {
    futures::stream::iter(0..pools)
        .map(|pool| {
            let replicas = pods / pools + usize::from(pool < pods % pools);
            let api: Api<Deployment> =
                Api::namespaced(client.clone(), &objects::tenant_namespace(pool));
            async move {
                let object: Deployment = serde_json::from_value(deployment(pool, replicas))
                    .map_err(|e| ScaleError::json("building a Deployment", e))?;
                api.create(&PostParams::default(), &object)
                    .await
                    .map(drop)
                    .map_err(|e| {
                        ScaleError::kube(format!("creating the Deployment of pool {pool}"), e)
                    })
            }
        })
        .buffer_unordered(parallel.max(1))
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// Replicas created and ready now.
pub async fn progress(client: &Client) -> Result<Progress> {
    let api: Api<Deployment> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default().labels(&format!("app={APP}")))
        .await
        .map_err(|e| ScaleError::kube("listing the Deployments", e))?;
    let mut progress = Progress::default();
    for deployment in list.items {
        let status = deployment.status.unwrap_or_default();
        progress.created += i64::from(status.replicas.unwrap_or_default());
        progress.ready += i64::from(status.ready_replicas.unwrap_or_default());
    }
    Ok(progress)
}

/// Reads the progress every few seconds until `pods` are ready, or `timeout`; every reading.
pub async fn wait_ready(client: &Client, pods: usize, timeout: Duration) -> Result<Vec<Reading>> {
    let started = Instant::now();
    let mut readings = Vec::new();
    let mut last_print = Instant::now();
    loop {
        let progress = progress(client).await?;
        let reading = Reading {
            at: started.elapsed(),
            progress,
        };
        readings.push(reading);
        if progress.ready >= pods as i64 {
            return Ok(readings);
        }
        if started.elapsed() > timeout {
            println!("  not all ready within {timeout:?}: {progress:?}");
            return Ok(readings);
        }
        if last_print.elapsed() >= Duration::from_secs(30) {
            print(&reading);
            last_print = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A progress line on the console.
pub fn print(reading: &Reading) {
    println!(
        "  {:>5.0}s: {} created, {} ready",
        reading.at.as_secs_f64(),
        reading.progress.created,
        reading.progress.ready
    );
}

/// The highest creation rate over any window of at least `window` between readings; `None`
/// when the readings span no such window.
pub fn peak_rate(readings: &[Reading], window: Duration) -> Option<f64> {
    let mut best = None::<f64>;
    for (i, early) in readings.iter().enumerate() {
        if let Some(late) = readings[i..].iter().find(|r| r.at >= early.at + window) {
            let seconds = (late.at - early.at).as_secs_f64();
            let created = (late.progress.created - early.progress.created) as f64;
            best = Some(best.unwrap_or(0.0).max(created / seconds));
        }
    }
    best
}

/// When the readings first showed `count` created, and ready.
pub fn reached(readings: &[Reading], count: i64) -> (Option<Duration>, Option<Duration>) {
    let created = readings
        .iter()
        .find(|r| r.progress.created >= count)
        .map(|r| r.at);
    let ready = readings
        .iter()
        .find(|r| r.progress.ready >= count)
        .map(|r| r.at);
    (created, ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(seconds: u64, created: i64, ready: i64) -> Reading {
        Reading {
            at: Duration::from_secs(seconds),
            progress: Progress { created, ready },
        }
    }

    #[test]
    fn rates_and_milestones_come_from_the_readings() {
        let readings = [
            reading(0, 0, 0),
            reading(10, 1_000, 500),
            reading(20, 3_000, 2_500),
            reading(30, 3_000, 3_000),
        ];
        let peak = peak_rate(&readings, Duration::from_secs(10)).unwrap();
        assert!((peak - 200.0).abs() < 1e-9);
        assert_eq!(peak_rate(&readings, Duration::from_secs(60)), None);
        assert_eq!(
            reached(&readings, 3_000),
            (Some(Duration::from_secs(20)), Some(Duration::from_secs(30)))
        );
    }

    #[test]
    fn a_bound_pod_runs_on_a_node_of_its_own_pool() {
        let sizes = Sizes {
            nodes: 50,
            pools: 5,
            classes: 20,
            unused_classes: 4,
            machines: 100,
        };
        let mut nodes = std::collections::BTreeSet::new();
        for index in 0..100 {
            let pod = bound_pod(index, &sizes);
            let node = pod["spec"]["nodeName"].as_str().unwrap().to_owned();
            let number: usize = (0..sizes.nodes)
                .find(|&n| objects::node_name(n) == node)
                .expect("a Node of the cluster");
            assert_eq!(objects::pool_of_node(number, &sizes), index % 5);
            assert_eq!(
                pod["metadata"]["namespace"],
                objects::tenant_namespace(index % 5)
            );
            nodes.insert(node);
        }
        assert_eq!(nodes.len(), 50, "every Node gets Pods");
    }

    #[test]
    fn the_violating_share_of_every_namespace_runs_on_the_next_pool() {
        let sizes = Sizes {
            nodes: 50,
            pools: 5,
            classes: 0,
            unused_classes: 0,
            machines: 0,
        };
        assert!((0..10_000).all(|index| outside_node(index, &sizes, 0).is_none()));
        let outside: Vec<(usize, String)> = (0..10_000)
            .filter_map(|index| Some((index, outside_node(index, &sizes, 1)?)))
            .collect();
        assert_eq!(outside.len(), 100, "1 % of 10,000");
        for pool in 0..5 {
            let in_namespace = outside.iter().filter(|(index, _)| index % 5 == pool);
            assert_eq!(
                in_namespace.count(),
                20,
                "pool {pool}: 1 % of its 2,000 Pods"
            );
        }
        for (index, node) in &outside {
            assert_eq!(*node, objects::node_name((index % 5 + 1) % 5));
        }
        assert_eq!(
            (0..10_000)
                .filter(|&index| outside_node(index, &sizes, 100).is_some())
                .count(),
            10_000
        );
    }

    #[test]
    fn replicas_spread_over_the_pools() {
        let d = deployment(3, 7);
        assert_eq!(d["metadata"]["namespace"], "tenant-003");
        assert_eq!(d["spec"]["replicas"], 7);
        assert!(d["spec"]["template"]["spec"]["containers"].is_array());
    }
}
