use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use poolkeeper_bus::{Bus, Delivery, Event, Subscription};
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::*;

use Behavior::{
    BusyUntil, FailAfter, NeverReady, Normal, PanicAfter, ReadyOn, ReturnAfter, Stubborn,
};

/// What fake components did, in order.
#[derive(Clone, Debug, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

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

enum Behavior {
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

struct Fake {
    name: &'static str,
    log: Log,
    behavior: Behavior,
}

fn fake(name: &'static str, log: &Log, behavior: Behavior) -> Box<dyn Component> {
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
const STARTUP_TIMEOUT: Option<Duration> = Some(Duration::from_secs(30));

fn settings() -> SupervisorSettings {
    SupervisorSettings {
        stall_timeout: Duration::from_secs(10),
        grace_period: Duration::from_secs(5),
    }
}

/// Stages of fakes in start order: each a stage name and its fakes' names
/// and behaviours.
type FakeStages = Vec<(&'static str, Vec<(&'static str, Behavior)>)>;

fn add_fake_stages(supervisor: &mut Supervisor, log: &Log, stages: FakeStages) {
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
fn supervisor_of_fakes(log: &Log, stages: FakeStages) -> Supervisor {
    let mut supervisor = Supervisor::new(settings(), Health::default(), Bus::default());
    add_fake_stages(&mut supervisor, log, stages);
    supervisor
}

struct Running {
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

fn start(supervisor: Supervisor) -> Running {
    let (shutdown, requested) = oneshot::channel::<()>();
    let task = tokio::spawn(supervisor.run(async move {
        let _ = requested.await;
    }));
    Running { shutdown, task }
}

/// Lets every task run until all of them wait (the clock is paused, so
/// this takes no real time).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn events(subscription: &mut Subscription) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(delivery) = subscription.try_recv() {
        if let Delivery::Event(envelope) = delivery {
            events.push(envelope.event.clone());
        }
    }
    events
}

fn check(checks: &[CheckResult], name: &str) -> Result<(), String> {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name} in {checks:?}"))
        .status
        .clone()
}

fn assert_shutting_down(health: &Health) {
    assert_eq!(
        check(&health.readiness(), SHUTDOWN_CHECK),
        Err("shutting down".to_string())
    );
}

fn assert_component_failed(error: &SupervisorError, component: &str, message: &str) {
    match error {
        SupervisorError::ComponentFailed { name, error } => {
            assert_eq!(name, component);
            assert_eq!(error.to_string(), message);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn stages_start_in_order_and_stop_in_reverse() {
    let log = Log::default();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("one", vec![("a", Normal), ("b", Normal)]),
            ("two", vec![("c", Normal)]),
            ("three", vec![("d", Normal)]),
        ],
    );

    let running = start(supervisor);
    settle().await;
    assert!(log.position("start:a").max(log.position("start:b")) < log.position("start:c"));
    assert!(log.position("start:c") < log.position("start:d"));

    running.stop().await.unwrap();
    assert!(log.position("stop:d") < log.position("stop:c"));
    assert!(log.position("stop:c") < log.position("stop:a").min(log.position("stop:b")));
}

#[tokio::test(start_paused = true)]
async fn a_stage_waits_for_the_previous_one_to_be_ready() {
    let log = Log::default();
    let (make_ready, ready) = oneshot::channel();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("index", vec![("watchers", ReadyOn(ready))]),
            ("webhook", vec![("webhook", Normal)]),
        ],
    );

    let running = start(supervisor);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(log.entries(), ["start:watchers"]);

    make_ready.send(()).unwrap();
    settle().await;
    assert!(log.contains("start:webhook"));
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_stage_not_ready_in_time_fails_startup() {
    let log = Log::default();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("index", vec![("watchers", Normal), ("sync", NeverReady)]),
            ("webhook", vec![("webhook", Normal)]),
        ],
    );

    let started = Instant::now();
    let running = start(supervisor);
    let error = running.failure().await;
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    match &error {
        SupervisorError::StartupTimeout { stage, waiting, .. } => {
            assert_eq!(stage, "index");
            assert_eq!(waiting, &[("sync".into(), "sync waits forever".into())]);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        "stage \"index\" was not ready within 30s: still waiting for \"sync\" (sync waits forever)"
    );
    assert!(!log.contains("start:webhook"));
    assert!(log.contains("stop:watchers"));
}

