//! The leader's audit: a round every `audit.interval`, its result on the
//! bus, and a Warning Event for each violating Pod and reason the first
//! time it is found.

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use poolkeeper_bus::Bus;
use poolkeeper_index::Index;
use poolkeeper_recorder::{EventSink, Notice};
use poolkeeper_supervisor::{BoxError, Component, Context, error_chain};
use tokio::time::MissedTickBehavior;

use crate::lister::{KubePods, PodLister};
use crate::round::{Finding, ReportKey, Round, audit_round, event_reason};
use crate::settings::AuditSettings;

/// The Event action of the audit's Warnings.
pub const EVENT_ACTION: &str = "Audit";

/// Where the audit's Warning Events go.
pub trait WarningSink: Send + Sync + 'static {
    /// Queues a Warning on the object `regarding`; whether it was queued.
    fn warn(&self, regarding: ObjectReference, notice: Notice) -> bool;
}

impl WarningSink for EventSink {
    fn warn(&self, regarding: ObjectReference, notice: Notice) -> bool {
        self.record(regarding, notice)
    }
}

/// The leader-only [`Component`] `audit`. See the crate documentation.
pub struct Audit {
    lister: Box<dyn PodLister>,
    index: Arc<Index>,
    bus: Bus,
    events: Box<dyn WarningSink>,
    settings: AuditSettings,
    /// The Pods and reasons a Warning was queued for and that still
    /// violate; a Pod that is gone or back in its pool drops out.
    reported: HashSet<ReportKey>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("settings", &self.settings)
            .field("reported", &self.reported.len())
            .finish_non_exhaustive()
    }
}

impl Audit {
    /// The audit of the cluster `client` talks to, with Warnings through
    /// the Kubernetes Event recorder's `events` sink.
    pub fn new(
        client: kube::Client,
        index: Arc<Index>,
        bus: &Bus,
        events: EventSink,
        settings: AuditSettings,
    ) -> Self {
        Self::with_parts(KubePods::new(client), index, bus, events, settings)
    }

    /// The audit with any Pod source and Warning sink.
    pub fn with_parts(
        lister: impl PodLister,
        index: Arc<Index>,
        bus: &Bus,
        events: impl WarningSink,
        settings: AuditSettings,
    ) -> Self {
        Self {
            lister: Box::new(lister),
            index,
            bus: bus.clone(),
            events: Box::new(events),
            settings,
            reported: HashSet::new(),
        }
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        if !self.settings.enabled() {
            tracing::info!("audit is off (audit.interval is 0s)");
            ctx.cancelled().await;
            return Ok(());
        }
        let mut ticker = tokio::time::interval(self.settings.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                _ = ticker.tick() => {}
            }
            let _busy = ctx.busy("audit round");
            let result = tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                result = audit_round(self.lister.as_ref(), &self.index, &self.settings, &self.reported) => result,
            };
            match result {
                Ok(round) => self.complete(round),
                Err(error) => tracing::warn!(
                    error = %error_chain(&error),
                    "audit round failed; the next round retries"
                ),
            }
        }
    }

    /// Warns about the new findings, forgets what no longer violates and
    /// publishes the round.
    fn complete(&mut self, mut round: Round) {
        let mut reported = std::mem::take(&mut round.still_reported);
        let mut warned = 0;
        for finding in &round.findings {
            let key = finding.key();
            if reported.contains(&key) {
                continue;
            }
            // Not queued (recorder busy or stopped): tried again next round.
            if self.events.warn(pod_reference(finding), notice(finding)) {
                reported.insert(key);
                warned += 1;
            }
        }
        self.reported = reported;
        tracing::info!(
            pods = round.pods,
            violations = round.violations(),
            warned,
            duration_ms = round.duration.as_millis() as u64,
            "audit round completed"
        );
        self.bus.publish(round.to_event());
    }
}

impl Component for Audit {
    fn name(&self) -> &'static str {
        "audit"
    }

    /// The audit never holds readiness back: a failed round is retried.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_loop(ctx))
    }
}

/// The Pod (or workload) a finding is about, with its UID (how `kubectl
/// describe` finds its Events).
pub fn pod_reference(finding: &Finding) -> ObjectReference {
    ObjectReference {
        api_version: Some(finding.api_version.to_owned()),
        kind: Some(finding.kind.to_owned()),
        namespace: Some(finding.violation.namespace.clone()),
        name: Some(finding.name.clone()),
        uid: Some(finding.uid.clone()).filter(|uid| !uid.is_empty()),
        field_path: None,
        resource_version: None,
    }
}

/// The Warning for a finding: the validating webhook's reason and message,
/// and the binding's mode.
pub fn notice(finding: &Finding) -> Notice {
    let violation = &finding.violation;
    Notice::warning(
        event_reason(violation.reason),
        EVENT_ACTION,
        format!("{} (binding mode {})", violation.message, finding.mode),
    )
}
