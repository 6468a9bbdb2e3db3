use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use poolkeeper_bus::{Bus, Event};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::Id;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::component::Component;
use crate::error::SupervisorError;
use crate::health::{Gate, Health};
use crate::tasks::{Exit, Spawned, Tasks};
use crate::watchdog::Watchdog;

/// Name of the readiness check that fails once shutdown begins.
pub const SHUTDOWN_CHECK: &str = "shutdown";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupervisorSettings {
    /// A component busy with one unit of work for longer than this fails its
    /// liveness check.
    pub stall_timeout: Duration,
    /// Time allowed for every component to stop once shutdown begins.
    pub grace_period: Duration,
    /// Time allowed for each stage to become ready.
    pub startup_timeout: Duration,
}

impl Default for SupervisorSettings {
    fn default() -> Self {
        Self {
            stall_timeout: Duration::from_secs(120),
            grace_period: Duration::from_secs(30),
            startup_timeout: Duration::from_secs(300),
        }
    }
}

struct Stage {
    name: String,
    components: Vec<Box<dyn Component>>,
}

/// Starts components in ordered stages, watches them, and stops them in
/// reverse order.
pub struct Supervisor {
    settings: SupervisorSettings,
    bus: Bus,
    stages: Vec<Stage>,
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
            watchdog: Watchdog::new(health, settings.stall_timeout),
            settings,
            bus,
            stages: Vec::new(),
            shutdown_gate,
        }
    }

    /// Appends a stage. Stages start in the order they were added; each one
    /// only after every component of the previous one is ready.
    pub fn stage(&mut self, name: impl Into<String>) -> StageBuilder<'_> {
        self.stages.push(Stage {
            name: name.into(),
            components: Vec::new(),
        });
        let stage = self.stages.last_mut().expect("a stage was just pushed");
        StageBuilder { stage }
    }

    /// Registers `poolkeeper_component_running` and
    /// `poolkeeper_component_stalled`, by component.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.watchdog.register_metrics(registry);
    }

    /// Starts the bus and the stages, then runs until `shutdown` completes or
    /// a component fails, and stops everything in reverse stage order.
    ///
    /// Returns `Ok` only after a requested shutdown in which every component
    /// stopped cleanly within the grace period.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), SupervisorError> {
        let Supervisor {
            settings,
            bus,
            stages,
            watchdog,
            shutdown_gate,
        } = self;
        check_unique_names(&stages)?;

        // Every component subscribed in its constructor, so nothing that
        // was published so far can be missed.
        bus.start();

        let stop_watchdog = CancellationToken::new();
        let watchdog_task = tokio::spawn(watchdog.clone().run(stop_watchdog.clone()));
        let _stop_watchdog = stop_watchdog.clone().drop_guard();

        let mut shutdown = std::pin::pin!(shutdown);
        let mut tasks = Tasks::default();
        let mut started: Vec<Started> = Vec::new();

        let mut end = StartupEnd::Complete;
        for stage in stages {
            let names: Vec<&'static str> = stage.components.iter().map(|c| c.name()).collect();
            tracing::info!(stage = %stage.name, components = ?names, "starting stage \"{}\"", stage.name);
            let token = CancellationToken::new();
            let members: Vec<Spawned> = stage
                .components
                .into_iter()
                .map(|c| tasks.spawn(c, token.child_token(), Some(&watchdog)))
                .collect();
            started.push(Started {
                name: stage.name,
                token,
                members,
            });
            let stage = started.last().expect("a stage was just started");
            let deadline = Instant::now() + settings.startup_timeout;
            let all_ready = all_ready(stage.members.iter().map(|m| m.ready.clone()));
            end = tokio::select! {
                _ = all_ready => {
                    tracing::info!(stage = %stage.name, "stage \"{}\" is ready", stage.name);
                    StartupEnd::Complete
                }
                exit = tasks.next() => StartupEnd::Failed(early_exit(exit)),
                _ = &mut shutdown => StartupEnd::ShutdownRequested,
                _ = tokio::time::sleep_until(deadline) => {
                    let waiting: Vec<String> = stage
                        .members
                        .iter()
                        .filter(|m| !*m.ready.borrow())
                        .map(|m| m.name.to_string())
                        .collect();
                    let error = SupervisorError::StartupTimeout {
                        stage: stage.name.clone(),
                        timeout: settings.startup_timeout,
                        components: waiting,
                    };
                    tracing::error!("{error}");
                    StartupEnd::Failed(error)
                }
            };
            if !matches!(end, StartupEnd::Complete) {
                break;
            }
        }

        let mut failure = match end {
            StartupEnd::Failed(error) => Some(error),
            StartupEnd::ShutdownRequested => None,
            StartupEnd::Complete => {
                tracing::info!("all stages are running");
                tokio::select! {
                    exit = tasks.next() => Some(early_exit(exit)),
                    _ = &mut shutdown => None,
                }
            }
        };
        if failure.is_none() {
            tracing::info!("shutdown requested");
        }

        shutdown_gate.fail("shutting down");
        bus.publish(Event::ShutdownRequested);

        let stop = stop_stages(&started, &mut tasks, settings.grace_period, &mut failure).await;
        stop_watchdog.cancel();
        let _ = watchdog_task.await;

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

/// Completes once every receiver reads `true`. A component that ended
/// without becoming ready never counts as ready.
async fn all_ready(readies: impl Iterator<Item = watch::Receiver<bool>>) {
    join_all(readies.map(|mut ready| async move {
        if ready.wait_for(|r| *r).await.is_err() {
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
    tracing::error!(component = name, "component \"{name}\" failed: {error}");
    SupervisorError::ComponentFailed {
        name: name.to_string(),
        error,
    }
}

/// Stops the started stages in reverse order within `grace_period`,
/// recording the first component failure seen on the way in `failure`.
async fn stop_stages(
    started: &[Started],
    tasks: &mut Tasks,
    grace_period: Duration,
    failure: &mut Option<SupervisorError>,
) -> Result<(), SupervisorError> {
    let deadline = Instant::now() + grace_period;
    for stage in started.iter().rev() {
        if stage.alive(tasks).is_empty() {
            continue;
        }
        tracing::info!(stage = %stage.name, "stopping stage \"{}\"", stage.name);
        stage.token.cancel();
        while !stage.alive(tasks).is_empty() {
            tokio::select! {
                exit = tasks.next() => record_stop(exit, failure),
                _ = tokio::time::sleep_until(deadline) => {
                    let (asked, unasked) = tasks.running_by_request();
                    if !unasked.is_empty() {
                        tracing::warn!(
                            components = ?unasked,
                            "aborting components whose stage was not reached before the grace period ran out"
                        );
                    }
                    tasks.abort_all();
                    return Err(SupervisorError::ShutdownTimeout {
                        grace_period,
                        components: asked.into_iter().map(str::to_string).collect(),
                    });
                }
            }
        }
        tracing::info!(stage = %stage.name, "stage \"{}\" stopped", stage.name);
    }
    Ok(())
}

fn record_stop(exit: Exit, failure: &mut Option<SupervisorError>) {
    let name = exit.name;
    match exit.into_failure() {
        None => tracing::info!(component = name, "component \"{name}\" stopped"),
        Some(error) => {
            tracing::error!(component = name, "component \"{name}\" failed: {error}");
            failure.get_or_insert(SupervisorError::ComponentFailed {
                name: name.to_string(),
                error,
            });
        }
    }
}