#[tokio::test(start_paused = true)]
async fn components_that_do_not_stop_within_the_grace_period_are_reported() {
    let log = Log::default();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("base", vec![("admin", Normal)]),
            ("work", vec![("polite", Normal), ("stubborn", Stubborn)]),
        ],
    );

    let running = start(supervisor);
    settle().await;
    let stopping = Instant::now();
    let error = running.stop().await.unwrap_err();
    assert_eq!(stopping.elapsed(), Duration::from_secs(5));
    match &error {
        SupervisorError::ShutdownTimeout { components, .. } => {
            assert_eq!(components, &["stubborn".to_string()]);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        "components did not stop within the grace period of 5s and were aborted: \"stubborn\""
    );
    assert!(log.contains("stop:polite"));
    assert!(
        !log.contains("stop:admin"),
        "the stage after the stuck one is never reached"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_component_stops_everything_in_reverse_order() {
    let log = Log::default();
    let health = Health::default();
    let bus = Bus::default();
    let mut events_seen = bus.subscribe("test");
    let mut supervisor = Supervisor::new(settings(), health.clone(), bus);
    add_fake_stages(
        &mut supervisor,
        &log,
        vec![
            ("one", vec![("a", Normal)]),
            (
                "two",
                vec![("b", Normal), ("bad", FailAfter(Duration::from_secs(3)))],
            ),
            ("three", vec![("c", Normal)]),
        ],
    );

    let running = start(supervisor);
    // No shutdown is requested: the failure alone ends the run.
    let error = running.failure().await;
    assert_component_failed(&error, "bad", "boom");
    assert_eq!(error.to_string(), "component \"bad\" failed: boom");
    assert!(log.position("stop:c") < log.position("stop:b"));
    assert!(log.position("stop:b") < log.position("stop:a"));
    assert!(events(&mut events_seen).contains(&Event::ShutdownRequested));
    assert_shutting_down(&health);
}

#[tokio::test(start_paused = true)]
async fn a_component_returning_early_is_a_failure() {
    let log = Log::default();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("one", vec![("a", Normal)]),
            (
                "two",
                vec![("quitter", ReturnAfter(Duration::from_secs(1)))],
            ),
        ],
    );

    let error = start(supervisor).failure().await;
    assert_eq!(
        error.to_string(),
        "component \"quitter\" failed: stopped before it was asked to"
    );
    assert!(log.contains("stop:a"));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_component_stops_everything() {
    let log = Log::default();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("one", vec![("a", Normal)]),
            (
                "two",
                vec![
                    ("b", Normal),
                    ("crasher", PanicAfter(Duration::from_secs(2))),
                ],
            ),
        ],
    );

    let error = start(supervisor).failure().await;
    assert_component_failed(&error, "crasher", "panicked: kaboom");
    assert!(log.position("stop:b") < log.position("stop:a"));
}

