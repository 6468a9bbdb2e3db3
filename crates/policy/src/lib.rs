//! The leader-only [`Component`] `rejected-bindings`: whenever placement is
//! enabled, it follows the changes of the placement ConfigMap and of the
//! Namespaces, reads the policy from the process's one
//! [`PolicyCache`] and publishes `BindingsRejected` when the Namespace label
//! bindings that take no effect changed. Leader-only, so that one replica
//! writes the Warning Events; a new leader reports every rejection as first
//! found.

use std::sync::Arc;

use futures::future::BoxFuture;
use poolkeeper_bus::{Bus, Delivery, Event, Subscription};
use poolkeeper_index::Index;
use poolkeeper_placement::{PolicyCache, ReportedRejections};
use poolkeeper_supervisor::{BoxError, Component, Context};

/// The `rejected-bindings` component. See the crate documentation.
pub struct RejectedBindings {
    policy: PolicyCache,
    index: Arc<Index>,
    bus: Bus,
    subscription: Subscription,
    reported: ReportedRejections,
}

impl std::fmt::Debug for RejectedBindings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RejectedBindings")
            .field("source", self.policy.source())
            .field("reported", &self.reported)
            .finish_non_exhaustive()
    }
}

impl RejectedBindings {
    pub const NAME: &'static str = "rejected-bindings";

    /// Subscribes to `bus` right away: build it in the leader-gated
    /// factory. It reads the policy of `index`, which the watchers keep.
    pub fn new(bus: &Bus, index: Arc<Index>, policy: PolicyCache) -> Self {
        Self {
            policy,
            index,
            bus: bus.clone(),
            subscription: bus.subscribe(Self::NAME),
            reported: ReportedRejections::default(),
        }
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        self.report();
        loop {
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Ok(()),
                delivery = self.subscription.next_delivery() => {
                    if self.concerns_policy(&delivery) {
                        self.report();
                    }
                }
            }
        }
    }

    /// A change of the placement ConfigMap or of a Namespace, or possibly
    /// one (the bus lagged).
    fn concerns_policy(&self, delivery: &Delivery) -> bool {
        match delivery {
            Delivery::Lagged(_) => true,
            Delivery::Event(envelope) => match &envelope.event {
                Event::ResourceChanged { kind, key, .. } => self.policy.reads(*kind, key),
                _ => false,
            },
        }
    }

    /// Publishes `BindingsRejected` when the rejected label bindings
    /// changed, and logs the ones newly rejected. An invalid policy rejects
    /// no label binding on its own: it is reported when it loads.
    fn report(&mut self) {
        let policy = self.policy.get(&self.index.placement());
        let Ok(policy) = policy.as_ref() else {
            return;
        };
        let Some(rejected) = self.reported.update(policy) else {
            return;
        };
        for binding in rejected.iter().filter(|r| r.first_found) {
            tracing::warn!(
                namespace = %binding.namespace,
                reason = binding.reason.as_str(),
                message = %binding.message,
                "a namespace's label binding takes no effect"
            );
        }
        self.bus.publish(Event::BindingsRejected { rejected });
    }
}

impl Component for RejectedBindings {
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

#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
