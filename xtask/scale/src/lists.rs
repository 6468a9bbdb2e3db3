//! A plain paginated LIST of each kind poolkeeper watches, with the watchers' page size and
//! list semantics (no resourceVersion: a consistent read, as kube's watcher does by
//! default), deserialized into the same types: what the watchers' initial lists cost
//! without anything poolkeeper does with the objects.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{ListParams, ObjectList};
use kube::{Client, Resource};
use poolkeeper_api::{Machine, MachineClass, NodePool};
use serde::de::DeserializeOwned;

use crate::error::{Result, ScaleError};

#[derive(Clone, Debug)]
pub struct ListFigure {
    pub kind: String,
    pub objects: usize,
    pub pages: usize,
    pub bytes: usize,
    pub duration: Duration,
}

/// Where the lists read from.
#[derive(Clone)]
pub struct ListScope {
    pub client: Client,
    pub namespace: String,
    pub placement_namespace: String,
    pub page_size: u32,
}

/// Each kind on its own, then all five at once as the watchers start them; the last figure
/// is the concurrent one (kind `all, concurrently`).
pub async fn measure(scope: &ListScope) -> Result<Vec<ListFigure>> {
    let mut figures = vec![
        list::<Node>(scope, None).await?,
        list::<NodePool>(scope, None).await?,
        list::<MachineClass>(scope, Some(&scope.namespace)).await?,
        list::<Machine>(scope, Some(&scope.namespace)).await?,
        list::<ConfigMap>(scope, Some(&scope.placement_namespace)).await?,
    ];
    let started = Instant::now();
    let all = futures::try_join!(
        list::<Node>(scope, None),
        list::<NodePool>(scope, None),
        list::<MachineClass>(scope, Some(&scope.namespace)),
        list::<Machine>(scope, Some(&scope.namespace)),
        list::<ConfigMap>(scope, Some(&scope.placement_namespace)),
    )?;
    let parts = [all.0, all.1, all.2, all.3, all.4];
    figures.push(ListFigure {
        kind: "all, concurrently".to_owned(),
        objects: parts.iter().map(|f| f.objects).sum(),
        pages: parts.iter().map(|f| f.pages).sum(),
        bytes: parts.iter().map(|f| f.bytes).sum(),
        duration: started.elapsed(),
    });
    Ok(figures)
}

async fn list<K>(scope: &ListScope, namespace: Option<&str>) -> Result<ListFigure>
where
    K: Resource + DeserializeOwned + Clone,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let url = K::url_path(&K::DynamicType::default(), namespace);
    let started = Instant::now();
    let (mut objects, mut pages, mut bytes) = (0, 0, 0);
    let mut params = ListParams::default().limit(scope.page_size);
    loop {
        let request = kube::core::Request::new(&url)
            .list(&params)
            .map_err(|e| ScaleError::Unexpected(format!("building the LIST of {kind}: {e}")))?;
        let text = scope
            .client
            .request_text(request)
            .await
            .map_err(|e| ScaleError::kube(format!("listing {kind}"), e))?;
        let page: ObjectList<K> = serde_json::from_str(&text)
            .map_err(|e| ScaleError::json(format!("reading a page of {kind}"), e))?;
        objects += page.items.len();
        pages += 1;
        bytes += text.len();
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(ListFigure {
        kind,
        objects,
        pages,
        bytes,
        duration: started.elapsed(),
    })
}
