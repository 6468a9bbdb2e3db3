//! Requeues: after conflicts, failures, timeouts, and the periodic re-check.

use super::*;
use crate::fake::status;

#[tokio::test(start_paused = true)]
async fn a_conflict_is_retried_after_conflict_retry_and_converges() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    // Someone else wrote the class; the index has not seen it yet.
    let mut newer = class("a", &["example.com/other"]);
    newer.metadata.resource_version = Some("2".into());
    h.fake.insert(&newer);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(50)).await;
    // The watch catches up before the retry.
    h.index.apply(newer);
    h.at(ms(1_000)).await;
    assert_eq!(
        h.calls(),
        [
            (ms(0), "a".into(), Answer::Conflict),
            (CONFLICT, "a".into(), Answer::Accepted)
        ]
    );
    assert_eq!(
        h.fake.finalizers(&key("a")),
        Some(vec!["example.com/other".into(), FINALIZER.into()])
    );
    assert_eq!(h.fake.resource_version(&key("a")), Some("3".into()));
    let outcomes: Vec<_> = h
        .reconciled()
        .into_iter()
        .map(|r| (r.0, r.2, r.3))
        .collect();
    assert_eq!(
        outcomes,
        [
            (ms(0), ClassOutcome::Conflict, CONFLICT),
            (CONFLICT, ClassOutcome::FinalizerAdded, LONG)
        ]
    );
    // Machines are enqueued once, when the finalizer is in place.
    assert_eq!(
        h.enqueued(),
        [("a".into(), EnqueueReason::FinalizerAdded, 1)]
    );
    assert_eq!(h.writes(), 1);
    assert_eq!(
        h.count(|e| matches!(e, Event::ReconciliationCompleted { failed: 0, .. })),
        2,
        "a conflict is no failure"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_api_error_is_retried_after_short_retry() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.fake
        .answer_next(&key("a"), status(500, "InternalError", "etcd unavailable"));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(SHORT + ms(10)).await;
    assert_eq!(
        h.calls(),
        [
            (ms(0), "a".into(), Answer::Failed),
            (SHORT, "a".into(), Answer::Accepted)
        ]
    );
    let outcomes: Vec<_> = h
        .reconciled()
        .into_iter()
        .map(|r| (r.0, r.2, r.3))
        .collect();
    assert_eq!(
        outcomes,
        [
            (ms(0), ClassOutcome::Error, SHORT),
            (SHORT, ClassOutcome::FinalizerAdded, LONG)
        ]
    );
    let completed: Vec<_> = h
        .recorder
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ReconciliationCompleted {
                pass,
                writes,
                failed,
                ..
            } => Some((pass, writes, failed)),
            _ => None,
        })
        .collect();
    assert_eq!(
        completed,
        [(1, 0, 1), (2, 1, 0)],
        "the failed pass completes with its failure counted"
    );
    assert_eq!(
        h.enqueued(),
        [("a".into(), EnqueueReason::FinalizerAdded, 1)],
        "nothing is enqueued for the failed write"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_without_answer_times_out_and_is_retried() {
    let mut setup = Setup::default();
    setup.settings.write_timeout = secs(1);
    let h = Harness::start_with(&[class("a", &[])], &[machine("m1", "a")], setup);
    h.fake.set_latency(secs(3600));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(2)).await;
    assert_eq!(
        h.reconciled(),
        [(secs(1), "a".into(), ClassOutcome::Error, SHORT)]
    );
    assert_eq!(
        h.count(|e| matches!(e, Event::ReconciliationCompleted { failed: 1, .. })),
        1
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_that_finds_no_class_is_checked_again_soon() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    // The API server lost the class; the index has not seen the deletion.
    h.fake.answer_next(
        &key("a"),
        status(404, "NotFound", "machineclasses \"a\" not found"),
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(h.calls(), [(ms(0), "a".into(), Answer::NotFound)]);
    assert_eq!(
        h.reconciled(),
        [(ms(0), "a".into(), ClassOutcome::Gone, SHORT)]
    );
    assert!(h.enqueued().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_long_retry_requeue_fires_a_pass_for_that_key() {
    let h = Harness::start(
        &[class("a", &[FINALIZER]), class("b", &[])],
        &[machine("m1", "a")],
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(h.passes(), 1);
    // Only "b" changes later, so only "b" is rescheduled.
    h.at(secs(60)).await;
    let mut b = class("b", &["example.com/other"]);
    b.metadata.resource_version = Some("2".into());
    h.fake.insert(&b);
    h.apply(ResourceKind::MachineClass, b);
    h.trigger(TriggerReason::Debounced);
    h.at(LONG + ms(10)).await;
    let passes: Vec<_> = h
        .events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::ReconciliationStarted { keys, .. } => Some((at, keys)),
            _ => None,
        })
        .collect();
    assert_eq!(
        passes,
        [
            (ms(0), 2),
            (secs(60), 1),
            // "a" is due after its long retry; "b" was rescheduled at 60 s.
            (LONG, 1)
        ]
    );
    let last = h.reconciled().pop().unwrap();
    assert_eq!(last, (LONG, "a".into(), ClassOutcome::Unchanged, LONG));
    h.at(LONG + secs(60) + ms(10)).await;
    let last = h.reconciled().pop().unwrap();
    assert_eq!(
        last,
        (LONG + secs(60), "b".into(), ClassOutcome::Unused, LONG)
    );
    h.stop().await;
}
