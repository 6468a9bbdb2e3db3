//! Draining: a component that keeps working for a while after it was asked
//! to stop, so that traffic routed to it by others has time to go elsewhere.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::component::{BoxError, Component, Context};
use crate::watchdog::format_duration;

/// Runs `inner` and, once asked to stop, lets it go on for `delay` before
/// it is asked too. The supervisor fails the `shutdown` readiness check as
/// soon as shutdown begins, so a Service takes this replica's endpoint out
/// while the webhook still answers (`shutdown.drainDelay`); its in-flight
/// requests then finish as usual.
pub struct Drained {
    inner: Box<dyn Component>,
    delay: Duration,
}

impl Drained {
    pub fn new(inner: Box<dyn Component>, delay: Duration) -> Self {
        Self { inner, delay }
    }

    async fn run_draining(self, ctx: Context) -> Result<(), BoxError> {
        let Drained { inner, delay } = self;
        let inner_stop = CancellationToken::new();
        let mut running = std::pin::pin!(inner.run(ctx.with_cancellation(inner_stop.clone())));
        tokio::select! {
            result = &mut running => return result,
            () = ctx.cancelled() => {}
        }
        tracing::info!(
            delay = %format_duration(delay),
            "draining: still serving while the endpoint is removed"
        );
        tokio::select! {
            result = &mut running => return result,
            () = tokio::time::sleep(delay) => {}
        }
        inner_stop.cancel();
        running.await
    }
}

impl Component for Drained {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn readiness_check(&self) -> Option<&'static str> {
        self.inner.readiness_check()
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_draining(ctx))
    }
}
