//! Filling the control plane: every object created (and its status written where a
//! controller would), `concurrency` requests in flight.
//!
//! kube-rs has no client-side rate limiter (client-go's QPS/burst have no counterpart; its
//! only middleware is an optional retry of 429/503/504), and the test control plane runs
//! without priority-and-fairness, so the concurrency alone bounds the rate.

use std::future::Future;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use poolkeeper_api::{Machine, MachineClass, NodePool};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::{Result, ScaleError};
use crate::objects::{self, Sizes};

/// Attempts of one request that the apiserver answered with 429 or 5xx.
const ATTEMPTS: usize = 3;
const RETRY_DELAY: Duration = Duration::from_millis(200);

/// One kind's loading.
#[derive(Clone, Debug)]
pub struct LoadPhase {
    pub what: &'static str,
    pub objects: usize,
    pub requests: usize,
    pub duration: Duration,
}

/// Where the loaded objects live.
#[derive(Clone)]
pub struct Target {
    pub client: Client,
    pub namespace: String,
    pub placement_namespace: String,
    pub placement_name: String,
    pub placement_key: String,
    pub concurrency: usize,
}

/// Creates the whole cluster, kind by kind, and times each kind.
pub async fn load(target: &Target, sizes: &Sizes) -> Result<Vec<LoadPhase>> {
    let mut phases = vec![
        load_pools(target, sizes).await?,
        load_nodes(target, sizes).await?,
        load_classes(target, sizes).await?,
        load_machines(target, sizes).await?,
    ];
    let started = Instant::now();
    write_placement(target, sizes).await?;
    phases.push(LoadPhase {
        what: "placement ConfigMap",
        objects: 1,
        requests: 1,
        duration: started.elapsed(),
    });
    Ok(phases)
}

async fn load_pools(target: &Target, sizes: &Sizes) -> Result<LoadPhase> {
    let api: Api<NodePool> = Api::all(target.client.clone());
    let sizes = *sizes;
    concurrently("NodePools", sizes.pools, 2, target.concurrency, |pool| {
        let api = api.clone();
        async move {
            let name = objects::pool_name(pool);
            create(&api, objects::node_pool(pool)).await?;
            patch_status(&api, &name, objects::node_pool_status(pool, &sizes)).await
        }
    })
    .await
}

/// A Node is created with its status, as a kubelet registers it; its taints are then set
/// again because the apiserver's TaintNodesByCondition admission adds a not-ready taint on
/// creation that no node lifecycle controller removes here.
async fn load_nodes(target: &Target, sizes: &Sizes) -> Result<LoadPhase> {
    let api: Api<Node> = Api::all(target.client.clone());
    let sizes = *sizes;
    concurrently("Nodes", sizes.nodes, 2, target.concurrency, |node| {
        let api = api.clone();
        async move {
            let name = objects::node_name(node);
            create(&api, objects::node(node, &sizes)).await?;
            let taints = objects::node_taints(objects::pool_of_node(node, &sizes));
            patch(&api, &name, json!({"spec": {"taints": taints}})).await
        }
    })
    .await
}

async fn load_classes(target: &Target, sizes: &Sizes) -> Result<LoadPhase> {
    let api: Api<MachineClass> = Api::namespaced(target.client.clone(), &target.namespace);
    let namespace = target.namespace.clone();
    concurrently(
        "MachineClasses",
        sizes.classes,
        1,
        target.concurrency,
        |class| {
            let (api, namespace) = (api.clone(), namespace.clone());
            async move { create(&api, objects::machine_class_object(class, &namespace)).await }
        },
    )
    .await
}

async fn load_machines(target: &Target, sizes: &Sizes) -> Result<LoadPhase> {
    let api: Api<Machine> = Api::namespaced(target.client.clone(), &target.namespace);
    let namespace = target.namespace.clone();
    let sizes = *sizes;
    concurrently(
        "Machines",
        sizes.machines,
        2,
        target.concurrency,
        |machine| {
            let (api, namespace) = (api.clone(), namespace.clone());
            async move {
                let class = objects::machine_class(machine, &sizes);
                create(&api, objects::machine(machine, class, &namespace)).await?;
                patch_status(
                    &api,
                    &objects::machine_name(machine),
                    objects::machine_status(machine),
                )
                .await
            }
        },
    )
    .await
}

async fn write_placement(target: &Target, sizes: &Sizes) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &target.placement_namespace);
    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": target.placement_name, "namespace": target.placement_namespace},
        "data": {(target.placement_key.as_str()): objects::placement_policy(sizes, 0)},
    });
    create(&api, config_map).await
}

/// Runs `each(0..count)` with `concurrency` in flight; `requests` per object, for the figures.
async fn concurrently<F, Fut>(
    what: &'static str,
    count: usize,
    requests: usize,
    concurrency: usize,
    each: F,
) -> Result<LoadPhase>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let started = Instant::now();
    futures::stream::iter(0..count)
        .map(each)
        .buffer_unordered(concurrency.max(1))
        .try_for_each(|()| async { Ok(()) })
        .await?;
    let phase = LoadPhase {
        what,
        objects: count,
        requests: count * requests,
        duration: started.elapsed(),
    };
    println!(
        "  {what}: {count} in {:.1}s ({:.0} requests/s)",
        phase.duration.as_secs_f64(),
        phase.requests as f64 / phase.duration.as_secs_f64().max(1e-9)
    );
    Ok(phase)
}

async fn create<K>(api: &Api<K>, object: Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let object: K = serde_json::from_value(object)
        .map_err(|e| ScaleError::json(format!("building {}", describe::<K>(&name)), e))?;
    let params = PostParams::default();
    retried(&format!("creating {}", describe::<K>(&name)), || {
        api.create(&params, &object)
    })
    .await
}

async fn patch<K>(api: &Api<K>, name: &str, merge: Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let (params, patch) = (PatchParams::default(), Patch::Merge(&merge));
    retried(&format!("patching {}", describe::<K>(name)), || {
        api.patch(name, &params, &patch)
    })
    .await
}

async fn patch_status<K>(api: &Api<K>, name: &str, merge: Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let (params, patch) = (PatchParams::default(), Patch::Merge(&merge));
    retried(
        &format!("writing the status of {}", describe::<K>(name)),
        || api.patch_status(name, &params, &patch),
    )
    .await
}

/// Retries answers that say "later" (429, 5xx); anything else fails the run.
async fn retried<T, F, Fut>(what: &str, mut request: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match request().await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 429 || status.code >= 500 => {
                if attempt == ATTEMPTS {
                    return Err(ScaleError::kube(what, kube::Error::Api(status)));
                }
            }
            Err(error) => return Err(ScaleError::kube(what, error)),
        }
        attempt += 1;
        tokio::time::sleep(RETRY_DELAY).await;
    }
}

fn describe<K: Resource>(name: &str) -> String
where
    K::DynamicType: Default,
{
    format!("{} {name}", K::kind(&K::DynamicType::default()))
}
