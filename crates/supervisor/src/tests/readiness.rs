use super::*;

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
