//! Admission latency as the apiserver records it: its
//! `apiserver_admission_webhook_admission_duration_seconds` histogram for poolkeeper's
//! webhooks, scraped before and after a run of Pod creates in a bound namespace; beside it
//! poolkeeper's own `poolkeeper_webhook_admission_duration_seconds` (handler time) and the
//! round trip of each create as the client saw it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use crate::error::{Result, ScaleError};
use crate::objects;
use crate::process::Poolkeeper;
use crate::stats::{Histogram, histograms};

pub const APISERVER_METRIC: &str = "apiserver_admission_webhook_admission_duration_seconds";
pub const POOLKEEPER_METRIC: &str = "poolkeeper_webhook_admission_duration_seconds";

#[derive(Clone, Debug)]
pub struct AdmissionFigures {
    pub pods: usize,
    pub concurrency: usize,
    pub duration: Duration,
    /// Each create's round trip (both webhooks, the write to etcd).
    pub round_trips: Vec<Duration>,
    /// The apiserver's histogram per webhook name, for the creates only.
    pub apiserver: BTreeMap<String, Histogram>,
    /// poolkeeper's handler histogram per webhook (`mutate`, `validate`).
    pub poolkeeper: BTreeMap<String, Histogram>,
}

/// What the run needs to know.
pub struct PodRun<'a> {
    pub client: &'a Client,
    pub namespace: &'a str,
    pub pods: usize,
    pub concurrency: usize,
    /// Names of poolkeeper's webhooks in the configurations.
    pub webhooks: &'a [String],
}

pub async fn measure(run: &PodRun<'_>, poolkeeper: &Poolkeeper) -> Result<AdmissionFigures> {
    let api: Api<Pod> = Api::namespaced(run.client.clone(), run.namespace);
    wait_mutated(&api).await?;
    let (apiserver_before, poolkeeper_before) = scrape(run, poolkeeper).await?;
    let started = Instant::now();
    let round_trips: Vec<Duration> = futures::stream::iter(0..run.pods)
        .map(|index| create_pod(&api, index))
        .buffer_unordered(run.concurrency.max(1))
        .try_collect()
        .await?;
    let duration = started.elapsed();
    let (apiserver_after, poolkeeper_after) = scrape(run, poolkeeper).await?;
    delete_pods(&api).await?;
    Ok(AdmissionFigures {
        pods: run.pods,
        concurrency: run.concurrency,
        duration,
        round_trips,
        apiserver: since(apiserver_after, &apiserver_before),
        poolkeeper: since(poolkeeper_after, &poolkeeper_before),
    })
}

/// Both histograms, the apiserver's restricted to poolkeeper's webhooks.
async fn scrape(
    run: &PodRun<'_>,
    poolkeeper: &Poolkeeper,
) -> Result<(BTreeMap<String, Histogram>, BTreeMap<String, Histogram>)> {
    let text = apiserver_metrics(run.client).await?;
    let mut apiserver = histograms(&text, APISERVER_METRIC, "name");
    apiserver.retain(|name, _| run.webhooks.contains(name));
    let own = histograms(&poolkeeper.metrics().await?, POOLKEEPER_METRIC, "webhook");
    Ok((apiserver, own))
}

/// The apiserver's `/metrics` text.
pub(crate) async fn apiserver_metrics(client: &Client) -> Result<String> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| {
            ScaleError::kube("building the /metrics request", kube::Error::HttpError(e))
        })?;
    client
        .request_text(request)
        .await
        .map_err(|e| ScaleError::kube("reading the apiserver's /metrics", e))
}

pub(crate) fn since(
    after: BTreeMap<String, Histogram>,
    before: &BTreeMap<String, Histogram>,
) -> BTreeMap<String, Histogram> {
    after
        .into_iter()
        .map(|(name, histogram)| {
            let earlier = before.get(&name).cloned().unwrap_or_default();
            (name, histogram.since(&earlier))
        })
        .collect()
}

/// The webhooks were registered before poolkeeper started; the apiserver loads a
/// configuration asynchronously, so a dry-run create shows when the mutation is in effect.
async fn wait_mutated(api: &Api<Pod>) -> Result<()> {
    let pod: Pod = serde_json::from_value(objects::pod(99_999))
        .map_err(|e| ScaleError::json("building a Pod", e))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = api.create(&dry_run, &pod).await;
        if let Ok(created) = &answer
            && created
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref())
                .is_some()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ScaleError::Unexpected(format!(
                "the webhooks did not mutate a Pod within 30s; last answer: {answer:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn create_pod(api: &Api<Pod>, index: usize) -> Result<Duration> {
    let pod: Pod = serde_json::from_value(objects::pod(index))
        .map_err(|e| ScaleError::json("building a Pod", e))?;
    let started = Instant::now();
    api.create(&PostParams::default(), &pod)
        .await
        .map_err(|e| ScaleError::kube(format!("creating Pod scale-{index:05}"), e))?;
    Ok(started.elapsed())
}

/// Pods that no scheduler bound go at once; nothing runs them.
pub(crate) async fn delete_pods(api: &Api<Pod>) -> Result<()> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    api.delete_collection(&params, &ListParams::default())
        .await
        .map_err(|e| ScaleError::kube("deleting the Pods", e))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(|e| ScaleError::kube("listing the Pods", e))?;
        if left.items.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ScaleError::timeout(
                "deleting the Pods",
                Duration::from_secs(60),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
