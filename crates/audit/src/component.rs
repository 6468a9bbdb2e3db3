//! The leader's audit: a round every `audit.interval`, its result on the
//! bus, each violation marked `first_found` the first time it is found (the
//! recorder writes a Warning Event for those).

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use poolkeeper_bus::Bus;
use poolkeeper_index::Index;
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::{BoxError, Component, Context, error_chain};
use tokio::time::MissedTickBehavior;

use crate::lister::{KubePods, PodLister};
use crate::round::{ReportKey, Round, audit_round, report_key};
use crate::settings::AuditSettings;

/// The leader-only [`Component`] `audit`. See the crate documentation.
pub struct Audit {
    lister: Box<dyn PodLister>,
    index: Arc<Index>,
    policy: PolicyCache,
    bus: Bus,
    settings: AuditSettings,
    /// The objects and reasons found so far that still violate; one that is
    /// gone or back in its pool drops out, and is first found again if it
    /// violates later.
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
    /// The audit of the cluster `client` talks to, by the policy of
    /// `policy` over `index`.
    pub fn new(
        settings: AuditSettings,
        bus: &Bus,
        client: kube::Client,
        index: Arc<Index>,
        policy: PolicyCache,
    ) -> Self {
        Self::with_lister(settings, bus, KubePods::new(client), index, policy)
    }

    /// The audit with any Pod source.
    pub fn with_lister(
        settings: AuditSettings,
        bus: &Bus,
        lister: impl PodLister,
        index: Arc<Index>,
        policy: PolicyCache,
    ) -> Self {
        Self {
            lister: Box::new(lister),
            index,
            policy,
            bus: bus.clone(),
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
                result = audit_round(
                    self.lister.as_ref(),
                    &self.index,
                    &self.policy,
                    &self.settings,
                    &self.reported,
                ) => result,
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

    /// Marks the violations found for the first time, forgets what no longer
    /// violates and publishes the round.
    fn complete(&mut self, mut round: Round) {
        let mut reported = std::mem::take(&mut round.still_reported);
        let mut first_found = 0;
        for violation in &mut round.findings {
            violation.first_found = reported.insert(report_key(violation));
            first_found += usize::from(violation.first_found);
        }
        self.reported = reported;
        tracing::info!(
            pods = round.pods,
            workloads = round.workloads,
            violations = round.violations(),
            first_found,
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
