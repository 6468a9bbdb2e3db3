use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use poolkeeper_bus::{Bus, Event};
use poolkeeper_config::Config;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::Id;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::component::{Component, Readiness};
use crate::error::SupervisorError;
use crate::health::{Gate, Health};
use crate::tasks::{Exit, Spawned, Tasks};
use crate::watchdog::Watchdog;

/// Name of the readiness check that fails once shutdown begins.
pub const SHUTDOWN_CHECK: &str = "shutdown";

/// The supervisor's part of the configuration (`health.stallTimeout`,
/// `shutdown.gracePeriod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupervisorSettings {
    /// A component busy with one unit of work for longer than this fails its
    /// liveness check.
    pub stall_timeout: Duration,
    /// Time allowed for every component to stop once shutdown begins.
    pub grace_period: Duration,
}

impl From<&Config> for SupervisorSettings {
    fn from(config: &Config) -> Self {
        Self {
            stall_timeout: config.health.stall_timeout,
            grace_period: config.shutdown.grace_period,
        }
    }
}

struct Stage {
    name: String,
    /// `None`: the stage's components are ready as soon as they run.
    startup_timeout: Option<Duration>,
    components: Vec<Box<dyn Component>>,
}

/// Starts components in ordered stages, watches them, and stops them in
/// reverse order.
pub struct Supervisor {
    settings: SupervisorSettings,
    bus: Bus,
    stages: Vec<Stage>,
    health: Health,
    watchdog: Watchdog,
    shutdown_gate: Gate,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stages: Vec<(&str, Vec<&'static str>)> = self
            .stages
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.components.iter().map(|c| c.name()).collect(),
                )
            })
            .collect();
        f.debug_struct("Supervisor")
            .field("settings", &self.settings)
            .field("stages", &stages)
            .finish()
    }
}

/// Adds components to one stage; see [`Supervisor::stage`].
pub struct StageBuilder<'a> {
    stage: &'a mut Stage,
}

impl StageBuilder<'_> {
    pub fn add(&mut self, component: Box<dyn Component>) -> &mut Self {
        self.stage.components.push(component);
        self
    }

    pub fn extend(
        &mut self,
        components: impl IntoIterator<Item = Box<dyn Component>>,
    ) -> &mut Self {
        self.stage.components.extend(components);
        self
    }
}

/// A stage that has been started.
struct Started {
    name: String,
    startup_timeout: Option<Duration>,
    token: CancellationToken,
    members: Vec<Spawned>,
}

impl Started {
    fn alive(&self, tasks: &Tasks) -> Vec<Id> {
        self.members
            .iter()
            .filter(|m| tasks.is_running(m.id))
            .map(|m| m.id)
            .collect()
    }
}

enum StartupEnd {
    Complete,
    ShutdownRequested,
    Failed(SupervisorError),
}

impl Supervisor {
    /// Also registers the readiness check [`SHUTDOWN_CHECK`], passing until
    /// shutdown begins.
    pub fn new(settings: SupervisorSettings, health: Health, bus: Bus) -> Self {
        let shutdown_gate = health.readiness_gate(SHUTDOWN_CHECK, "not started");
        shutdown_gate.pass();
        Self {
            watchdog: Watchdog::new(health.clone(), settings.stall_timeout),
            health,
            settings,
            bus,
            stages: Vec::new(),
            shutdown_gate,
        }
    }

