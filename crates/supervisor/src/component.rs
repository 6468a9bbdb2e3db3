use futures::future::BoxFuture;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::health::Gate;
use crate::watchdog::{Activity, BusyGuard, Watchdog};

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

    /// The `/readyz` check this component's readiness appears as: its name
    /// by default. `None` keeps it off `/readyz` (its readiness still gates
    /// the next stage), for components that are ready the moment they run.
    fn readiness_check(&self) -> Option<&'static str> {
        Some(self.name())
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// Where a component stands on its way to ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Not ready yet, and why.
    Waiting(String),
    Ready,
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        *self == Readiness::Ready
    }
}

/// What the supervisor hands a running component.
#[derive(Clone, Debug)]
pub struct Context {
    cancel: CancellationToken,
    activity: Activity,
    readiness: tokio::sync::watch::Sender<Readiness>,
    /// The component's `/readyz` check, when it has one.
    check: Option<Gate>,
    /// Set when the supervisor runs the component, so that components which
    /// start components of their own (leader gating) get stall detection for
    /// them too.
    watchdog: Option<Watchdog>,
}

impl Context {
    /// A context outside any supervisor; `readiness` receives what the
    /// component reports.
    pub fn new(
        cancel: CancellationToken,
        activity: Activity,
        readiness: tokio::sync::watch::Sender<Readiness>,
    ) -> Self {
        Self {
            cancel,
            activity,
            readiness,
            check: None,
            watchdog: None,
        }
    }

    pub(crate) fn supervised(
        cancel: CancellationToken,
        activity: Activity,
        readiness: tokio::sync::watch::Sender<Readiness>,
        check: Option<Gate>,
        watchdog: Option<Watchdog>,
    ) -> Self {
        Self {
            cancel,
            activity,
            readiness,
            check,
            watchdog,
        }
    }

    /// The same context, stopped by `cancel` instead.
    pub(crate) fn with_cancellation(&self, cancel: CancellationToken) -> Self {
        Self {
            cancel,
            ..self.clone()
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

    /// Tells the supervisor this component is ready: its `/readyz` check
    /// passes, and the next stage starts once every component of this one
    /// is ready. Readiness is reported once; it is not taken back.
    pub fn mark_ready(&self) {
        self.readiness.send_replace(Readiness::Ready);
        if let Some(check) = &self.check {
            check.pass();
        }
    }

    /// What the component's `/readyz` check says while it passes (shown by
    /// `/readyz?verbose`); replaced by each call.
    pub fn ready_detail(&self, detail: impl Into<String>) {
        if let Some(check) = &self.check {
            check.detail(detail);
        }
    }

    /// Before [`Context::mark_ready`]: what the component waits for, shown
    /// by its `/readyz` check and by a startup timeout. Ignored once ready.
    pub fn waiting_for(&self, reason: impl Into<String>) {
        let reason = reason.into();
        let updated = self
            .readiness
            .send_if_modified(|readiness| match readiness {
                Readiness::Ready => false,
                Readiness::Waiting(current) if *current == reason => false,
                Readiness::Waiting(current) => {
                    current.clone_from(&reason);
                    true
                }
            });
        if updated && let Some(check) = &self.check {
            check.fail(reason);
        }
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
