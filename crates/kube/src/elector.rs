//! Leader election through the Kubernetes API: [`LeaseElector`] reads and writes the Lease as
//! [`LeaseDecider`] says, and reports leadership to the supervisor's leader gating through
//! [`LeaderElector`].

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use poolkeeper_config::LeaderElectionConfig;
use poolkeeper_supervisor::{
    BoxError, LeaderElector, LeaderTerm, LeadershipReporter, format_duration,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lease::{LeaseAction, LeaseDecider, LeaseRecord};

/// A Lease could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("lease {namespace}/{name}: {source}")]
pub struct LeaseError {
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// Settings of [`LeaseElector`]: `leaderElection.*` of the configuration
/// (which checks that the leader steps down before a follower may take
/// over) plus this replica's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// Unique per replica, usually the Pod name.
    pub identity: String,
    /// How long candidates wait after the holder's last renewal.
    pub lease_duration: Duration,
    /// The leader gives up if it could not renew for this long.
    pub renew_deadline: Duration,
    /// Time between two attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseSettings {
    pub fn new(config: &LeaderElectionConfig, identity: impl Into<String>) -> Self {
        Self {
            namespace: config.lease_namespace.clone(),
            name: config.lease_name.clone(),
            identity: identity.into(),
            lease_duration: config.lease_duration,
            renew_deadline: config.renew_deadline,
            retry_period: config.retry_period,
        }
    }
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the Lease; `epoch` is its `leaseTransitions`.
    Holding {
        epoch: i64,
    },
    HeldBy(String),
    /// Someone else wrote the Lease between our read and our write.
    Raced,
}

/// Leader election on a Lease through the Kubernetes API.
pub struct LeaseElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    decider: LeaseDecider,
    term: LeaderTerm,
}

impl std::fmt::Debug for LeaseElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseElector")
            .field("settings", &self.settings)
            .finish()
    }
}

impl LeaseElector {
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Self {
        debug_assert!(
            settings.retry_period < settings.renew_deadline
                && settings.renew_deadline < settings.lease_duration,
            "the configuration checks the lease timings"
        );
        Self {
            api: Api::namespaced(client, &settings.namespace),
            decider: LeaseDecider::new(settings.identity.clone(), settings.lease_duration),
            settings,
            term: LeaderTerm::new(),
        }
    }

    /// The term this elector confirms after each successful acquire or
    /// renew: the guard every leader write asks first, and its fencing epoch
    /// (the Lease's `leaseTransitions`).
    pub fn term(&self) -> LeaderTerm {
        self.term.clone()
    }

    fn error(&self, source: kube::Error) -> LeaseError {
        LeaseError {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source,
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let current = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.error(e))?;
        let now = Timestamp::now();
        let record = current
            .as_ref()
            .map(|lease| LeaseRecord::from_spec(lease.spec.as_ref()));
        let action = self.decider.decide(record.as_ref(), now);
        let current_spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let Some(spec) = self.decider.next_spec(&action, current_spec, now) else {
            return match action {
                LeaseAction::Follow { holder, .. } => Ok(Attempt::HeldBy(holder)),
                _ => Ok(Attempt::Raced),
            };
        };
        let epoch = i64::from(spec.lease_transitions.unwrap_or(0));
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.settings.name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // The resourceVersion read above makes this a compare-and-swap.
                lease.spec = Some(spec);
                self.api
                    .replace(&self.settings.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(_) => Ok(Attempt::Holding { epoch }),
            Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => {
                Ok(Attempt::Raced)
            }
            Err(e) => Err(self.error(e)),
        }
    }