    /// Appends a stage. Stages start in the order they were added; each one
    /// only after every component of the previous one is ready. A stage not
    /// ready within `startup_timeout` fails startup; `None` is for stages
    /// whose components are ready as soon as they run.
    pub fn stage(
        &mut self,
        name: impl Into<String>,
        startup_timeout: Option<Duration>,
    ) -> StageBuilder<'_> {
        self.stages.push(Stage {
            name: name.into(),
            startup_timeout,
            components: Vec::new(),
        });
        let stage = self.stages.last_mut().expect("a stage was just pushed");
        StageBuilder { stage }
    }

    /// Registers `component_running{component}` and
    /// `component_stalled{component}` (under the caller's prefix).
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.watchdog.register_metrics(registry);
    }

    /// Starts the bus and the stages, then runs until `shutdown` completes or
    /// a component fails, and stops everything in reverse stage order.
    ///
    /// Returns `Ok` only after a requested shutdown in which every component
    /// stopped cleanly within the grace period.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), SupervisorError> {
        check_unique_names(&self.stages)?;
        let Supervisor {
            settings,
            bus,
            stages,
            health,
            watchdog,
            shutdown_gate,
        } = self;
        announce_checks(&stages, &health);
        // Every component subscribed in its constructor, so nothing that
        // was published so far can be missed.
        bus.start();
        let stop_watchdog = CancellationToken::new();
        let watchdog_task = tokio::spawn(watchdog.clone().run(stop_watchdog.clone()));
        let _stop_watchdog = stop_watchdog.clone().drop_guard();

        let mut shutdown = std::pin::pin!(shutdown);
        let mut started = StartedStages {
            tasks: Tasks::default(),
            started: Vec::new(),
            health,
            watchdog,
        };
        let mut failure = started.start_stages(stages, &mut shutdown).await;
        if failure.is_none() {
            tracing::info!("shutdown requested");
        }
        shutdown_gate.fail("shutting down");
        bus.publish(Event::ShutdownRequested);
        let stop = started.stop(settings.grace_period, &mut failure).await;
        stop_watchdog.cancel();
        let _ = watchdog_task.await;
        outcome(failure, stop)
    }
}

/// The stages started so far and their tasks.
struct StartedStages {
    tasks: Tasks,
    started: Vec<Started>,
    health: Health,
    watchdog: Watchdog,
}

