//! The component on a paused clock: rounds every interval, the bus event,
//! and each Pod and reason marked first found once (the recorder's Warning).

use std::sync::atomic::Ordering;
use std::time::Duration;

use poolkeeper_bus::{AuditViolation, Bus, Event};
use poolkeeper_index::IndexResource;
use poolkeeper_supervisor::testing::{BusRecorder, spawn};
use serde_json::json;

use super::{FakePods, cluster, k8s_node, on, pod, policy, settings};
use crate::{Audit, AuditSettings};

const INTERVAL: Duration = Duration::from_secs(60);

struct Setup {
    bus: Bus,
    recorder: BusRecorder,
    lister: FakePods,
    index: std::sync::Arc<poolkeeper_index::Index>,
    settings: AuditSettings,
}

fn setup() -> Setup {
    let mut settings = settings();
    settings.interval = INTERVAL;
    let bus = Bus::new(64);
    let recorder = BusRecorder::new(&bus);
    bus.start();
    Setup {
        index: cluster(),
        bus,
        recorder,
        lister: FakePods::new(vec![
            pod("shop-hangzhou", "in", json!({}), on("hz-1")),
            pod("shop-hangzhou", "out", json!({}), on("bj-1")),
        ]),
        settings,
    }
}

fn audit(s: &Setup) -> Box<Audit> {
    Box::new(Audit::with_lister(
        s.settings.clone(),
        &s.bus,
        s.lister.clone(),
        s.index.clone(),
        policy(),
    ))
}

fn is_round(event: &Event) -> bool {
    matches!(event, Event::AuditCompleted { .. })
}

/// Waits (on the paused clock) until `n` rounds were published.
async fn rounds(recorder: &BusRecorder, n: usize) -> Vec<(Duration, Event)> {
    while recorder.count(is_round) < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    recorder
        .timed()
        .into_iter()
        .filter(|(_, event)| is_round(event))
        .collect()
}

fn violations(event: &Event) -> Vec<String> {
    match event {
        Event::AuditCompleted { violations, .. } => violations
            .iter()
            .map(|v| format!("{}/{}", v.namespace, v.pod))
            .collect(),
        other => panic!("not a round: {other:?}"),
    }
}

/// Every violation published as first found, over all rounds so far.
fn first_found(recorder: &BusRecorder) -> Vec<AuditViolation> {
    recorder
        .events()
        .into_iter()
        .flat_map(|event| match event {
            Event::AuditCompleted { violations, .. } => violations,
            _ => Vec::new(),
        })
        .filter(|v| v.first_found)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_round_at_once_then_every_interval() {
    let s = setup();
    let mut running = spawn(audit(&s));
    running.wait_ready(Duration::from_secs(1)).await;
    let timed = rounds(&s.recorder, 3).await;
    let at: Vec<u64> = timed.iter().map(|(t, _)| t.as_secs()).collect();
    assert_eq!(at, [0, 60, 120]);
    match &timed[0].1 {
        Event::AuditCompleted {
            pods,
            counts,
            truncated,
            ..
        } => {
            assert_eq!(*pods, 1, "the Pod on its pool's Node is left out");
            assert_eq!(counts.len(), 1);
            assert_eq!(counts[0].pods, 1);
            assert_eq!(counts[0].reason, "outside_pool");
            assert!(!truncated);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(violations(&timed[2].1), ["shop-hangzhou/out"]);
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn one_warning_per_pod_and_reason_until_it_is_gone() {
    let s = setup();
    let running = spawn(audit(&s));
    rounds(&s.recorder, 3).await;
    let found = first_found(&s.recorder);
    assert_eq!(found.len(), 1, "three rounds, first found once: {found:?}");
    let out = &found[0];
    assert_eq!(
        (out.namespace.as_str(), out.pod.as_str(), out.reason),
        ("shop-hangzhou", "out", "outside_pool")
    );
    assert_eq!(out.uid, "uid-out");
    assert_eq!((out.kind, out.api_version), ("Pod", "v1"));
    assert_eq!(out.mode, poolkeeper_bus::Mode::Enforce);
    assert!(
        out.message.contains("runs on node \"bj-1\""),
        "{}",
        out.message
    );

    // The Pod goes away: forgotten. A new Pod of the same name is another
    // Pod and is warned about again.
    s.lister.pods.lock().retain(|pod| pod.name != "out");
    rounds(&s.recorder, 4).await;
    let mut again = pod("shop-hangzhou", "out", json!({}), on("free-1"));
    again.uid = "uid-out-2".to_owned();
    s.lister.pods.lock().push(again);
    rounds(&s.recorder, 6).await;
    let found = first_found(&s.recorder);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[1].uid, "uid-out-2");
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_node_moved_to_another_pool_makes_its_pods_violations_next_round() {
    let s = setup();
    let running = spawn(audit(&s));
    let first = rounds(&s.recorder, 1).await;
    assert_eq!(violations(&first[0].1), ["shop-hangzhou/out"]);
    s.index.apply(k8s_node("hz-1", Some("beijing")));
    let timed = rounds(&s.recorder, 2).await;
    assert_eq!(timed[1].0, INTERVAL);
    assert_eq!(
        violations(&timed[1].1),
        ["shop-hangzhou/in", "shop-hangzhou/out"]
    );
    assert_eq!(first_found(&s.recorder).len(), 2);
    // Back in its pool, then out again: first found again.
    s.index.apply(k8s_node("hz-1", Some("hangzhou")));
    rounds(&s.recorder, 3).await;
    s.index.apply(k8s_node("hz-1", Some("beijing")));
    rounds(&s.recorder, 4).await;
    assert_eq!(first_found(&s.recorder).len(), 3);
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_round_publishes_nothing_and_the_next_retries() {
    let s = setup();
    s.lister.failing.store(true, Ordering::SeqCst);
    let running = spawn(audit(&s));
    tokio::time::sleep(INTERVAL + Duration::from_secs(1)).await;
    assert_eq!(s.recorder.count(is_round), 0);
    assert!(s.lister.calls.lock().len() >= 2, "two rounds tried");
    s.lister.failing.store(false, Ordering::SeqCst);
    let timed = rounds(&s.recorder, 1).await;
    assert_eq!(timed[0].0, INTERVAL * 2);
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_interval_of_zero_turns_it_off() {
    let mut s = setup();
    s.settings.interval = Duration::ZERO;
    assert!(!s.settings.enabled());
    let mut running = spawn(audit(&s));
    running.wait_ready(Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(s.recorder.count(is_round), 0);
    assert!(s.lister.calls.lock().is_empty());
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn is_ready_at_once_and_has_no_readiness_check() {
    use poolkeeper_supervisor::Component;
    let s = setup();
    let component = audit(&s);
    assert_eq!(component.name(), "audit");
    assert_eq!(component.readiness_check(), None);
    let mut running = spawn(component);
    running.wait_ready(Duration::from_millis(1)).await;
    running.stop().await.unwrap();
}
