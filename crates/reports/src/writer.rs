//! The component: on each `AuditCompleted`, the reports' writes, at most
//! `audit.concurrency` in flight (the pace of the audit's own LISTs).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, Preconditions,
};
use poolkeeper_bus::{AuditCount, AuditViolation, Bus, Delivery, Event, Subscription};
use poolkeeper_config::Config;
use poolkeeper_kube::{Deposed, LEADER_EPOCH_ANNOTATION, refused, stamp, version_precondition};
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
    /// A stored report carries a newer leader's epoch: nothing more is written.
    #[error("report in namespace {namespace}: {source}")]
    Deposed {
        namespace: String,
        #[source]
        source: Deposed,
    },
    #[error("report {what}: {source}")]
    Invalid {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

/// A report poolkeeper stored, as this term read or last wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StoredReport {
    /// Its content hash; empty when another term wrote it, so that this term
    /// writes it once to stamp its epoch.
    hash: String,
    /// The precondition of this term's next write of it.
    version: Option<String>,
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
    /// Namespace → the reports stored, as read at term start and written
    /// since; `None` until the API is found served and read.
    stored: Option<BTreeMap<String, StoredReport>>,
    /// Set once a stored report carried a newer leader's epoch: this
    /// replica writes no report any more.
    deposed: Option<ReportsError>,
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
            deposed: None,
            term: None,
        }
    }

    /// Every write first asks `term` for leave, bounded by what is left of
    /// it, and is fenced by its epoch: each report carries the epoch of the
    /// term that wrote it last, each apply and delete the resourceVersion
    /// this term read or wrote (`poolkeeper_kube::fencing`); the first round
    /// of a term rewrites every report another term wrote.
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
        if let Some(deposed) = &self.deposed {
            tracing::debug!(error = %error_chain(deposed), "audit reports not written");
            return;
        }
        if self.stored.is_none() {
            match self.read_stored().await {
                Ok(Some(stored)) => self.stored = Some(stored),
                Ok(None) => return,
                Err(error) => return self.unread(error),
            }
        }
        let desired = desired_reports(counts, results);
        let hashes = self
            .stored
            .iter()
            .flatten()
            .map(|(namespace, report)| (namespace.clone(), report.hash.clone()))
            .collect();
        let writes = plan(&hashes, &desired);
        let this = &*self;
        let done: Vec<(Write, Result<Option<String>, ReportsError>)> =
            futures::stream::iter(writes)
                .map(|write| async move {
                    let outcome = this.write(&write).await;
                    (write, outcome)
                })
                .buffer_unordered(self.settings.concurrency.max(1))
                .collect()
                .await;
        let stored = self.stored.get_or_insert_default();
        let mut failed = 0;
        let mut fenced = false;
        for (write, outcome) in done {
            match (outcome, write) {
                (Ok(version), Write::Apply { namespace, desired }) => {
                    let hash = desired.hash;
                    stored.insert(namespace, StoredReport { hash, version });
                }
                (Ok(_), Write::Delete { namespace }) => {
                    stored.remove(&namespace);
                }
                (Err(error), write) => {
                    failed += 1;
                    fenced |= matches!(&error, ReportsError::Api { source, .. } if refused(source));
                    tracing::warn!(namespace = write.namespace(), error = %error_chain(&error), "writing an audit report failed; the next round retries");
                }
            }
        }
        if fenced {
            // Refused by a precondition: read again, a newer term may own them.
            self.stored = None;
            match self.read_stored().await {
                Ok(stored) => self.stored = stored,
                Err(error) => return self.unread(error),
            }
        }
        let reports = self.stored.as_ref().map_or(0, BTreeMap::len);
        self.health.describe(
            Self::NAME,
            format!(
                "writing openreports.io/{VERSION} Reports: {reports} namespaces with violations, {failed} writes failed in the last round"
            ),
        );
    }

    /// The stored reports could not be read; a newer term's epoch on one
    /// stops this replica's writes.
    fn unread(&mut self, error: ReportsError) {
        if matches!(error, ReportsError::Deposed { .. }) {
            let said = format!("not writing: {}", error_chain(&error));
            tracing::warn!(error = %error_chain(&error), "the audit reports belong to a newer leader");
            self.health.describe(Self::NAME, said);
            self.deposed = Some(error);
        } else {
            tracing::warn!(error = %error_chain(&error), "reading the stored audit reports failed; the next round retries");
        }
    }

    /// The term's epoch, `None` without leader election.
    fn epoch(&self) -> Result<Option<i64>, NotLeader> {
        self.term
            .as_ref()
            .map(|term| term.permit().map(|permit| permit.epoch))
            .transpose()
    }

    /// The reports poolkeeper stored before (namespace → content hash and
    /// resourceVersion), or `None` when the API server does not serve
    /// OpenReports, which is said in `/readyz?verbose` and the log.
    async fn read_stored(&self) -> Result<Option<BTreeMap<String, StoredReport>>, ReportsError> {
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
        let epoch = self.epoch()?;
        let mut stored = BTreeMap::new();
        for report in list.items {
            let Some(namespace) = report.metadata.namespace else {
                continue;
            };
            let annotations = report.metadata.annotations.unwrap_or_default();
            let version = report.metadata.resource_version;
            let ours = match epoch {
                Some(epoch) => {
                    version_precondition(Some(&annotations), version.as_deref(), epoch).map_err(
                        |source| ReportsError::Deposed {
                            namespace: namespace.clone(),
                            source,
                        },
                    )?;
                    annotations.get(LEADER_EPOCH_ANNOTATION) == Some(&epoch.to_string())
                }
                None => true,
            };
            let hash = match annotations.get(CONTENT_HASH) {
                Some(hash) if ours => hash.clone(),
                _ => String::new(),
            };
            stored.insert(namespace, StoredReport { hash, version });
        }
        Ok(Some(stored))
    }

    /// Applies or deletes one report; under a term, with the term's epoch
    /// stamped and the resourceVersion this term knows as the precondition.
    /// The resourceVersion the write leaves, if any.
    async fn write(&self, write: &Write) -> Result<Option<String>, ReportsError> {
        let (epoch, timeout) = match &self.term {
            Some(term) => {
                let permit = term.permit()?;
                (Some(permit.epoch), permit.bound(REQUEST_TIMEOUT))
            }
            None => (None, REQUEST_TIMEOUT),
        };
        let namespace = write.namespace();
        let api = self.api(Some(namespace));
        let version = self
            .stored
            .as_ref()
            .and_then(|stored| stored.get(namespace))
            .and_then(|report| report.version.clone());
        match write {
            Write::Apply { desired, .. } => {
                let what = format!("applying report {namespace}/{REPORT_NAME}");
                let mut object: DynamicObject = serde_json::from_value(desired.object.clone())
                    .map_err(|source| ReportsError::Invalid {
                        what: what.clone(),
                        source,
                    })?;
                if let Some(epoch) = epoch {
                    stamp(&mut object.metadata, epoch, version);
                }
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let written = bounded_by(
                    timeout,
                    &what,
                    api.patch(REPORT_NAME, &params, &Patch::Apply(&object)),
                )
                .await?;
                Ok(written.metadata.resource_version)
            }
            Write::Delete { .. } => {
                let what = format!("deleting report {namespace}/{REPORT_NAME}");
                let params = DeleteParams {
                    preconditions: epoch.map(|_| Preconditions {
                        resource_version: version,
                        uid: None,
                    }),
                    ..DeleteParams::default()
                };
                match bounded_by(timeout, &what, api.delete(REPORT_NAME, &params)).await {
                    Err(ReportsError::Api {
                        source: kube::Error::Api(status),
                        ..
                    }) if status.code == 404 => Ok(None),
                    other => other.map(|_| None),
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
