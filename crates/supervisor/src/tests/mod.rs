//! Supervisor tests on tokio's paused clock with fake components, one
//! module per topic; this one holds the fakes and the harness.

mod drain;
mod failures;
mod health;
mod leader;
mod readiness;
mod stages;

pub(super) use std::sync::Arc;
pub(super) use std::sync::atomic::{AtomicUsize, Ordering};
pub(super) use std::time::Duration;

pub(super) use futures::future::BoxFuture;
pub(super) use parking_lot::Mutex;
pub(super) use poolkeeper_bus::{Bus, Delivery, Event, Subscription};
pub(super) use prometheus_client::registry::Registry;
pub(super) use tokio::sync::{mpsc, oneshot};
pub(super) use tokio::task::JoinHandle;
pub(super) use tokio::time::Instant;
pub(super) use tokio_util::sync::CancellationToken;

pub(super) use crate::*;

pub(super) use Behavior::{
    BusyUntil, FailAfter, NeverReady, Normal, PanicAfter, ReadyOn, ReturnAfter, Stubborn,
};

/// What fake components did, in order.
#[derive(Clone, Debug, Default)]
pub(super) struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, entry: String) {
        self.0.lock().push(entry);
    }

    fn entries(&self) -> Vec<String> {
        self.0.lock().clone()
    }

    fn position(&self, entry: &str) -> usize {
        self.entries()
            .iter()
            .position(|e| e == entry)
            .unwrap_or_else(|| panic!("{entry:?} missing from {:?}", self.entries()))
    }

    fn contains(&self, entry: &str) -> bool {
        self.entries().iter().any(|e| e == entry)
    }
}

pub(super) enum Behavior {
    /// Ready at once, stops when cancelled.
    Normal,
    /// Ready once the sender fires.
    ReadyOn(oneshot::Receiver<()>),
    NeverReady,
    /// Ready, then ignores cancellation.
    Stubborn,
    FailAfter(Duration),
    ReturnAfter(Duration),
    PanicAfter(Duration),
    /// Ready, then busy with one event until the sender fires.
    BusyUntil(oneshot::Receiver<()>),
}

pub(super) struct Fake {
    name: &'static str,
    log: Log,
    behavior: Behavior,
}

pub(super) fn fake(name: &'static str, log: &Log, behavior: Behavior) -> Box<dyn Component> {
    Box::new(Fake {
        name,
        log: log.clone(),
        behavior,
    })
}

impl Component for Fake {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Fakes named `quiet-*` stay off `/readyz`.
    fn readiness_check(&self) -> Option<&'static str> {
        (!self.name.starts_with("quiet-")).then_some(self.name)
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            let Fake {
                name,
                log,
                behavior,
            } = *self;
            log.push(format!("start:{name}"));
            match behavior {
                Behavior::Normal => ctx.mark_ready(),
                Behavior::ReadyOn(ready) => {
                    tokio::select! {
                        _ = ready => ctx.mark_ready(),
                        _ = ctx.cancelled() => {}
                    }
                }
                Behavior::NeverReady => ctx.waiting_for(format!("{name} waits forever")),
                Behavior::Stubborn => {
                    ctx.mark_ready();
                    std::future::pending::<()>().await;
                }
                Behavior::FailAfter(after) => {
                    ctx.mark_ready();
                    tokio::time::sleep(after).await;
                    return Err("boom".into());
                }
                Behavior::ReturnAfter(after) => {
                    ctx.mark_ready();
                    tokio::time::sleep(after).await;
                    return Ok(());
                }
                Behavior::PanicAfter(after) => {
                    ctx.mark_ready();
                    tokio::time::sleep(after).await;
                    panic!("kaboom");
                }
                Behavior::BusyUntil(done) => {
                    ctx.mark_ready();
                    let busy = ctx.busy("handling event");
                    let _ = done.await;
                    drop(busy);
                }
            }
            ctx.cancelled().await;
            log.push(format!("stop:{name}"));
            Ok(())
        })
    }
}

/// The startup timeout of every stage in these tests.
pub(super) const STARTUP_TIMEOUT: Option<Duration> = Some(Duration::from_secs(30));

pub(super) fn settings() -> SupervisorSettings {
    SupervisorSettings {
        stall_timeout: Duration::from_secs(10),
        grace_period: Duration::from_secs(5),
    }
}

/// Stages of fakes in start order: each a stage name and its fakes' names
/// and behaviours.
pub(super) type FakeStages = Vec<(&'static str, Vec<(&'static str, Behavior)>)>;

pub(super) fn add_fake_stages(supervisor: &mut Supervisor, log: &Log, stages: FakeStages) {
    for (stage, fakes) in stages {
        supervisor.stage(stage, STARTUP_TIMEOUT).extend(
            fakes
                .into_iter()
                .map(|(name, behavior)| fake(name, log, behavior)),
        );
    }
}

/// A supervisor of nothing but fakes, for tests that watch neither its health
/// nor its bus.
pub(super) fn supervisor_of_fakes(log: &Log, stages: FakeStages) -> Supervisor {
    let mut supervisor = Supervisor::new(settings(), Health::default(), Bus::default());
    add_fake_stages(&mut supervisor, log, stages);
    supervisor
}

pub(super) struct Running {
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), SupervisorError>>,
}

impl Running {
    async fn stop(self) -> Result<(), SupervisorError> {
        let _ = self.shutdown.send(());
        self.task.await.expect("the supervisor task does not panic")
    }

    /// Waits for the run to fail on its own. `self.shutdown` stays alive
    /// meanwhile: dropping it would request a shutdown.
    async fn failure(self) -> SupervisorError {
        self.task
            .await
            .expect("the supervisor task does not panic")
            .expect_err("the run fails")
    }
}

pub(super) fn start(supervisor: Supervisor) -> Running {
    let (shutdown, requested) = oneshot::channel::<()>();
    let task = tokio::spawn(supervisor.run(async move {
        let _ = requested.await;
    }));
    Running { shutdown, task }
}

/// Lets every task run until all of them wait (the clock is paused, so
/// this takes no real time).
pub(super) async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

pub(super) fn events(subscription: &mut Subscription) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(delivery) = subscription.try_recv() {
        if let Delivery::Event(envelope) = delivery {
            events.push(envelope.event.clone());
        }
    }
    events
}

pub(super) fn check(checks: &[CheckResult], name: &str) -> Result<(), String> {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name} in {checks:?}"))
        .status
        .clone()
}

pub(super) fn assert_shutting_down(health: &Health) {
    assert_eq!(
        check(&health.readiness(), SHUTDOWN_CHECK),
        Err("shutting down".to_string())
    );
}

pub(super) fn assert_component_failed(error: &SupervisorError, component: &str, message: &str) {
    match error {
        SupervisorError::ComponentFailed { name, error } => {
            assert_eq!(name, component);
            assert_eq!(error.to_string(), message);
        }
        other => panic!("unexpected {other:?}"),
    }
}
