//! Leader gating: components that only the elected replica runs.

use std::time::Duration;

use futures::future::BoxFuture;
use poolkeeper_bus::{Bus, Event};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::component::{BoxError, Component, Context};
use crate::error::SupervisorError;
use crate::tasks::Tasks;
use crate::watchdog::format_duration;

/// Where an elector reports whether this replica leads. Only changes are
/// passed on, and every change is: a loss followed by a quick win is seen
/// as both.
#[derive(Debug)]
pub struct LeadershipReporter {
    changes: mpsc::UnboundedSender<bool>,
    leader: bool,
}

impl LeadershipReporter {
    /// A reporter and the receiving end of its changes.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<bool>) {
        let (changes, receiver) = mpsc::unbounded_channel();
        (
            Self {
                changes,
                leader: false,
            },
            receiver,
        )
    }

    pub fn set(&mut self, leader: bool) {
        if self.leader != leader {
            self.leader = leader;
            // The receiver is gone only when the gated component has ended.
            let _ = self.changes.send(leader);
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leader
    }
}

/// Decides whether this replica leads.
///
/// `campaign` runs until `stop` is cancelled, reports every change through
/// `reporter`, and before returning gives leadership up (reporting `false`)
/// and releases whatever it holds so another replica can take over at once.
/// Returning before `stop` is cancelled is a failure.
pub trait LeaderElector: Send + 'static {
    fn campaign(
        self: Box<Self>,
        reporter: LeadershipReporter,
        stop: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BoxError>>;
}

type Factory = Box<dyn Fn() -> Vec<Box<dyn Component>> + Send + Sync>;

/// Runs fresh instances of leader-only components while this replica leads.
///
/// On winning it builds the components with its factory, publishes
/// [`Event::LeadershipChanged`]` { leader: true }` and starts them; on
/// losing it cancels them, publishes `leader: false` and waits for them to
/// stop (aborting any still running after the stop timeout). It can win
/// again later. Without an elector it runs the components from the start.
///
/// It is ready as soon as it campaigns: followers are healthy replicas.
/// A gated component that fails, or an elector that ends on its own, fails
/// this component.
pub struct LeaderGated {
    name: &'static str,
    elector: Option<Box<dyn LeaderElector>>,
    factory: Factory,
    bus: Bus,
    stop_timeout: Duration,
}

impl std::fmt::Debug for LeaderGated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderGated")
            .field("name", &self.name)
            .field("elected", &self.elector.is_some())
            .field("stop_timeout", &self.stop_timeout)
            .finish()
    }
}

impl LeaderGated {
    /// `elector: None` disables leader election: this replica always leads.
    /// After a lost election the gated components get `stop_timeout` to
    /// stop (the binary gives them `leaseDuration - renewDeadline`: the time
    /// before another replica can take the lease over) and are aborted after.
    pub fn new(
        name: &'static str,
        elector: Option<Box<dyn LeaderElector>>,
        bus: Bus,
        stop_timeout: Duration,
        factory: impl Fn() -> Vec<Box<dyn Component>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            elector,
            factory: Box::new(factory),
            bus,
            stop_timeout,
        }
    }

    async fn run_gated(self: Box<Self>, ctx: Context) -> Result<(), BoxError> {
        let LeaderGated {
            name,
            elector,
            factory,
            bus,
            stop_timeout,
        } = *self;
        let gated = Gated {
            name,
            factory,
            bus,
            stop_timeout,
        };
        let stop_elector = CancellationToken::new();
        let mut election = Election::start(elector, stop_elector.clone());
        ctx.mark_ready();
        let mut term: Option<Term> = None;
        let outcome = gated
            .follow_leadership(&ctx, &mut election, &mut term)
            .await;
        let mut result = outcome;
        if let Some(current) = term.take()
            && let Err(error) = gated.stop(current).await.at_shutdown(gated.stop_timeout)
        {
            result = result.and(Err(error.into()));
        }
        // Released only after the leader-only components stopped, so the
        // next leader never overlaps with them.
        stop_elector.cancel();
        election.finish().await;
        result
    }
}

/// The elector's campaign, or the unconditional leadership of a replica
/// without leader election.
struct Election {
    changes: mpsc::UnboundedReceiver<bool>,
    changes_open: bool,
    task: Option<ElectorTask>,
    /// Without an elector the reporter stays here, keeping `changes` open.
    _unelected: Option<LeadershipReporter>,
}

impl Election {
    fn start(elector: Option<Box<dyn LeaderElector>>, stop: CancellationToken) -> Self {
        let (mut reporter, changes) = LeadershipReporter::channel();
        let (task, unelected) = match elector {
            Some(candidate) => {
                tracing::info!("campaigning for leadership");
                let task = ElectorTask(tokio::spawn(candidate.campaign(reporter, stop)));
                (Some(task), None)
            }
            None => {
                tracing::info!("leader election is disabled: leading unconditionally");
                reporter.set(true);
                (None, Some(reporter))
            }
        };
        Self {
            changes,
            changes_open: true,
            task,
            _unelected: unelected,
        }
    }

    /// Waits for the elector to end after it was told to stop.
    async fn finish(self) {
        let Some(mut task) = self.task else {
            return;
        };
        match (&mut task.0).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!("leader election did not end cleanly: {error}"),
            Err(join) => tracing::warn!("leader election task failed: {join}"),
        }
    }
}

impl Component for LeaderGated {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Ready as soon as it campaigns: a follower is a healthy replica.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.run_gated(ctx))
    }
}

struct Gated {
    name: &'static str,
    factory: Factory,
    bus: Bus,
    stop_timeout: Duration,
}

