//! The component: on each `AuditCompleted`, the reports' writes, at most
//! `audit.concurrency` in flight (the pace of the audit's own LISTs).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use poolkeeper_bus::{AuditCount, AuditViolation, Bus, Delivery, Event, Subscription};
use poolkeeper_config::Config;
use poolkeeper_supervisor::{
    BoxError, Component, Context, Health, LeaderTerm, NotLeader, error_chain,
};

use crate::report::{CONTENT_HASH, MANAGED_BY, REPORT_NAME, Write, desired_reports, plan};

const GROUP: &str = "openreports.io";
const VERSION: &str = "v1alpha1";
/// Longest one request may take; a report that failed is written again
/// after the next round.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const FIELD_MANAGER: &str = "poolkeeper";

/// What can go wrong talking to the API server about reports.
#[derive(Debug, thiserror::Error)]
pub enum ReportsError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { what: String },
    #[error("not written: {0}")]
    NotLeader(#[from] NotLeader),
}

/// `audit.reports` and the writes' pace (`audit.concurrency`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportSettings {
    pub enabled: bool,
    pub concurrency: usize,
}

impl From<&Config> for ReportSettings {
    fn from(config: &Config) -> Self {
        Self {
            enabled: config.audit.reports && !config.audit.interval.is_zero(),
            concurrency: config.audit.concurrency,
        }
    }
}

/// The `audit-reports` component. See the crate documentation.
pub struct AuditReports {
    settings: ReportSettings,
    client: kube::Client,
    health: Health,
    subscription: Subscription,
    /// Namespace → content hash of the reports stored, as read at term start
    /// and written since; `None` until the API is found served and read.
    stored: Option<BTreeMap<String, String>>,
    /// The leader's term every write asks first; `None` without leader
    /// election.
    term: Option<LeaderTerm>,
}

impl std::fmt::Debug for AuditReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditReports")
            .field("settings", &self.settings)
            .field("stored", &self.stored.as_ref().map(BTreeMap::len))
            .finish_non_exhaustive()
    }
}

impl AuditReports {
    pub const NAME: &'static str = "audit-reports";

    /// Subscribes to `bus` right away: build it in the leader-gated factory.
    /// What it finds about the API goes to `/readyz?verbose` through `health`.
    pub fn new(settings: ReportSettings, bus: &Bus, client: kube::Client, health: Health) -> Self {
        Self {
            settings,
            client,
            health,
            subscription: bus.subscribe(Self::NAME),
            stored: None,
            term: None,
        }
    }

    /// Every write first asks `term` for leave, bounded by what is left of
    /// it (the reports are applied whole, server-side: there is nothing to
    /// fence with a `test`, and a later round rewrites what differs).
    pub fn guarded_by(mut self, term: LeaderTerm) -> Self {
        self.term = Some(term);
        self
    }