#[tokio::test(start_paused = true)]
async fn a_failure_during_startup_stops_the_started_stages() {
    let log = Log::default();
    let (_never, ready) = oneshot::channel();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("one", vec![("a", Normal)]),
            (
                "two",
                vec![
                    ("waiting", ReadyOn(ready)),
                    ("bad", FailAfter(Duration::from_secs(1))),
                ],
            ),
            ("three", vec![("c", Normal)]),
        ],
    );

    let error = start(supervisor).failure().await;
    assert_eq!(error.to_string(), "component \"bad\" failed: boom");
    assert!(!log.contains("start:c"));
    assert!(log.contains("stop:waiting"));
    assert!(log.contains("stop:a"));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_component_fails_its_liveness_check_until_it_finishes() {
    let log = Log::default();
    let health = Health::default();
    let (finish, done) = oneshot::channel();
    let mut registry = Registry::with_prefix("poolkeeper");
    let mut supervisor = Supervisor::new(settings(), health.clone(), Bus::default());
    supervisor.register_metrics(&mut registry);
    supervisor
        .stage("one", STARTUP_TIMEOUT)
        .add(fake("slowpoke", &log, BusyUntil(done)))
        .add(fake("fine", &log, Normal));

    let running = start(supervisor);
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(check(&health.liveness(), "slowpoke"), Ok(()));

    tokio::time::sleep(Duration::from_secs(5)).await;
    let reason = check(&health.liveness(), "slowpoke").unwrap_err();
    assert!(
        reason.starts_with("stalled: handling event for 1"),
        "{reason}"
    );
    assert_eq!(check(&health.liveness(), "fine"), Ok(()));
    assert!(metrics(&registry).contains("poolkeeper_component_stalled{component=\"slowpoke\"} 1"));

    finish.send(()).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(check(&health.liveness(), "slowpoke"), Ok(()));
    assert!(metrics(&registry).contains("poolkeeper_component_stalled{component=\"slowpoke\"} 0"));
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_turns_readiness_off_and_is_announced() {
    let log = Log::default();
    let health = Health::default();
    let bus = Bus::default();
    let mut events_seen = bus.subscribe("test");
    let mut supervisor = Supervisor::new(settings(), health.clone(), bus);
    supervisor
        .stage("one", STARTUP_TIMEOUT)
        .add(fake("a", &log, Normal));

    let running = start(supervisor);
    settle().await;
    assert_eq!(check(&health.readiness(), SHUTDOWN_CHECK), Ok(()));
    assert!(events(&mut events_seen).is_empty());

    running.stop().await.unwrap();
    assert_eq!(events(&mut events_seen), [Event::ShutdownRequested]);
    assert_shutting_down(&health);
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_startup_stops_what_started() {
    let log = Log::default();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![
            ("one", vec![("a", Normal)]),
            ("two", vec![("slow", NeverReady)]),
            ("three", vec![("c", Normal)]),
        ],
    );

    let running = start(supervisor);
    tokio::time::sleep(Duration::from_secs(5)).await;
    running.stop().await.unwrap();
    assert_eq!(
        log.entries(),
        ["start:a", "start:slow", "stop:slow", "stop:a"]
    );
}

#[tokio::test(start_paused = true)]
async fn component_names_must_be_unique() {
    let log = Log::default();
    let supervisor = supervisor_of_fakes(
        &log,
        vec![("one", vec![("a", Normal)]), ("two", vec![("a", Normal)])],
    );
    let error = start(supervisor).failure().await;
    assert_eq!(
        error.to_string(),
        "component name \"a\" is used more than once"
    );
    assert!(log.entries().is_empty());
}

fn metrics(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// Reports whatever the test sends; logs its release.
struct FakeElector {
    leadership: mpsc::UnboundedReceiver<bool>,
    log: Log,
}

impl LeaderElector for FakeElector {
    fn campaign(
        mut self: Box<Self>,
        mut reporter: LeadershipReporter,
        stop: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    Some(leader) = self.leadership.recv() => reporter.set(leader),
                }
            }
            reporter.set(false);
            self.log.push("released".to_string());
            Ok(())
        })
    }
}

/// A [`FakeElector`] and the sender that reports its leadership.
fn fake_elector(log: &Log) -> (mpsc::UnboundedSender<bool>, Box<dyn LeaderElector>) {
    let (leadership, elected) = mpsc::unbounded_channel();
    let elector = FakeElector {
        leadership: elected,
        log: log.clone(),
    };
    (leadership, Box::new(elector))
}

/// A gate named "leader-election" whose factory builds a fresh fake per name
/// in `workers`, each behaving as `behavior` returns, and counts its builds.
fn leader_gate(
    elector: Option<Box<dyn LeaderElector>>,
    bus: Bus,
    log: &Log,
    workers: &'static [&'static str],
    behavior: fn() -> Behavior,
) -> (LeaderGated, Arc<AtomicUsize>) {
    let built = Arc::new(AtomicUsize::new(0));
    let factory_built = built.clone();
    let factory_log = log.clone();
    let stop_timeout = Duration::from_secs(3);
    let gated = LeaderGated::new("leader-election", elector, bus, stop_timeout, move || {
        factory_built.fetch_add(1, Ordering::SeqCst);
        workers
            .iter()
            .map(|name| fake(name, &factory_log, behavior()))
            .collect()
    });
    (gated, built)
}

struct Gating {
    log: Log,
    health: Health,
    built: Arc<AtomicUsize>,
    events: Subscription,
    running: Running,
}

fn gated_supervisor(elector: Option<Box<dyn LeaderElector>>, log: &Log) -> Gating {
    let bus = Bus::default();
    let events = bus.subscribe("test");
    let (gated, built) = leader_gate(
        elector,
        bus.clone(),
        log,
        &["reconciler", "executor"],
        || Normal,
    );
    let health = Health::default();
    let mut supervisor = Supervisor::new(settings(), health.clone(), bus);
    supervisor
        .stage("base", STARTUP_TIMEOUT)
        .add(fake("webhook", log, Normal));
    supervisor
        .stage("leader", STARTUP_TIMEOUT)
        .add(Box::new(gated));
    Gating {
        log: log.clone(),
        health,
        built,
        events,
        running: start(supervisor),
    }
}

