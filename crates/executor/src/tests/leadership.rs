//! Only a leader writes; after shutdown is requested nothing starts.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_follower_does_not_write_until_it_leads_again() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.bus.publish(Event::LeadershipChanged { leader: false });
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(100)).await;
    assert_eq!(h.passes(), 0);
    h.bus.publish(Event::LeadershipChanged { leader: true });
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(200)).await;
    assert_eq!(h.passes(), 1);
    assert_eq!(h.calls(), [(ms(100), "a".into(), Answer::Accepted)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn losing_leadership_mid_pass_stops_writing() {
    let h = Harness::start(
        &[class("a", &[]), class("b", &[])],
        &[machine("m1", "a"), machine("m2", "b")],
    );
    h.fake.set_latency(secs(1));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(500)).await;
    h.bus.publish(Event::LeadershipChanged { leader: false });
    h.at(LONG * 2).await;
    assert!(h.calls().is_empty(), "the writes in flight were abandoned");
    assert!(h.reconciled().is_empty(), "and nothing was requeued");
    assert_eq!(h.passes(), 1);
    assert_eq!(
        h.count(|e| matches!(e, Event::ReconciliationCompleted { .. })),
        0,
        "the dropped pass does not complete"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn after_shutdown_is_requested_no_pass_starts() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.bus.publish(Event::ShutdownRequested);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(100)).await;
    assert_eq!(h.passes(), 0);
    assert!(!h.running.is_finished(), "runs until cancelled");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_executor_is_ready_at_once() {
    let mut h = Harness::start(&[], &[]);
    h.running.wait_ready(secs(1)).await;
    assert_eq!(
        h.start.elapsed(),
        Duration::ZERO,
        "without waiting for anything"
    );
    assert_eq!(h.running.waiting_reason(), None);
    h.stop().await;
}
