use super::*;

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
