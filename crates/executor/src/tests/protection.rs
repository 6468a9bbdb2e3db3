//! What a pass does to MachineClasses and their Machines.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_class_in_use_gets_the_finalizer_and_its_machines_are_enqueued() {
    let h = Harness::start(
        &[class("a", &[])],
        &[machine("m1", "a"), machine("m2", "a")],
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(
        h.fake.finalizers(&key("a")),
        Some(vec![FINALIZER.to_owned()])
    );
    assert_eq!(h.calls(), [(ms(0), "a".into(), Answer::Accepted)]);
    // One event for the class, counting its Machines.
    assert_eq!(
        h.enqueued(),
        [("a".into(), EnqueueReason::FinalizerAdded, 2)]
    );
    assert_eq!(
        h.reconciled(),
        [(ms(0), "a".into(), ClassOutcome::FinalizerAdded, LONG)]
    );
    let passes: Vec<_> = h
        .recorder
        .events()
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                Event::ReconciliationStarted { .. } | Event::ReconciliationCompleted { .. }
            )
        })
        .collect();
    assert_eq!(
        passes,
        [
            Event::ReconciliationStarted { pass: 1, keys: 1 },
            Event::ReconciliationCompleted {
                pass: 1,
                duration: Duration::ZERO,
                writes: 1,
                failed: 0,
            }
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn in_steady_state_a_second_pass_writes_and_enqueues_nothing() {
    let h = Harness::start(
        &[
            class("a", &[]),
            class("b", &["example.com/other", FINALIZER]),
        ],
        &[machine("m1", "a"), machine("m2", "b")],
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(100)).await;
    assert_eq!(h.writes(), 1);
    assert_eq!(h.enqueued().len(), 1);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(200)).await;
    assert_eq!(h.passes(), 2);
    assert_eq!(h.writes(), 1, "no write in steady state");
    assert_eq!(h.enqueued().len(), 1, "no enqueue in steady state");
    assert_eq!(h.fake.calls().len(), 1, "no API call in steady state");
    let second: Vec<_> = h
        .reconciled()
        .into_iter()
        .filter(|r| r.0 == ms(100))
        .map(|r| (r.1, r.2))
        .collect();
    assert_eq!(
        second,
        [
            ("a".into(), ClassOutcome::Unchanged),
            ("b".into(), ClassOutcome::Unchanged)
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unused_class_loses_the_finalizer_and_keeps_the_others() {
    let h = Harness::start(
        &[
            class("a", &["example.com/other", FINALIZER, "example.com/last"]),
            deleting(class("gone-soon", &[FINALIZER])),
            class("bare", &[]),
        ],
        &[],
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(
        h.fake.finalizers(&key("a")),
        Some(vec!["example.com/other".into(), "example.com/last".into()])
    );
    assert_eq!(h.fake.finalizers(&key("gone-soon")), Some(vec![]));
    let mut outcomes: Vec<_> = h.reconciled().into_iter().map(|r| (r.1, r.2)).collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            ("a".into(), ClassOutcome::FinalizerRemoved),
            ("bare".into(), ClassOutcome::Unused),
            ("gone-soon".into(), ClassOutcome::FinalizerRemoved),
        ]
    );
    assert_eq!(h.writes(), 2, "no write for the bare class");
    assert_eq!(h.fake.calls().len(), 2);
    assert!(h.enqueued().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_spec_change_enqueues_the_machines_without_a_write() {
    let h = Harness::start(
        &[class("a", &[FINALIZER])],
        &[machine("m1", "a"), machine("m2", "a")],
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert!(h.enqueued().is_empty(), "first sight is not a change");
    let mut changed = class("a", &[FINALIZER]);
    changed.provider_spec = json!({"machineType": "m5.xlarge"});
    changed.metadata.resource_version = Some("5".into());
    h.apply(ResourceKind::MachineClass, changed);
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(
        h.enqueued(),
        [("a".into(), EnqueueReason::ClassSpecChanged, 2)]
    );
    assert_eq!(h.writes(), 0);
    assert!(h.fake.calls().is_empty());
    // Seen now: the next pass enqueues nothing more.
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(30)).await;
    assert_eq!(h.enqueued().len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_class_being_deleted_while_in_use_enqueues_its_machines_once() {
    let h = Harness::start(&[deleting(class("a", &[FINALIZER]))], &[machine("m1", "a")]);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(SHORT * 2 + ms(10)).await;
    let enqueued: Vec<_> = h
        .events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::MachinesEnqueued { reason, .. } => Some((at, reason)),
            _ => None,
        })
        .collect();
    // Looked at again every short retry, the finalizer kept; the Machines
    // are told once (machine-controller-manager's PR 1056).
    assert_eq!(enqueued, [(ms(0), EnqueueReason::ClassDeleting)]);
    let looks: Vec<_> = h.reconciled().into_iter().map(|r| r.0).collect();
    assert_eq!(looks, [ms(0), SHORT, SHORT * 2]);
    assert_eq!(h.writes(), 0);
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![FINALIZER.into()]));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_class_gone_from_the_index_is_forgotten() {
    let h = Harness::start(&[class("a", &[])], &[]);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    h.delete::<MachineClass>(ResourceKind::MachineClass, "a");
    h.trigger(TriggerReason::Debounced);
    h.at(LONG * 2).await;
    let outcomes: Vec<_> = h.reconciled().into_iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(
        outcomes,
        [(ms(0), ClassOutcome::Unused), (ms(10), ClassOutcome::Gone)],
        "no requeue once gone"
    );
    let gone = h
        .recorder
        .events()
        .into_iter()
        .rfind(|e| matches!(e, Event::MachineClassReconciled { .. }));
    assert!(
        matches!(
            gone,
            Some(Event::MachineClassReconciled {
                requeue: Requeue::Never,
                requeue_after: Duration::ZERO,
                ..
            })
        ),
        "{gone:?}"
    );
    h.stop().await;
}

/// Machines being deleted keep their class in use but are not enqueued
/// (machine-controller-manager's PR 1056); with only such Machines left,
/// nothing is enqueued at all.
#[tokio::test(start_paused = true)]
async fn machines_being_deleted_are_not_enqueued() {
    let mut leaving = machine("m2", "a");
    leaving.metadata.deletion_timestamp =
        serde_json::from_value(json!("2025-01-01T00:00:00Z")).unwrap();
    leaving.metadata.finalizers = Some(vec!["example.com/drain".into()]);
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a"), leaving.clone()]);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![FINALIZER.into()]));
    assert_eq!(
        h.enqueued(),
        [("a".into(), EnqueueReason::FinalizerAdded, 1)]
    );

    let mut only_leaving = leaving;
    only_leaving.metadata.name = Some("m3".into());
    only_leaving.spec.class.name = "b".into();
    h.apply(ResourceKind::MachineClass, class("b", &[]));
    h.fake.insert(&class("b", &[]));
    h.apply(ResourceKind::Machine, only_leaving);
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(h.fake.finalizers(&key("b")), Some(vec![FINALIZER.into()]));
    assert_eq!(h.enqueued().len(), 1, "nothing to enqueue for b");
    h.stop().await;
}

/// A class of 20,000 Machines (more than the bus holds) is one event: no
/// subscriber lags.
#[tokio::test(start_paused = true)]
async fn twenty_thousand_machines_of_one_class_are_one_event() {
    let machines: Vec<Machine> = (0..20_000)
        .map(|i| machine(&format!("m{i}"), "a"))
        .collect();
    let h = Harness::start(&[class("a", &[])], &machines);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(100)).await;
    assert_eq!(
        h.enqueued(),
        [("a".into(), EnqueueReason::FinalizerAdded, 20_000)]
    );
    assert_eq!(h.recorder.lagged(), 0);
    assert!(
        h.recorder.events().len() < 16,
        "{:?}",
        h.recorder.events().len()
    );
    h.stop().await;
}