fn count(log: &Log, entry: &str) -> usize {
    log.entries().iter().filter(|e| *e == entry).count()
}

#[tokio::test(start_paused = true)]
async fn leader_only_components_follow_leadership() {
    let log = Log::default();
    let (leadership, elector) = fake_elector(&log);
    let mut gating = gated_supervisor(Some(elector), &log);
    settle().await;
    assert_eq!(
        gating.log.entries(),
        ["start:webhook"],
        "followers run no leader-only component"
    );

    leadership.send(true).unwrap();
    settle().await;
    assert_eq!(count(&log, "start:reconciler"), 1);
    assert_eq!(count(&log, "start:executor"), 1);
    assert_eq!(
        events(&mut gating.events),
        [Event::LeadershipChanged { leader: true }]
    );

    leadership.send(false).unwrap();
    settle().await;
    assert_eq!(count(&log, "stop:reconciler"), 1);
    assert_eq!(count(&log, "stop:executor"), 1);
    assert_eq!(
        events(&mut gating.events),
        [Event::LeadershipChanged { leader: false }]
    );
    assert!(
        !log.contains("stop:webhook"),
        "losing the lease is no reason to stop"
    );

    leadership.send(true).unwrap();
    settle().await;
    assert_eq!(
        count(&log, "start:reconciler"),
        2,
        "fresh instances on a new win"
    );
    assert_eq!(gating.built.load(Ordering::SeqCst), 2);
    assert_eq!(
        events(&mut gating.events),
        [Event::LeadershipChanged { leader: true }]
    );

    gating.running.stop().await.unwrap();
    let entries = log.entries();
    let last_worker_stop = entries
        .iter()
        .rposition(|e| e == "stop:reconciler" || e == "stop:executor")
        .unwrap();
    assert!(
        last_worker_stop < log.position("released"),
        "the lease is released last: {entries:?}"
    );
    assert!(log.position("released") < log.position("stop:webhook"));
    assert_eq!(
        events(&mut gating.events),
        [
            Event::ShutdownRequested,
            Event::LeadershipChanged { leader: false }
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn without_election_leader_only_components_just_run() {
    let log = Log::default();
    let mut gating = gated_supervisor(None, &log);
    settle().await;
    assert!(log.contains("start:reconciler"));
    assert!(log.contains("start:executor"));
    assert_eq!(
        events(&mut gating.events),
        [Event::LeadershipChanged { leader: true }]
    );
    let liveness = gating.health.liveness();
    assert_eq!(
        check(&liveness, "executor"),
        Ok(()),
        "leader-only components are watched too"
    );
    assert_eq!(check(&liveness, "leader-election"), Ok(()));
    gating.running.stop().await.unwrap();
    assert!(log.position("stop:executor") < log.position("stop:webhook"));
}

#[tokio::test(start_paused = true)]
async fn a_failing_leader_only_component_fails_the_process() {
    let log = Log::default();
    let bus = Bus::default();
    let (gated, _) = leader_gate(None, bus.clone(), &log, &["executor"], || {
        FailAfter(Duration::from_secs(1))
    });
    let mut supervisor = Supervisor::new(settings(), Health::default(), bus);
    supervisor
        .stage("base", STARTUP_TIMEOUT)
        .add(fake("webhook", &log, Normal));
    supervisor
        .stage("leader", STARTUP_TIMEOUT)
        .add(Box::new(gated));

    let error = start(supervisor).failure().await;
    assert_eq!(
        error.to_string(),
        "component \"leader-election\" failed: component \"executor\" failed: boom"
    );
    assert!(log.contains("stop:webhook"));
}

#[tokio::test(start_paused = true)]
async fn leader_only_components_that_ignore_the_loss_are_aborted() {
    let log = Log::default();
    let (leadership, elector) = fake_elector(&log);
    let bus = Bus::default();
    let (gated, _) = leader_gate(Some(elector), bus.clone(), &log, &["executor"], || Stubborn);
    let mut supervisor = Supervisor::new(settings(), Health::default(), bus);
    supervisor
        .stage("leader", STARTUP_TIMEOUT)
        .add(Box::new(gated));
    let running = start(supervisor);

    leadership.send(true).unwrap();
    settle().await;
    let lost = Instant::now();
    leadership.send(false).unwrap();
    leadership.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        count(&log, "start:executor"),
        2,
        "restarted after the stuck one was aborted"
    );
    assert!(lost.elapsed() >= Duration::from_secs(3));
    let error = running.stop().await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "component \"leader-election\" failed: components did not stop within the grace period of 3s and were aborted: \"executor\""
    );
    assert!(log.contains("released"));
}

/// At shutdown the gated components are cancelled together with the gate
/// (their tokens are children of its token). One of them may end before the
/// gate notices its own cancellation; that clean stop is no failure. Each
/// round leaves the gate unpolled until the component has ended, so both
/// of its select branches are ready at once.
#[tokio::test(start_paused = true)]
async fn a_leader_only_component_stopping_with_the_gate_is_no_failure() {
    for round in 0..32 {
        let log = Log::default();
        let (gated, _) = leader_gate(None, Bus::default(), &log, &["executor"], || Normal);
        let cancel = CancellationToken::new();
        let (ready, _) = tokio::sync::watch::channel(Readiness::Waiting("starting".into()));
        let mut run = Box::new(gated).run(Context::new(cancel.clone(), Activity::default(), ready));
        tokio::select! {
            result = &mut run => panic!("the gate ended on its own: {result:?}"),
            () = settle() => {}
        }
        assert!(log.contains("start:executor"), "round {round}");
        cancel.cancel();
        settle().await;
        assert!(log.contains("stop:executor"), "round {round}");
        let result = run.await;
        assert!(result.is_ok(), "round {round}: {result:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn readiness_checks_follow_what_components_report() {
    let log = Log::default();
    let health = Health::default();
    let (make_ready, ready) = oneshot::channel();
    let mut supervisor = Supervisor::new(settings(), health.clone(), Bus::default());
    supervisor
        .stage("one", STARTUP_TIMEOUT)
        .add(fake("quiet-admin", &log, Normal))
        .add(fake("index", &log, ReadyOn(ready)));
    supervisor
        .stage("two", STARTUP_TIMEOUT)
        .add(fake("never", &log, NeverReady));
    let running = start(supervisor);
    settle().await;

    let names: Vec<String> = health.readiness().into_iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        ["index", "never", SHUTDOWN_CHECK],
        "opted-out components have no check"
    );
    assert_eq!(check(&health.readiness(), "index"), Err("starting".into()));
    assert_eq!(
        check(&health.readiness(), "never"),
        Err("stage \"two\" has not started yet".into())
    );

    make_ready.send(()).unwrap();
    settle().await;
    assert_eq!(check(&health.readiness(), "index"), Ok(()));
    assert_eq!(
        check(&health.readiness(), "never"),
        Err("never waits forever".into()),
        "the reason a component gives is its check's"
    );
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn waiting_for_after_ready_changes_nothing() {
    let health = Health::default();
    let mut tasks = crate::tasks::Tasks::default();
    struct Flip;
    impl Component for Flip {
        fn name(&self) -> &'static str {
            "flip"
        }
        fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
            Box::pin(async move {
                ctx.waiting_for("a certificate");
                ctx.mark_ready();
                ctx.waiting_for("something else");
                ctx.cancelled().await;
                Ok(())
            })
        }
    }
    let token = CancellationToken::new();
    let spawned = tasks.spawn(Box::new(Flip), token.clone(), None, Some(&health));
    settle().await;
    assert_eq!(*spawned.readiness.borrow(), Readiness::Ready);
    assert_eq!(check(&health.readiness(), "flip"), Ok(()));
    token.cancel();
    assert!(tasks.next().await.into_failure().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_drained_component_keeps_running_for_its_delay_after_shutdown() {
    let log = Log::default();
    let health = Health::default();
    let mut supervisor = Supervisor::new(settings(), health.clone(), Bus::default());
    supervisor
        .stage("base", STARTUP_TIMEOUT)
        .add(fake("watchers", &log, Normal));
    supervisor
        .stage("serve", STARTUP_TIMEOUT)
        .add(Box::new(Drained::new(
            fake("webhook", &log, Normal),
            Duration::from_secs(3),
        )));
    let running = start(supervisor);
    settle().await;

    let started = Instant::now();
    let stopped = tokio::spawn(running.stop());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_shutting_down(&health);
    assert!(
        !log.contains("stop:webhook"),
        "still serving while draining"
    );
    assert!(
        !log.contains("stop:watchers"),
        "what it needs keeps running too"
    );
    stopped.await.unwrap().unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert!(log.position("stop:webhook") < log.position("stop:watchers"));
}
