use super::*;

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

#[test]
fn a_description_details_its_check_or_stands_as_a_passing_line_of_its_own() {
    let health = Health::default();
    let gate = health.readiness_gate("webhook", "no certificate");
    health.describe("webhook", "leaf serial 1f");
    health.describe("reports", "openreports.io/v1alpha1 is not served");
    health.describe("reports", "writing Reports");

    let readiness = health.readiness();
    let lines: Vec<_> = readiness
        .iter()
        .map(|c| (c.name.as_str(), c.status.clone(), c.detail.as_deref()))
        .collect();
    assert_eq!(
        lines,
        [
            ("reports", Ok(()), Some("writing Reports")),
            (
                "webhook",
                Err("no certificate".into()),
                Some("leaf serial 1f")
            ),
        ]
    );
    gate.pass();
    assert_eq!(check(&health.readiness(), "webhook"), Ok(()));
    assert!(health.liveness().iter().all(|c| c.detail.is_none()));
}
