//! The leader-only component: follows the bindings and the two
//! configurations, and updates the selectors when they differ.

use std::pin::Pin;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Client;
use kube::runtime::watcher;

use poolkeeper_bus::{Bus, Delivery, Event, Subscription};
use poolkeeper_config::Engine;
use poolkeeper_index::Index;
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::{BoxError, Component, Context, LeaderTerm, error_chain, sleep_until};
use tokio::time::Instant;

use crate::configuration::{self, Updated};
use crate::desired::{DesiredSelectors, desired_selectors};
use crate::error::SelectorError;
use crate::schedule::Schedule;
use crate::settings::{ConfigurationKind, SelectorSettings};

type Changes = Pin<Box<dyn Stream<Item = (ConfigurationKind, Result<(), watcher::Error>)> + Send>>;

/// The `webhook-selectors` component. See the crate documentation.
pub struct WebhookSelectors {
    client: Client,
    index: Arc<Index>,
    policy: PolicyCache,
    subscription: Subscription,
    settings: SelectorSettings,
    /// The leader's term every patch asks first and whose epoch fences the
    /// configurations; `None` when this replica leads unconditionally.
    term: Option<LeaderTerm>,
    engine: Engine,
}

impl std::fmt::Debug for WebhookSelectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSelectors")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl WebhookSelectors {
    pub const NAME: &'static str = "webhook-selectors";

    /// Subscribes to `bus` right away: build it in the leader-gated
    /// factory. It reads the bindings and the excluded namespaces from
    /// `policy`, over `index`, which the watchers keep.
    pub fn new(
        settings: SelectorSettings,
        bus: &Bus,
        client: Client,
        index: Arc<Index>,
        policy: PolicyCache,
    ) -> Self {
        Self {
            client,
            index,
            policy,
            subscription: bus.subscribe(Self::NAME),
            settings,
            term: None,
            engine: Engine::Webhook,
        }
    }

    /// Every patch first asks `term` for leave and carries its epoch as the
    /// configurations' fence (`poolkeeper_kube::fencing`).
    pub fn guarded_by(mut self, term: LeaderTerm) -> Self {
        self.term = Some(term);
        self
    }

    /// The placement engine the process runs (`webhook` unless said):
    /// under `cel` every managed entry also gets the `matchConditions`
    /// `poolkeeper.io/engine-*` that leave to the admission policies what
    /// they decide.
    #[must_use]
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let mut changes = self.configuration_changes();
        let mut schedule = Schedule::new(self.settings.retry_initial, self.settings.retry_max);
        loop {
            if schedule.is_due(Instant::now()) {
                schedule.start();
                let _busy = ctx.busy("updating the webhook selectors");
                let result = tokio::select! {
                    biased;
                    () = ctx.cancelled() => break,
                    result = self.update() => result,
                };
                self.settle(&mut schedule, result);
                continue;
            }
            let wake_at = schedule.wake_at();
            tokio::select! {
                biased;
                () = ctx.cancelled() => break,
                delivery = self.subscription.next_delivery() => {
                    if self.concerns_bindings(&delivery) {
                        schedule.trigger();
                    }
                }
                Some((kind, change)) = changes.next() => match change {
                    Ok(()) => schedule.trigger(),
                    Err(error) => tracing::warn!(
                        kind = kind.as_str(),
                        error = %error_chain(&error),
                        "watching the webhook configuration failed; retrying"
                    ),
                },
                () = sleep_until(wake_at), if wake_at.is_some() => {}
            }
        }
        Ok(())
    }

    /// Both configurations' changes, merged.
    fn configuration_changes(&self) -> Changes {
        let mutating = configuration::changes::<MutatingWebhookConfiguration>(
            self.client.clone(),
            &self.settings.mutating,
        );
        let validating = configuration::changes::<ValidatingWebhookConfiguration>(
            self.client.clone(),
            &self.settings.validating,
        );
        Box::pin(futures::stream::select(mutating, validating))
    }

    /// A change of the placement ConfigMap or of a Namespace (its labels
    /// may bind it), or possibly one (the bus lagged).
    fn concerns_bindings(&self, delivery: &Delivery) -> bool {
        match delivery {
            Delivery::Lagged(_) => true,
            Delivery::Event(envelope) => match &envelope.event {
                Event::ResourceChanged { kind, key, .. } => self.policy.reads(*kind, key),
                _ => false,
            },
        }
    }

    /// The selectors the current bindings call for.
    fn desired(&self) -> Result<DesiredSelectors, SelectorError> {
        let policy = self.policy.get(&self.index.placement());
        let policy = policy
            .as_ref()
            .as_ref()
            .map_err(|error| SelectorError::Policy(error.to_string()))?;
        let excepted: Vec<String> = policy.exception_namespaces().map(str::to_owned).collect();
        Ok(desired_selectors(
            policy.bindings().map(|(namespace, _)| namespace),
            &self.settings.pool_label,
            self.policy.excluded_namespaces(),
        )
        .with_engine(self.engine, &self.settings.pool_label, &excepted))
    }

    /// Brings both configurations in step; tries the second even when the
    /// first fails, and reports the first failure.
    async fn update(&self) -> Result<(), SelectorError> {
        let desired = self.desired()?;
        let started = Instant::now();
        let timeout = self.settings.request_timeout;
        let mutating = configuration::update::<MutatingWebhookConfiguration>(
            &self.client,
            &self.settings.mutating,
            &desired,
            timeout,
            self.term.as_ref(),
        )
        .await;
        let validating = configuration::update::<ValidatingWebhookConfiguration>(
            &self.client,
            &self.settings.validating,
            &desired,
            timeout,
            self.term.as_ref(),
        )
        .await;
        let mut first_error = None;
        for (managed, result) in [
            (&self.settings.mutating, mutating),
            (&self.settings.validating, validating),
        ] {
            match result {
                Ok(Updated::Patched) => tracing::info!(
                    kind = managed.kind.as_str(),
                    name = %managed.name,
                    namespaces = ?desired.namespaces,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "webhook selectors updated to the bindings"
                ),
                Ok(Updated::InStep) => tracing::debug!(
                    kind = managed.kind.as_str(),
                    name = %managed.name,
                    "webhook selectors in step with the bindings"
                ),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn settle(&self, schedule: &mut Schedule, result: Result<(), SelectorError>) {
        match result {
            Ok(()) => schedule.succeeded(),
            Err(error) if error.is_retryable() => {
                let delay = schedule.retry(Instant::now(), error.is_conflict());
                tracing::warn!(
                    error = %error_chain(&error),
                    retry_in = %humantime::format_duration(delay),
                    "webhook selectors not updated"
                );
            }
            Err(error) => {
                schedule.wait_for_change();
                tracing::warn!(
                    error = %error_chain(&error),
                    "webhook selectors not updated; waiting for a change of the bindings or \
                     the webhook configurations"
                );
            }
        }
    }
}

impl Component for WebhookSelectors {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Ready the moment it runs: admission never waits for it.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_loop(ctx))
    }
}
