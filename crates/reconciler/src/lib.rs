//! The reconciler-debouncer: turns bursts of resource changes into single
//! `ReconciliationTriggered` events for the executor.
//!
//! The timing rules live in the pure [`Debouncer`]; [`Reconciler`] is the
//! [`Component`] that feeds it bus events and the clock, and publishes what
//! it decides.

mod debouncer;

use std::time::Duration;

use futures::future::BoxFuture;
use poolkeeper_bus::{Bus, Delivery, Event, ResourceKind, Subscription, TriggerReason};
use poolkeeper_supervisor::{BoxError, Component, Context};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

pub use debouncer::{Debouncer, Input};

/// Default quiet period after the last change.
pub const DEFAULT_DEBOUNCE_INTERVAL: Duration = Duration::from_millis(500);
/// Default cap on how long churn may postpone a trigger.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ReconcilerError {
    #[error(
        "maxDelay ({max_delay:?}) must not be shorter than debounceInterval ({debounce_interval:?})"
    )]
    MaxDelayBelowInterval {
        debounce_interval: Duration,
        max_delay: Duration,
    },
}

/// Settings of the debouncer (`reconciler:` in the configuration file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcilerSettings {
    /// Quiet period after the last live change before a trigger.
    pub debounce_interval: Duration,
    /// Longest a trigger waits after the first change of a burst.
    pub max_delay: Duration,
    /// Kinds whose changes lead to a trigger. Changes of other kinds do not
    /// affect any reconciliation, so they would only cause empty passes.
    pub kinds: Vec<ResourceKind>,
}

impl Default for ReconcilerSettings {
    fn default() -> Self {
        Self {
            debounce_interval: DEFAULT_DEBOUNCE_INTERVAL,
            max_delay: DEFAULT_MAX_DELAY,
            kinds: vec![ResourceKind::MachineClass, ResourceKind::Machine],
        }
    }
}

impl ReconcilerSettings {
    pub fn validate(&self) -> Result<(), ReconcilerError> {
        if self.max_delay < self.debounce_interval {
            return Err(ReconcilerError::MaxDelayBelowInterval {
                debounce_interval: self.debounce_interval,
                max_delay: self.max_delay,
            });
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The debouncer's metrics. Clones share their values, so successive
/// reconcilers (one per leadership term) can count into one registration.
#[derive(Clone, Default)]
pub struct ReconcilerMetrics {
    triggers: Family<ReasonLabels, Counter>,
    changes_debounced: Counter,
}

impl ReconcilerMetrics {
    /// Registers `poolkeeper_reconciler_triggers_total{reason}` and
    /// `poolkeeper_reconciler_changes_debounced_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "poolkeeper_reconciler_triggers",
            "Reconciliation triggers published, by reason",
            self.triggers.clone(),
        );
        registry.register(
            "poolkeeper_reconciler_changes_debounced",
            "Live resource changes folded into debounced triggers",
            self.changes_debounced.clone(),
        );
    }

    pub fn new() -> Self {
        let metrics = Self::default();
        // Every reason shows up from the start, at zero.
        for reason in [
            TriggerReason::Debounced,
            TriggerReason::IndexSynchronized,
            TriggerReason::LeadershipGained,
            TriggerReason::Lagged,
        ] {
            let _ = metrics.triggers.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        metrics
    }
}

/// The debouncer component.
pub struct Reconciler {
    bus: Bus,
    subscription: Subscription,
    settings: ReconcilerSettings,
    metrics: ReconcilerMetrics,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    pub const NAME: &'static str = "reconciler";

    /// Subscribes to `bus` right away, so construct it before `bus.start()`.
    pub fn new(bus: &Bus, settings: ReconcilerSettings) -> Result<Self, ReconcilerError> {
        Self::with_metrics(bus, settings, ReconcilerMetrics::new())
    }

    /// [`Reconciler::new`] counting into `metrics`, registered once with
    /// [`ReconcilerMetrics::register`].
    pub fn with_metrics(
        bus: &Bus,
        settings: ReconcilerSettings,
        metrics: ReconcilerMetrics,
    ) -> Result<Self, ReconcilerError> {
        settings.validate()?;
        Ok(Self {
            bus: bus.clone(),
            subscription: bus.subscribe(Self::NAME),
            settings,
            metrics,
        })
    }

    /// Registers `poolkeeper_reconciler_triggers_total{reason}` and
    /// `poolkeeper_reconciler_changes_debounced_total`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    fn input_of(&self, delivery: &Delivery) -> Option<Input> {
        match delivery {
            Delivery::Lagged(_) => Some(Input::Lagged),
            Delivery::Event(envelope) => match &envelope.event {
                Event::ResourceChanged { kind, initial, .. }
                    if self.settings.kinds.contains(kind) =>
                {
                    Some(Input::Changed { initial: *initial })
                }
                Event::IndexSynchronized => Some(Input::IndexSynchronized),
                Event::LeadershipChanged { leader: true } => Some(Input::LeadershipGained),
                Event::ShutdownRequested => Some(Input::Shutdown),
                _ => None,
            },
        }
    }

    fn publish(&self, trigger: Option<TriggerReason>) {
        if let Some(reason) = trigger {
            tracing::debug!(reason = reason.as_str(), "reconciliation triggered");
            self.metrics
                .triggers
                .get_or_create(&ReasonLabels {
                    reason: reason.as_str(),
                })
                .inc();
            self.bus.publish(Event::ReconciliationTriggered { reason });
        }
    }

    /// After a lag, skips everything already queued for this subscriber and
    /// then publishes one full trigger, which covers all of it.
    ///
    /// Publishing while the own queue is still full would push this very
    /// subscriber over the edge again, turning one lag into a storm of lag
    /// notices and full triggers.
    fn catch_up(&mut self, debouncer: &mut Debouncer) {
        let mut shutdown = false;
        while let Some(delivery) = self.subscription.try_recv() {
            shutdown |= self.input_of(&delivery) == Some(Input::Shutdown);
        }
        tracing::warn!("event bus subscription lagged, triggering a full reconciliation");
        let now = Instant::now().into_std();
        let fired = debouncer.on_event(now, Input::Lagged);
        self.publish(fired);
        if shutdown {
            debouncer.on_event(now, Input::Shutdown);
        }
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let mut debouncer =
            Debouncer::new(self.settings.debounce_interval, self.settings.max_delay);
        loop {
            let deadline = debouncer.deadline().map(Instant::from_std);
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Ok(()),
                () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    let _busy = ctx.busy("publishing a debounced trigger");
                    let fired = debouncer.on_deadline(Instant::now().into_std());
                    self.publish(fired);
                }
                delivery = self.subscription.recv() => {
                    let Some(delivery) = delivery else {
                        // Every bus handle is gone: nothing can arrive any more.
                        ctx.cancelled().await;
                        return Ok(());
                    };
                    let _busy = ctx.busy("handling an event");
                    let Some(input) = self.input_of(&delivery) else { continue };
                    if input == Input::Lagged {
                        self.catch_up(&mut debouncer);
                        continue;
                    }
                    if input == (Input::Changed { initial: false }) && !debouncer.is_shut_down() {
                        self.metrics.changes_debounced.inc();
                    }
                    if input == Input::Shutdown {
                        tracing::debug!("shutdown requested, no more triggers");
                    }
                    let fired = debouncer.on_event(Instant::now().into_std(), input);
                    self.publish(fired);
                }
            }
        }
    }
}

impl Component for Reconciler {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_loop(ctx))
    }
}

#[cfg(test)]
mod tests;