    async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.error(e))?
        else {
            return Ok(());
        };
        let Some(spec) = lease
            .spec
            .as_ref()
            .and_then(|s| self.decider.released_spec(s))
        else {
            return Ok(());
        };
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            // Someone else wrote it: it is not ours to release any more.
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    async fn run_campaign(
        mut self,
        mut reporter: LeadershipReporter,
        stop: CancellationToken,
    ) -> Result<(), BoxError> {
        let lease = format!("{}/{}", self.settings.namespace, self.settings.name);
        let mut last_holder: Option<String> = None;
        loop {
            self.step_down_if_expired(&mut reporter, &lease);
            // The term is measured from before the read: a follower measures
            // its wait from when it first sees the renewal, which is later.
            let started = Instant::now();
            let term = self.term.clone();
            let leading = reporter.is_leader();
            let attempt =
                tokio::time::timeout(self.settings.renew_deadline, self.try_acquire_or_renew());
            let attempt = tokio::select! {
                _ = stop.cancelled() => break,
                // A renewal still unanswered when the term runs out: step
                // down now rather than when the request gives up.
                () = term.expired(), if leading => None,
                attempt = attempt => Some(attempt),
            };
            if let Some(attempt) = attempt {
                self.on_attempt(attempt, started, &mut reporter, &mut last_holder, &lease);
            }
            self.step_down_if_expired(&mut reporter, &lease);
            let term = self.term.clone();
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.settings.retry_period) => {}
                () = term.expired(), if reporter.is_leader() => {}
            }
        }
        self.term.end();
        if reporter.is_leader() {
            reporter.set(false);
            let released = tokio::time::timeout(self.settings.renew_deadline, self.release()).await;
            match released {
                Ok(Ok(())) => tracing::info!(lease = %lease, "released the lease"),
                Ok(Err(error)) => {
                    tracing::warn!(lease = %lease, %error, "could not release the lease")
                }
                Err(_elapsed) => {
                    tracing::warn!(lease = %lease, "releasing the lease timed out")
                }
            }
        }
        Ok(())
    }
}

impl LeaseElector {
    /// Acts on one attempt's outcome: confirms the term and leads, follows,
    /// or logs the failure (the term runs out on its own).
    fn on_attempt(
        &mut self,
        attempt: Result<Result<Attempt, LeaseError>, tokio::time::error::Elapsed>,
        started: Instant,
        reporter: &mut LeadershipReporter,
        last_holder: &mut Option<String>,
        lease: &str,
    ) {
        match attempt {
            Ok(Ok(Attempt::Holding { epoch })) => {
                *last_holder = None;
                self.term
                    .confirm(epoch, started + self.settings.renew_deadline);
                if self.term.permit().is_err() {
                    tracing::warn!(lease = %lease, "the lease was renewed too late to lead on it");
                } else {
                    if !reporter.is_leader() {
                        tracing::info!(lease = %lease, identity = %self.settings.identity, epoch, "acquired the lease: now the leader");
                    }
                    reporter.set(true);
                }
            }
            Ok(Ok(Attempt::HeldBy(holder))) => {
                if reporter.is_leader() {
                    tracing::warn!(lease = %lease, holder = %holder, "the lease was taken over");
                } else if last_holder.as_deref() != Some(holder.as_str()) {
                    tracing::info!(lease = %lease, holder = %holder, "the lease is held by another replica; following");
                }
                *last_holder = Some(holder);
                self.term.end();
                reporter.set(false);
            }
            Ok(Ok(Attempt::Raced)) => {
                if reporter.is_leader() {
                    tracing::warn!(lease = %lease, "the lease was written by another replica");
                }
                self.term.end();
                reporter.set(false);
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %lease, %error, "could not acquire or renew the lease");
            }
            Err(_elapsed) => {
                tracing::warn!(lease = %lease, "acquiring or renewing the lease timed out");
            }
        }
    }

    /// Gives leadership up once the term ran out without a renewal: the
    /// writers' guard refuses from that instant, and the components stop.
    fn step_down_if_expired(&self, reporter: &mut LeadershipReporter, lease: &str) {
        if !reporter.is_leader() {
            return;
        }
        if let Err(reason) = self.term.permit() {
            tracing::error!(
                lease = %lease,
                renew_deadline = %format_duration(self.settings.renew_deadline),
                %reason,
                "could not renew the lease within the renew deadline: giving up leadership"
            );
            self.term.end();
            reporter.set(false);
        }
    }
}

impl LeaderElector for LeaseElector {
    fn campaign(
        self: Box<Self>,
        reporter: LeadershipReporter,
        stop: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.run_campaign(reporter, stop))
    }
}
