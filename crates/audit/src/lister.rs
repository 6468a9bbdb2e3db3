//! Paginated LISTs of Pods, behind a small trait so the round can be fed
//! pages without an API server.

use futures::future::BoxFuture;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, ListParams, VersionMatch};
use kube::core::{GroupVersionKind, Request};
use poolkeeper_placement::{Workload, WorkloadKind};

use crate::page::{PodPage, api_error, decode_page, join_chunks, protobuf};

/// Terminated Pods run nowhere: the API server leaves them out.
pub const RUNNING_OR_PENDING: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Which Pods one LIST reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodQuery {
    /// The Pods of a bound namespace that carry no pool label (the
    /// [`PodQuery::Labelled`] LIST reads those), less those running on
    /// `leave_out`: Nodes of the namespace's pools, where none of them can
    /// be a violation.
    Namespace {
        namespace: String,
        pool_label: String,
        leave_out: Vec<String>,
    },
    /// Pods in every namespace that carry the pool label (any value).
    Labelled { pool_label: String },
}

/// One term of a field selector that leaves out a Node's Pods.
pub const NOT_ON_NODE: &str = ",spec.nodeName!=";

impl PodQuery {
    /// The list parameters of one page: `limit` Pods from `start`, neither
    /// Succeeded nor Failed.
    pub fn list_params(&self, limit: u32, start: PageStart<'_>) -> ListParams {
        let mut params = ListParams::default().limit(limit);
        params = match self {
            Self::Namespace {
                pool_label,
                leave_out,
                ..
            } => {
                let mut fields = RUNNING_OR_PENDING.to_owned();
                for node in leave_out {
                    fields.push_str(NOT_ON_NODE);
                    fields.push_str(node);
                }
                params.fields(&fields).labels(&format!("!{pool_label}"))
            }
            Self::Labelled { pool_label } => params.fields(RUNNING_OR_PENDING).labels(pool_label),
        };
        match start {
            PageStart::Latest => params,
            PageStart::NotOlderThan(version) => {
                params.at(version).matching(VersionMatch::NotOlderThan)
            }
            PageStart::Continue(token) => params.continue_token(token),
        }
    }
}

impl std::fmt::Display for PodQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Namespace { namespace, .. } => write!(f, "the Pods of namespace {namespace}"),
            Self::Labelled { pool_label } => write!(f, "the Pods labelled {pool_label}"),
        }
    }
}

/// One page of a LIST of one workload kind in every namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadPage {
    pub workloads: Vec<Workload>,
    /// Where the next page starts; `None` on the last page.
    pub continue_token: Option<String>,
}

/// Where a LIST's page starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageStart<'a> {
    /// A LIST's first page, as recent as the Pods in etcd: the API server
    /// confirms that its watch cache is current first, which takes up to a
    /// progress notification from etcd (~100 ms) while other resources are
    /// written and no Pod is.
    Latest,
    /// A LIST's first page, no older than this `resourceVersion` of an
    /// earlier answer: served from the watch cache at once.
    NotOlderThan(&'a str),
    /// A later page, at its `continue` token.
    Continue(&'a str),
}

impl<'a> PageStart<'a> {
    /// The page at `continue_token`, else a first page not older than
    /// `not_older_than`, else the latest.
    pub fn of(continue_token: Option<&'a str>, not_older_than: Option<&'a str>) -> Self {
        match (continue_token, not_older_than) {
            (Some(token), _) => Self::Continue(token),
            (None, Some(version)) => Self::NotOlderThan(version),
            (None, None) => Self::Latest,
        }
    }

    /// The `continue` token of a later page; none for a first page.
    pub fn continue_token(self) -> Option<&'a str> {
        match self {
            Self::Continue(token) => Some(token),
            Self::Latest | Self::NotOlderThan(_) => None,
        }
    }
}

