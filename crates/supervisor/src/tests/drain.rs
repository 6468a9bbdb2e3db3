use super::*;

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
