//! Only a leader writes, and only within its term; after shutdown is
//! requested nothing starts.

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

/// A leader frozen past its term (the paused clock runs on as it would
/// through a SIGSTOP) sends nothing on resume; a renewal lets it write again.
#[tokio::test(start_paused = true)]
async fn no_write_is_sent_past_the_term() {
    let term = LeaderTerm::new();
    let start = Instant::now();
    term.confirm(1, start + secs(10));
    let setup = Setup {
        term: Some(term.clone()),
        ..Setup::default()
    };
    let h = Harness::start_with(
        &[class("a", &[]), class("b", &[])],
        &[machine("m1", "a")],
        setup,
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(30)).await;
    assert_eq!(h.calls(), [(ms(0), "a".into(), Answer::Accepted)]);

    h.apply(ResourceKind::Machine, machine("m2", "b"));
    h.trigger(TriggerReason::Debounced);
    h.at(secs(31)).await;
    assert_eq!(h.calls().len(), 1, "past the term no write is sent");
    assert!(
        h.reconciled()
            .iter()
            .any(|(_, class, outcome, _)| class == "b" && *outcome == ClassOutcome::Error),
        "the refused write is an error: {:?}",
        h.reconciled()
    );

    term.confirm(1, Instant::now() + secs(10));
    h.at(secs(31) + SHORT).await;
    assert_eq!(
        h.calls().last(),
        Some(&(secs(30) + SHORT, "b".into(), Answer::Accepted)),
        "renewed, the retry writes"
    );
    h.stop().await;
}

/// A write that hangs is given up when the term ends, not after the
/// (longer) write timeout.
#[tokio::test(start_paused = true)]
async fn a_hanging_write_is_given_up_at_the_term_end() {
    let term = LeaderTerm::new();
    term.confirm(1, Instant::now() + secs(3));
    let setup = Setup {
        term: Some(term.clone()),
        ..Setup::default()
    };
    let h = Harness::start_with(&[class("a", &[])], &[machine("m1", "a")], setup);
    h.fake.hang(&key("a"));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(4)).await;
    assert_eq!(
        h.reconciled()
            .into_iter()
            .map(|(at, class, outcome, _)| (at, class, outcome))
            .collect::<Vec<_>>(),
        [(secs(3), "a".into(), ClassOutcome::Error)]
    );
    h.stop().await;
}
