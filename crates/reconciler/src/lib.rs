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
use poolkeeper_config::Config;
use poolkeeper_supervisor::{BoxError, Component, Context};
use tokio::time::Instant;

pub use debouncer::{Debouncer, Input};

/// Settings of the debouncer (`reconciler:` in the configuration file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcilerSettings {
    /// Quiet period after the last live change before a trigger.
    pub debounce_interval: Duration,
    /// Longest a trigger waits after the first change of a burst; at least
    /// `debounce_interval` (the configuration checks it).
    pub max_delay: Duration,
}

impl From<&Config> for ReconcilerSettings {
    fn from(config: &Config) -> Self {
        Self {
            debounce_interval: config.reconciler.debounce_interval,
            max_delay: config.reconciler.max_delay,
        }
    }
}

/// The kinds whose changes can give the executor work, so they alone lead to
/// a trigger: changes of other kinds would only cause empty passes. Whether
/// a kind's changes arrive at all is the watchers' call, made from the
/// configuration once: Secrets are watched only while
/// `machineClasses.protectSecrets` is on (then a Secret created after the
/// class that names it, or a finalizer someone removed, needs a pass).
const TRIGGERING_KINDS: [ResourceKind; 3] = [
    ResourceKind::MachineClass,
    ResourceKind::Machine,
    ResourceKind::Secret,
];

/// The debouncer component.
pub struct Reconciler {
    bus: Bus,
    subscription: Subscription,
    settings: ReconcilerSettings,
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
    pub fn new(settings: ReconcilerSettings, bus: &Bus) -> Self {
        debug_assert!(settings.max_delay >= settings.debounce_interval);
        Self {
            bus: bus.clone(),
            subscription: bus.subscribe(Self::NAME),
            settings,
        }
    }

    fn input_of(&self, delivery: &Delivery) -> Option<Input> {
        match delivery {
            Delivery::Lagged(_) => Some(Input::Lagged),
            Delivery::Event(envelope) => match &envelope.event {
                Event::ResourceChanged { kind, initial, .. } if TRIGGERING_KINDS.contains(kind) => {
                    Some(Input::Changed { initial: *initial })
                }
                Event::LeadershipChanged { leader: true } => Some(Input::LeadershipGained),
                Event::ShutdownRequested => Some(Input::Shutdown),
                _ => None,
            },
        }
    }

    fn publish(&self, trigger: Option<TriggerReason>) {
        if let Some(reason) = trigger {
            tracing::debug!(reason = reason.as_str(), "reconciliation triggered");
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
                delivery = self.subscription.next_delivery() => {
                    let _busy = ctx.busy("handling an event");
                    let Some(input) = self.input_of(&delivery) else { continue };
                    if input == Input::Lagged {
                        self.catch_up(&mut debouncer);
                        continue;
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

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
