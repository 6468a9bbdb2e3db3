use super::*;

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