/// One leadership term: the leader-only components started when this
/// replica won, stopped together when it loses.
struct Term {
    tasks: Tasks,
    token: CancellationToken,
}

impl Gated {
    /// Starts and stops the gated components as leadership comes and goes,
    /// until `ctx` is cancelled or something fails.
    async fn follow_leadership(
        &self,
        ctx: &Context,
        election: &mut Election,
        term: &mut Option<Term>,
    ) -> Result<(), BoxError> {
        loop {
            tokio::select! {
                _ = ctx.cancelled() => return Ok(()),
                change = election.changes.recv(), if election.changes_open => match change {
                    Some(true) if term.is_none() => *term = Some(self.start(ctx)),
                    Some(false) => {
                        if let Some(current) = term.take() {
                            #[cfg(feature = "broken-leader-for-chaos")]
                            {
                                tracing::warn!(
                                    "leadership lost: this deliberately broken build acts as leader {} longer",
                                    format_duration(crate::term::IGNORED_LOSS)
                                );
                                tokio::time::sleep(crate::term::IGNORED_LOSS).await;
                            }
                            tracing::info!("leadership lost: stopping leader-only components");
                            self.stop(current).await.after_loss()?;
                        }
                    }
                    Some(true) => {}
                    // The elector ended; its task reports how.
                    None => election.changes_open = false,
                },
                exit = next_exit(term) => {
                    let name = exit.name;
                    // A clean exit after being asked to stop: the gated
                    // components' tokens are children of this one's, so
                    // shutdown has begun and this select may just have seen
                    // the component end before noticing its own cancellation.
                    let Some(error) = exit.into_failure() else {
                        return Ok(());
                    };
                    tracing::error!(component = name, %error, "component failed");
                    return Err(SupervisorError::ComponentFailed { name: name.to_string(), error }.into());
                }
                ended = join_elector(&mut election.task) => {
                    election.task = None;
                    let error: BoxError = match ended {
                        Ok(Ok(())) => "the elector stopped campaigning".into(),
                        Ok(Err(error)) => error,
                        Err(join) => format!("the elector task failed: {join}").into(),
                    };
                    return Err(SupervisorError::ElectionEnded(error).into());
                }
            }
        }
    }

    fn start(&self, ctx: &Context) -> Term {
        // Built before the announcement so they are subscribed to it.
        let components = (self.factory)();
        let names: Vec<&'static str> = components.iter().map(|c| c.name()).collect();
        tracing::info!(components = ?names, "leadership gained: starting leader-only components");
        self.bus.publish(Event::LeadershipChanged { leader: true });
        let token = ctx.cancellation().child_token();
        let mut tasks = Tasks::default();
        for component in components {
            // Leader-only components stay off `/readyz`: a follower is ready too.
            tasks.spawn(component, token.child_token(), ctx.watchdog(), None);
        }
        Term { tasks, token }
    }

    /// Stops the gated components, aborting those still running after the
    /// stop timeout.
    async fn stop(&self, mut term: Term) -> Stopped {
        term.token.cancel();
        self.bus.publish(Event::LeadershipChanged { leader: false });
        let deadline = Instant::now() + self.stop_timeout;
        let mut stopped = Stopped::default();
        while !term.tasks.is_empty() {
            tokio::select! {
                exit = term.tasks.next() => {
                    let name = exit.name;
                    match exit.into_failure() {
                        None => tracing::info!(component = name, "component stopped"),
                        Some(error) => {
                            tracing::error!(component = name, %error, "component failed");
                            stopped.failure.get_or_insert(SupervisorError::ComponentFailed {
                                name: name.to_string(),
                                error,
                            });
                        }
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    stopped.aborted = term.tasks.running();
                    tracing::error!(
                        gate = self.name,
                        components = ?stopped.aborted,
                        "leader-only components did not stop within {}; aborting them",
                        format_duration(self.stop_timeout)
                    );
                    term.tasks.abort_all();
                }
            }
        }
        stopped
    }
}

/// How stopping the gated components went.
#[derive(Debug, Default)]
struct Stopped {
    /// The first component that failed while stopping.
    failure: Option<SupervisorError>,
    /// Components that had to be aborted.
    aborted: Vec<&'static str>,
}

impl Stopped {
    /// After a lost election an aborted component is dealt with: it can no
    /// longer write. A failure still is one.
    fn after_loss(self) -> Result<(), SupervisorError> {
        self.failure.map_or(Ok(()), Err)
    }

    /// At shutdown an aborted component is reported like one the
    /// supervisor itself had to abort.
    fn at_shutdown(self, stop_timeout: Duration) -> Result<(), SupervisorError> {
        if let Some(failure) = self.failure {
            return Err(failure);
        }
        if self.aborted.is_empty() {
            return Ok(());
        }
        Err(SupervisorError::ShutdownTimeout {
            grace_period: stop_timeout,
            components: self.aborted.into_iter().map(str::to_string).collect(),
        })
    }
}

async fn next_exit(term: &mut Option<Term>) -> crate::tasks::Exit {
    match term {
        Some(term) => term.tasks.next().await,
        None => std::future::pending().await,
    }
}

/// The elector's task, aborted if this component's task is (the supervisor
/// aborts components that overrun the grace period).
struct ElectorTask(JoinHandle<Result<(), BoxError>>);

impl Drop for ElectorTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn join_elector(
    elector: &mut Option<ElectorTask>,
) -> Result<Result<(), BoxError>, tokio::task::JoinError> {
    match elector {
        Some(task) => (&mut task.0).await,
        None => std::future::pending().await,
    }
}
