//! Running components as tasks and collecting how they end.

use std::collections::HashMap;

use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::component::{BoxError, Component, Context, Readiness};
use crate::health::Health;
use crate::watchdog::{Activity, Watchdog};

/// What a component starts out waiting for, until it says more.
pub(crate) const STARTING: &str = "starting";

/// How a component task ended.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) name: &'static str,
    pub(crate) result: Result<(), BoxError>,
    /// Whether the component had been asked to stop when it ended.
    pub(crate) cancelled: bool,
}

impl Exit {
    /// `Ok` only for a component that returned `Ok` after it was asked to stop.
    pub(crate) fn into_failure(self) -> Option<BoxError> {
        match self.result {
            Err(error) => Some(error),
            Ok(()) if self.cancelled => None,
            Ok(()) => Some("stopped before it was asked to".into()),
        }
    }
}

/// A component that was just spawned.
#[derive(Clone, Debug)]
pub(crate) struct Spawned {
    pub(crate) id: Id,
    pub(crate) name: &'static str,
    pub(crate) readiness: watch::Receiver<Readiness>,
}

#[derive(Debug)]
struct Member {
    name: &'static str,
    token: CancellationToken,
    order: u64,
}

/// A set of running component tasks.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    set: JoinSet<(Result<(), BoxError>, bool)>,
    members: HashMap<Id, Member>,
    spawned: u64,
}

impl Tasks {
    /// Runs `component` in its own task; cancelling `token` asks it to stop.
    /// With `health`, the component's readiness becomes its `/readyz` check.
    pub(crate) fn spawn(
        &mut self,
        component: Box<dyn Component>,
        token: CancellationToken,
        watchdog: Option<&Watchdog>,
        health: Option<&Health>,
    ) -> Spawned {
        let name = component.name();
        let (readiness_tx, readiness) = watch::channel(Readiness::Waiting(STARTING.to_owned()));
        let check = health
            .zip(component.readiness_check())
            .map(|(health, check)| health.readiness_gate(check, STARTING));
        let activity = Activity::default();
        let ctx = Context::supervised(
            token.clone(),
            activity.clone(),
            readiness_tx,
            check,
            watchdog.cloned(),
        );
        let watch = watchdog.map(|w| w.watch(name, activity));
        let task_token = token.clone();
        let task = async move {
            let _watch = watch;
            // `run` itself may panic: call it inside the task so the panic
            // is reported like any other.
            let result = component.run(ctx).await;
            (result, task_token.is_cancelled())
        }
        .instrument(tracing::info_span!("component", component = name));
        let id = self.set.spawn(task).id();
        self.spawned += 1;
        self.members.insert(
            id,
            Member {
                name,
                token,
                order: self.spawned,
            },
        );
        Spawned {
            id,
            name,
            readiness,
        }
    }

    /// The next task to end. Never completes while no task runs.
    pub(crate) async fn next(&mut self) -> Exit {
        loop {
            let Some(joined) = self.set.join_next_with_id().await else {
                return std::future::pending().await;
            };
            let (id, result, cancelled) = match joined {
                Ok((id, (result, cancelled))) => (id, result, cancelled),
                Err(error) => {
                    let id = error.id();
                    let cancelled = self
                        .members
                        .get(&id)
                        .is_some_and(|m| m.token.is_cancelled());
                    (id, Err(join_failure(error)), cancelled)
                }
            };
            if let Some(member) = self.members.remove(&id) {
                return Exit {
                    name: member.name,
                    result,
                    cancelled,
                };
            }
        }
    }

    pub(crate) fn is_running(&self, id: Id) -> bool {
        self.members.contains_key(&id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Names of the tasks still running, in the order they were started.
    pub(crate) fn running(&self) -> Vec<&'static str> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.order);
        members.into_iter().map(|m| m.name).collect()
    }

    /// Names of the running tasks that were asked to stop, and of those
    /// that were not, each in start order.
    pub(crate) fn running_by_request(&self) -> (Vec<&'static str>, Vec<&'static str>) {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.order);
        let (asked, unasked): (Vec<&Member>, Vec<&Member>) =
            members.into_iter().partition(|m| m.token.is_cancelled());
        (
            asked.into_iter().map(|m| m.name).collect(),
            unasked.into_iter().map(|m| m.name).collect(),
        )
    }

    /// Stops every task at its next `.await` without waiting for it.
    pub(crate) fn abort_all(&mut self) {
        self.set.abort_all();
        self.members.clear();
    }
}

fn join_failure(error: JoinError) -> BoxError {
    if !error.is_panic() {
        return "was aborted".into();
    }
    let payload = error.into_panic();
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_string());
    format!("panicked: {message}").into()
}
