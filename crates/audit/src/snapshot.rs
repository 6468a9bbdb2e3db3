//! The placement state of a cluster read once, for a one-off audit or
//! explanation outside the controller (`poolkeeper audit`, `poolkeeper
//! explain --kubeconfig`): the Nodes, NodePools, placement ConfigMap and
//! labelled Namespaces go into an index through the same conversions the
//! watchers use.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::Api;
use kube::api::ListParams;
use poolkeeper_api::{NodePool, PlacementException};
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_placement::{PodPlacement, PolicySource};

use crate::error::AuditError;

/// Objects per page when reading Nodes and NodePools.
const PAGE: u32 = 500;

/// An index of the cluster's Nodes, NodePools, placement ConfigMap and the
/// Namespaces that carry the namespace pool label (when label bindings are
/// on).
pub async fn cluster_index(
    client: &kube::Client,
    pool_label: &str,
    policy: &PolicySource,
) -> Result<Index, AuditError> {
    let nodes = list_all::<Node>(Api::all(client.clone()), "Nodes", None).await?;
    let pools = list_all::<NodePool>(Api::all(client.clone()), "NodePools", None).await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &policy.namespace);
    let config_map =
        config_maps
            .get_opt(&policy.name)
            .await
            .map_err(|source| AuditError::ReadCluster {
                what: "the placement ConfigMap",
                source,
            })?;
    let namespaces = match &policy.namespace_labels {
        Some(labels) => {
            let api = Api::<Namespace>::all(client.clone());
            list_all(api, "labelled Namespaces", Some(&labels.pool)).await?
        }
        None => Vec::new(),
    };
    let exceptions = placement_exceptions(client).await?;
    let index = Index::new(pool_label);
    index.reset(nodes);
    index.reset(pools);
    index.reset(config_map.into_iter().collect::<Vec<_>>());
    index.reset(namespaces);
    index.reset(exceptions);
    Ok(index)
}

/// Every PlacementException; none where the cluster does not serve the CRD
/// (poolkeeper is not installed there: no binding can allow one).
async fn placement_exceptions(
    client: &kube::Client,
) -> Result<Vec<PlacementException>, AuditError> {
    let api = Api::<PlacementException>::all(client.clone());
    match list_all(api, "PlacementExceptions", None).await {
        Err(AuditError::ReadCluster {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 404 => Ok(Vec::new()),
        other => other,
    }
}

/// The projection of Pod `namespace/name`.
pub async fn cluster_pod(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<PodPlacement, AuditError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods
        .get(name)
        .await
        .map_err(|source| AuditError::ReadCluster {
            what: "the Pod",
            source,
        })?;
    Ok(PodPlacement::from(pod))
}

/// Every object of `api`, or those carrying the label `labelled`.
async fn list_all<K>(
    api: Api<K>,
    what: &'static str,
    labelled: Option<&str>,
) -> Result<Vec<K>, AuditError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut objects = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(label) = labelled {
            params = params.labels(label);
        }
        if let Some(token) = &token {
            params = params.continue_token(token);
        }
        let page = api
            .list(&params)
            .await
            .map_err(|source| AuditError::ReadCluster { what, source })?;
        objects.extend(page.items);
        token = page.metadata.continue_.filter(|token| !token.is_empty());
        if token.is_none() {
            return Ok(objects);
        }
    }
}
