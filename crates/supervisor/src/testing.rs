//! Running components and watching the bus in tests (cargo feature
//! `testing`): what every component crate's tests need, written once.
//!
//! ```text
//! let recorder = BusRecorder::new(&bus); // before bus.start()
//! bus.start();
//! let mut running = spawn(Box::new(component));
//! running.wait_ready(Duration::from_secs(5)).await;
//! recorder.wait_for(Duration::from_secs(5), |e| matches!(e, Event::IndexSynchronized)).await;
//! running.stop().await.unwrap();
//! ```

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use poolkeeper_bus::{Bus, Delivery, Event};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::component::{BoxError, Component, Context, Readiness};
pub use crate::health::Gate;
use crate::health::Health;
use crate::tasks::STARTING;
use crate::watchdog::Activity;

/// A component running on its own, outside any supervisor.
#[derive(Debug)]
pub struct Running {
    name: &'static str,
    cancel: CancellationToken,
    readiness: watch::Receiver<Readiness>,
    activity: Activity,
    task: JoinHandle<Result<(), BoxError>>,
}

/// Runs `component` with a fresh [`Context`].
pub fn spawn(component: Box<dyn Component>) -> Running {
    let name = component.name();
    let cancel = CancellationToken::new();
    let (readiness_tx, readiness) = watch::channel(Readiness::Waiting(STARTING.to_owned()));
    let activity = Activity::default();
    let ctx = Context::new(cancel.clone(), activity.clone(), readiness_tx);
    let task = tokio::spawn(component.run(ctx));
    Running {
        name,
        cancel,
        readiness,
        activity,
        task,
    }
}

impl Running {
    pub fn is_ready(&self) -> bool {
        self.readiness.borrow().is_ready()
    }

    /// What the component waits for, while it is not ready.
    pub fn waiting_reason(&self) -> Option<String> {
        match &*self.readiness.borrow() {
            Readiness::Waiting(reason) => Some(reason.clone()),
            Readiness::Ready => None,
        }
    }

    /// Waits until the component reports ready; panics after `timeout`
    /// with what it still waits for.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        let mut readiness = self.readiness.clone();
        let ready = readiness.wait_for(Readiness::is_ready);
        match tokio::time::timeout(timeout, ready).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => panic!("{} ended without becoming ready", self.name),
            Err(_) => panic!(
                "{} not ready within {timeout:?}: {}",
                self.name,
                self.waiting_reason().unwrap_or_default()
            ),
        }
    }

    /// Waits until the component reports ready (`true`) or ends before it
    /// does (`false`), for tests of when it gets ready or fails.
    pub async fn ready_or_ended(&self) -> bool {
        let mut readiness = self.readiness.clone();
        readiness.wait_for(Readiness::is_ready).await.is_ok()
    }

    /// What the component is busy with right now, for stall tests.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// Whether the component's task has ended (on its own, unless stopped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Asks the component to stop and returns how it ended.
    pub async fn stop(self) -> Result<(), BoxError> {
        self.cancel.cancel();
        self.join().await
    }

    /// Waits for the component to end by itself.
    pub async fn join(self) -> Result<(), BoxError> {
        match self.task.await {
            Ok(result) => result,
            Err(error) => Err(format!("{} panicked or was aborted: {error}", self.name).into()),
        }
    }
}

#[derive(Debug, Default)]
struct Recorded {
    events: Vec<(Duration, Event)>,
    lagged: u64,
}

/// Records every event published on a bus from its creation on, with the
/// time since then (tokio's clock, so a paused clock gives exact times).
#[derive(Debug, Clone)]
pub struct BusRecorder {
    recorded: Arc<Mutex<Recorded>>,
    arrived: Arc<Notify>,
    _task: Arc<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl BusRecorder {
    /// Subscribes to `bus` now: create it before `bus.start()` to see the
    /// events published during startup.
    pub fn new(bus: &Bus) -> Self {
        let mut subscription = bus.subscribe("test-recorder");
        let recorded = Arc::new(Mutex::new(Recorded::default()));
        let arrived = Arc::new(Notify::new());
        let start = Instant::now();
        let task = {
            let recorded = recorded.clone();
            let arrived = arrived.clone();
            tokio::spawn(async move {
                while let Some(delivery) = subscription.recv().await {
                    let mut recorded = recorded.lock();
                    match delivery {
                        Delivery::Event(envelope) => {
                            recorded
                                .events
                                .push((start.elapsed(), envelope.event.clone()));
                        }
                        Delivery::Lagged(missed) => recorded.lagged += missed,
                    }
                    drop(recorded);
                    arrived.notify_waiters();
                }
            })
        };
        Self {
            recorded,
            arrived,
            _task: Arc::new(AbortOnDrop(task)),
        }
    }

    pub fn events(&self) -> Vec<Event> {
        self.recorded
            .lock()
            .events
            .iter()
            .map(|(_, event)| event.clone())
            .collect()
    }

    /// Events with the time they arrived, since [`BusRecorder::new`].
    pub fn timed(&self) -> Vec<(Duration, Event)> {
        self.recorded.lock().events.clone()
    }

    /// Events the recorder missed because it fell behind the bus.
    pub fn lagged(&self) -> u64 {
        self.recorded.lock().lagged
    }

    pub fn count(&self, matches: impl Fn(&Event) -> bool) -> usize {
        self.recorded
            .lock()
            .events
            .iter()
            .filter(|(_, event)| matches(event))
            .count()
    }

    /// The first recorded event that `matches`, waiting for it up to
    /// `timeout`; panics listing what was recorded when none comes.
    pub async fn wait_for(&self, timeout: Duration, matches: impl Fn(&Event) -> bool) -> Event {
        let deadline = Instant::now() + timeout;
        loop {
            let arrived = self.arrived.notified();
            if let Some((_, event)) = self.recorded.lock().events.iter().find(|(_, e)| matches(e)) {
                return event.clone();
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let names: Vec<&str> = self
                    .recorded
                    .lock()
                    .events
                    .iter()
                    .map(|(_, e)| e.name())
                    .collect::<Vec<_>>()
                    .into_iter()
                    .collect();
                panic!("no matching event within {timeout:?}; recorded: {names:?}");
            }
        }
    }
}

/// A readiness check of `health` set by the test, for tests of what reads
/// checks (the admin server).
pub fn readiness_gate(health: &Health, name: &str, reason: &str) -> Gate {
    health.readiness_gate(name, reason)
}

/// A liveness check of `health` set by the test, starting out passing.
pub fn liveness_gate(health: &Health, name: &str) -> Gate {
    health.liveness_gate(name)
}