/// Reads Pods a page at a time.
pub trait PodLister: Send + Sync + 'static {
    /// The page of `query` that starts at `start`, at most `limit` Pods.
    fn page<'a>(
        &'a self,
        query: &'a PodQuery,
        limit: u32,
        start: PageStart<'a>,
    ) -> BoxFuture<'a, Result<PodPage, kube::Error>>;

    /// The page of the workloads of `kind` in every namespace that starts at
    /// `continue_token`, at most `limit`. A lister that reads only Pods
    /// has none.
    fn workloads<'a>(
        &'a self,
        kind: WorkloadKind,
        limit: u32,
        continue_token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<WorkloadPage, kube::Error>> {
        let _ = (kind, limit, continue_token);
        Box::pin(async { Ok(WorkloadPage::default()) })
    }
}

/// The API server's Pods: the LIST `Api::<Pod>::list` sends, asking for the
/// protobuf encoding first (half the API server's CPU of JSON, a third of
/// the bytes; [`crate::page::protobuf`]) and JSON after it. Each page is decoded
/// from the response body straight into projections, so a page never
/// exists as full Pods and its body is held once (kube's `Client::request`
/// holds two copies). `benches/round.rs` measures the difference.
#[derive(Clone)]
pub struct KubePods {
    client: kube::Client,
}

/// Protobuf where the API server has it (always, for Pods), JSON otherwise:
/// what client-go asks for.
const ACCEPT_PROTOBUF_OR_JSON: &str = "application/vnd.kubernetes.protobuf, application/json";

impl KubePods {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn list(
        &self,
        query: &PodQuery,
        limit: u32,
        start: PageStart<'_>,
    ) -> Result<PodPage, kube::Error> {
        let api: Api<Pod> = match query {
            PodQuery::Namespace { namespace, .. } => {
                Api::namespaced(self.client.clone(), namespace)
            }
            PodQuery::Labelled { .. } => Api::all(self.client.clone()),
        };
        let mut request = Request::new(api.resource_url())
            .list(&query.list_params(limit, start))
            .map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert("list");
        request.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static(ACCEPT_PROTOBUF_OR_JSON),
        );
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await?;
        let status = response.status();
        let protobuf = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|value| {
                value
                    .as_bytes()
                    .starts_with(protobuf::MEDIA_TYPE.as_bytes())
            });
        let mut body = response.into_body();
        let mut chunks = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                chunks.push(data);
            }
        }
        let body = join_chunks(chunks);
        if status.is_client_error() || status.is_server_error() {
            return Err(api_error(status.as_u16(), body, protobuf));
        }
        decode_page(body, protobuf)
    }
}

impl std::fmt::Debug for KubePods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubePods").finish_non_exhaustive()
    }
}

impl PodLister for KubePods {
    fn page<'a>(
        &'a self,
        query: &'a PodQuery,
        limit: u32,
        start: PageStart<'a>,
    ) -> BoxFuture<'a, Result<PodPage, kube::Error>> {
        Box::pin(self.list(query, limit, start))
    }

    fn workloads<'a>(
        &'a self,
        kind: WorkloadKind,
        limit: u32,
        continue_token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<WorkloadPage, kube::Error>> {
        Box::pin(async move {
            let gvk = GroupVersionKind::gvk(kind.group(), "v1", kind.kind());
            let (resource, _) = kube::discovery::pinned_kind(&self.client, &gvk).await?;
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            let mut params = ListParams::default().limit(limit);
            if let Some(token) = continue_token {
                params = params.continue_token(token);
            }
            let list = api.list(&params).await?;
            let mut workloads = Vec::with_capacity(list.items.len());
            for object in list.items {
                let value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
                // An object the API server stored always has a template that parses; one
                // that did not would be judged by nothing, so it is left out.
                if let Ok(workload) = Workload::from_value(kind, value) {
                    workloads.push(workload);
                }
            }
            Ok(WorkloadPage {
                workloads,
                continue_token: list.metadata.continue_.filter(|token| !token.is_empty()),
            })
        })
    }
}