    fn api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, VERSION, "Report"),
            "reports",
        );
        match namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        loop {
            let delivery = tokio::select! {
                biased;
                () = ctx.cancelled() => return Ok(()),
                delivery = self.subscription.next_delivery() => delivery,
            };
            let Delivery::Event(envelope) = delivery else {
                continue;
            };
            if let Event::AuditCompleted {
                counts, results, ..
            } = &envelope.event
            {
                let _busy = ctx.busy("writing audit reports");
                tokio::select! {
                    () = ctx.cancelled() => return Ok(()),
                    () = self.round(counts, results) => {}
                }
            }
        }
    }

    /// Brings the reports in step with one round, once the API is served
    /// and the stored reports are known.
    async fn round(&mut self, counts: &[AuditCount], results: &[AuditViolation]) {
        if self.stored.is_none() {
            match self.read_stored().await {
                Ok(Some(stored)) => self.stored = Some(stored),
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(error = %error_chain(&error), "reading the stored audit reports failed; the next round retries");
                    return;
                }
            }
        }
        let desired = desired_reports(counts, results);
        let stored = self.stored.clone().unwrap_or_default();
        let writes = plan(&stored, &desired);
        let this = &*self;
        let done: Vec<(Write, Result<(), ReportsError>)> = futures::stream::iter(writes)
            .map(|write| async move {
                let outcome = this.write(&write).await;
                (write, outcome)
            })
            .buffer_unordered(self.settings.concurrency.max(1))
            .collect()
            .await;
        let stored = self.stored.get_or_insert_default();
        let mut failed = 0;
        for (write, outcome) in done {
            match (outcome, write) {
                (Ok(()), Write::Apply { namespace, desired }) => {
                    stored.insert(namespace, desired.hash);
                }
                (Ok(()), Write::Delete { namespace }) => {
                    stored.remove(&namespace);
                }
                (Err(error), write) => {
                    failed += 1;
                    tracing::warn!(namespace = write.namespace(), error = %error_chain(&error), "writing an audit report failed; the next round retries");
                }
            }
        }
        self.health.describe(
            Self::NAME,
            format!(
                "writing openreports.io/{VERSION} Reports: {} namespaces with violations, {failed} writes failed in the last round",
                stored.len()
            ),
        );
    }

    /// The reports poolkeeper stored before (namespace → content hash), or
    /// `None` when the API server does not serve OpenReports, which is
    /// said in `/readyz?verbose` and the log.
    async fn read_stored(&self) -> Result<Option<BTreeMap<String, String>>, ReportsError> {
        let what = format!("discovering {GROUP}/{VERSION}");
        let served = bounded(
            &what,
            self.client
                .list_api_group_resources(&format!("{GROUP}/{VERSION}")),
        )
        .await;
        let served = match served {
            Ok(list) => list.resources.iter().any(|r| r.name == "reports"),
            Err(ReportsError::Api {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 404 => false,
            Err(error) => return Err(error),
        };
        if !served {
            let said = format!(
                "{GROUP}/{VERSION} Report is not served (install the OpenReports CRDs); audit results go to Events and metrics only"
            );
            tracing::warn!("{said}");
            self.health.describe(Self::NAME, said);
            return Ok(None);
        }
        let params = ListParams::default()
            .labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1))
            .fields(&format!("metadata.name={REPORT_NAME}"));
        let list = bounded(
            "listing the stored audit reports",
            self.api(None).list_metadata(&params),
        )
        .await?;
        let stored = list
            .items
            .into_iter()
            .filter_map(|report| {
                let namespace = report.metadata.namespace?;
                let hash = report
                    .metadata
                    .annotations
                    .and_then(|mut a| a.remove(CONTENT_HASH))
                    .unwrap_or_default();
                Some((namespace, hash))
            })
            .collect();
        Ok(Some(stored))
    }

    async fn write(&self, write: &Write) -> Result<(), ReportsError> {
        let timeout = match &self.term {
            Some(term) => term.permit()?.bound(REQUEST_TIMEOUT),
            None => REQUEST_TIMEOUT,
        };
        let namespace = write.namespace();
        let api = self.api(Some(namespace));
        match write {
            Write::Apply { desired, .. } => {
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let what = format!("applying report {namespace}/{REPORT_NAME}");
                bounded(
                    &what,
                    api.patch(REPORT_NAME, &params, &Patch::Apply(&desired.object)),
                )
                .await
                .map(drop)
            }
            Write::Delete { .. } => {
                let what = format!("deleting report {namespace}/{REPORT_NAME}");
                match bounded_by(
                    timeout,
                    &what,
                    api.delete(REPORT_NAME, &DeleteParams::default()),
                )
                .await
                {
                    Err(ReportsError::Api {
                        source: kube::Error::Api(status),
                        ..
                    }) if status.code == 404 => Ok(()),
                    other => other.map(drop),
                }
            }
        }
    }
}

async fn bounded<T>(
    what: &str,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ReportsError> {
    bounded_by(REQUEST_TIMEOUT, what, request).await
}

async fn bounded_by<T>(
    timeout: Duration,
    what: &str,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ReportsError> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(ReportsError::Api {
            what: what.to_owned(),
            source,
        }),
        Err(_) => Err(ReportsError::Timeout {
            what: what.to_owned(),
        }),
    }
}

impl Component for AuditReports {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Ready the moment it runs: nothing waits for its reports.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.run_loop(ctx))
    }
}
