//! Pods as a cluster gets them: one Deployment per bound tenant namespace, created by
//! `parallel` clients at once; kube-controller-manager creates the Pods (each through both
//! webhooks), kube-scheduler binds them, kwok moves them to Running. Progress is read from
//! the Deployments' status (a LIST of a few hundred objects), never from a LIST of the Pods.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::error::{Result, ScaleError};
use crate::objects;

/// The label of the benchmark's Deployments.
const APP: &str = "kwok-scale";
/// How often progress is read.
const POLL: Duration = Duration::from_secs(5);

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
        readings.push(Reading {
            at: started.elapsed(),
            progress,
        });
        if progress.ready >= pods as i64 {
            return Ok(readings);
        }
        if started.elapsed() > timeout {
            println!("  not all ready within {timeout:?}: {progress:?}");
            return Ok(readings);
        }
        if last_print.elapsed() >= Duration::from_secs(30) {
            println!(
                "  {:>5.0}s: {} created, {} ready",
                started.elapsed().as_secs_f64(),
                progress.created,
                progress.ready
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The highest creation rate over any window of at least `window` between readings.
pub fn peak_rate(readings: &[Reading], window: Duration) -> f64 {
    let mut best = 0.0f64;
    for (i, early) in readings.iter().enumerate() {
        if let Some(late) = readings[i..].iter().find(|r| r.at >= early.at + window) {
            let seconds = (late.at - early.at).as_secs_f64();
            let created = (late.progress.created - early.progress.created) as f64;
            best = best.max(created / seconds);
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
        assert!((peak_rate(&readings, Duration::from_secs(10)) - 200.0).abs() < 1e-9);
        assert_eq!(
            reached(&readings, 3_000),
            (Some(Duration::from_secs(20)), Some(Duration::from_secs(30)))
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
