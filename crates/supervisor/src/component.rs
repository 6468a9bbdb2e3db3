use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::watchdog::Watchdog;

/// Any error a component ends with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A long-running part of poolkeeper, started by the [`crate::Supervisor`]
/// in its stage.
///
/// `run` works until `ctx` is cancelled and then returns `Ok(())`. Returning
/// before cancellation — with `Ok` or `Err` — is a failure that stops the
/// whole process.
pub trait Component: Send + 'static {
    fn name(&self) -> &'static str;

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// What the supervisor hands a running component.
#[derive(Clone, Debug)]
pub struct Context {
    cancel: CancellationToken,
    activity: Activity,
    ready: tokio::sync::watch::Sender<bool>,
    /// Set when the supervisor runs the component, so that components which
    /// start components of their own (leader gating) get stall detection for
    /// them too.
    watchdog: Option<Watchdog>,
}

impl Context {
    pub fn new(
        cancel: CancellationToken,
        activity: Activity,
        ready: tokio::sync::watch::Sender<bool>,
    ) -> Self {
        Self {
            cancel,
            activity,
            ready,
            watchdog: None,
        }
    }

    pub(crate) fn supervised(
        cancel: CancellationToken,
        activity: Activity,
        ready: tokio::sync::watch::Sender<bool>,
        watchdog: Option<Watchdog>,
    ) -> Self {
        Self {
            cancel,
            activity,
            ready,
            watchdog,
        }
    }

    pub(crate) fn watchdog(&self) -> Option<&Watchdog> {
        self.watchdog.as_ref()
    }

    /// Completes when the component must stop.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Tells the supervisor this component is ready; the next stage waits
    /// for every component of this one to say so.
    pub fn mark_ready(&self) {
        self.ready.send_replace(true);
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Stall detection: hold the returned guard while handling one unit of
    /// work (one event, one request batch).
    pub fn busy(&self, what: &'static str) -> BusyGuard {
        self.activity.busy(what)
    }

    pub fn activity(&self) -> &Activity {
        &self.activity
    }
}

/// Tracks what a component is doing right now, for stall detection.
#[derive(Clone, Debug, Default)]
pub struct Activity {
    current: Arc<Mutex<Option<(&'static str, Instant)>>>,
}

impl Activity {
    pub fn busy(&self, what: &'static str) -> BusyGuard {
        *self.current.lock() = Some((what, Instant::now()));
        BusyGuard {
            activity: self.clone(),
        }
    }

    /// `Some((what, for how long))` while a unit of work is in progress.
    pub fn busy_for(&self) -> Option<(&'static str, Duration)> {
        self.current
            .lock()
            .map(|(what, since)| (what, since.elapsed()))
    }
}

/// Clears the component's activity when dropped.
#[derive(Debug)]
pub struct BusyGuard {
    activity: Activity,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        *self.activity.current.lock() = None;
    }
}
