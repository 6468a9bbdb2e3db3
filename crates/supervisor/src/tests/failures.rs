use super::*;

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