impl StartedStages {
    /// Starts the stages in order, then waits for shutdown or a failure.
    /// Returns the failure, `None` for a requested shutdown.
    async fn start_stages(
        &mut self,
        stages: Vec<Stage>,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Option<SupervisorError> {
        for stage in stages {
            match self.start_stage(stage, shutdown).await {
                StartupEnd::Complete => {}
                StartupEnd::ShutdownRequested => return None,
                StartupEnd::Failed(error) => return Some(error),
            }
        }
        tracing::info!("all stages are running");
        tokio::select! {
            exit = self.tasks.next() => Some(early_exit(exit)),
            _ = shutdown => None,
        }
    }

    /// Spawns the components of `stage` and waits until all are ready.
    async fn start_stage(
        &mut self,
        stage: Stage,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> StartupEnd {
        let names: Vec<&'static str> = stage.components.iter().map(|c| c.name()).collect();
        tracing::info!(stage = %stage.name, components = ?names, "starting stage");
        let token = CancellationToken::new();
        let members: Vec<Spawned> = stage
            .components
            .into_iter()
            .map(|c| {
                self.tasks.spawn(
                    c,
                    token.child_token(),
                    Some(&self.watchdog),
                    Some(&self.health),
                )
            })
            .collect();
        self.started.push(Started {
            name: stage.name,
            startup_timeout: stage.startup_timeout,
            token,
            members,
        });
        let stage = self.started.last().expect("a stage was just started");
        let deadline = stage
            .startup_timeout
            .map(|timeout| Instant::now() + timeout);
        tokio::select! {
            _ = all_ready(stage.members.iter().map(|m| m.readiness.clone())) => {
                tracing::info!(stage = %stage.name, "stage is ready");
                StartupEnd::Complete
            }
            exit = self.tasks.next() => StartupEnd::Failed(early_exit(exit)),
            _ = shutdown => StartupEnd::ShutdownRequested,
            _ = sleep_until(deadline) => {
                let error = startup_timeout(stage);
                tracing::error!("{error}");
                StartupEnd::Failed(error)
            }
        }
    }

    /// Stops the started stages in reverse order within `grace_period`,
    /// recording the first component failure seen on the way in `failure`.
    async fn stop(
        &mut self,
        grace_period: Duration,
        failure: &mut Option<SupervisorError>,
    ) -> Result<(), SupervisorError> {
        let deadline = Instant::now() + grace_period;
        let tasks = &mut self.tasks;
        for stage in self.started.iter().rev() {
            if stage.alive(tasks).is_empty() {
                continue;
            }
            tracing::info!(stage = %stage.name, "stopping stage");
            stage.token.cancel();
            while !stage.alive(tasks).is_empty() {
                tokio::select! {
                    exit = tasks.next() => record_stop(exit, failure),
                    _ = tokio::time::sleep_until(deadline) => {
                        return Err(abort_remaining(tasks, grace_period));
                    }
                }
            }
            tracing::info!(stage = %stage.name, "stage stopped");
        }
        Ok(())
    }
}

/// Completes at `deadline`, or never without one: the timer branch of a
/// `select!` whose deadline may not be set.
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The error of a stage whose components were not all ready in time, with
/// what each of them still waits for.
fn startup_timeout(stage: &Started) -> SupervisorError {
    let waiting = stage
        .members
        .iter()
        .filter_map(|m| match &*m.readiness.borrow() {
            Readiness::Ready => None,
            Readiness::Waiting(reason) => Some((m.name.to_owned(), reason.clone())),
        })
        .collect();
    SupervisorError::StartupTimeout {
        stage: stage.name.clone(),
        timeout: stage.startup_timeout.unwrap_or_default(),
        waiting,
    }
}

fn abort_remaining(tasks: &mut Tasks, grace_period: Duration) -> SupervisorError {
    let (asked, unasked) = tasks.running_by_request();
    if !unasked.is_empty() {
        tracing::warn!(
            components = ?unasked,
            "aborting components whose stage was not reached before the grace period ran out"
        );
    }
    tasks.abort_all();
    SupervisorError::ShutdownTimeout {
        grace_period,
        components: asked.into_iter().map(str::to_string).collect(),
    }
}

fn outcome(
    failure: Option<SupervisorError>,
    stop: Result<(), SupervisorError>,
) -> Result<(), SupervisorError> {
    match (failure, stop) {
        (Some(error), Err(timeout)) => {
            tracing::error!("{timeout}");
            Err(error)
        }
        (Some(error), Ok(())) => Err(error),
        (None, Err(timeout)) => {
            tracing::error!("{timeout}");
            Err(timeout)
        }
        (None, Ok(())) => {
            tracing::info!("every component stopped");
            Ok(())
        }
    }
}

/// Lists every readiness check on `/readyz` from the start, failing until
/// its stage runs, so a probe sees what startup still waits for.
fn announce_checks(stages: &[Stage], health: &Health) {
    for stage in stages {
        for check in stage.components.iter().filter_map(|c| c.readiness_check()) {
            let reason = format!("stage \"{}\" has not started yet", stage.name);
            health.readiness_gate(check, &reason);
        }
    }
}

fn check_unique_names(stages: &[Stage]) -> Result<(), SupervisorError> {
    let mut seen = HashSet::new();
    for component in stages.iter().flat_map(|s| &s.components) {
        if !seen.insert(component.name()) {
            return Err(SupervisorError::DuplicateComponent {
                name: component.name().to_string(),
            });
        }
    }
    Ok(())
}

/// Completes once every component is ready. A component that ended
/// without becoming ready never counts as ready.
async fn all_ready(readies: impl Iterator<Item = watch::Receiver<Readiness>>) {
    join_all(readies.map(|mut readiness| async move {
        if readiness.wait_for(Readiness::is_ready).await.is_err() {
            std::future::pending::<()>().await;
        }
    }))
    .await;
}

/// Any exit before shutdown is a failure, even a clean-looking one.
fn early_exit(exit: Exit) -> SupervisorError {
    let name = exit.name;
    let error = exit
        .into_failure()
        .unwrap_or_else(|| "stopped before shutdown was requested".into());
    tracing::error!(component = name, %error, "component failed");
    SupervisorError::ComponentFailed {
        name: name.to_string(),
        error,
    }
}

fn record_stop(exit: Exit, failure: &mut Option<SupervisorError>) {
    let name = exit.name;
    match exit.into_failure() {
        None => tracing::info!(component = name, "component stopped"),
        Some(error) => {
            tracing::error!(component = name, %error, "component failed");
            failure.get_or_insert(SupervisorError::ComponentFailed {
                name: name.to_string(),
                error,
            });
        }
    }
}
