//! The events are the executor's only report: they carry everything its
//! metrics are derived from.

use super::*;
use crate::fake::status;
use crate::{ClassWriter, KubeClassWriter};

/// Counts of `key` in `items`, sorted by key.
fn tally<K: Ord>(items: impl IntoIterator<Item = K>) -> Vec<(K, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for item in items {
        *counts.entry(item).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

#[tokio::test(start_paused = true)]
async fn the_events_say_what_every_reconciliation_did() {
    let h = Harness::start(
        &[class("a", &[]), class("b", &[FINALIZER])],
        &[machine("m1", "a"), machine("m2", "a")],
    );
    h.fake.set_latency(ms(30));
    h.fake.answer_next(
        &key("a"),
        status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on machineclasses \"a\": the object has been modified",
        ),
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(1)).await;
    let recorder = h.recorder.clone();
    h.stop().await;

    let events = recorder.events();
    let passes: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ReconciliationCompleted {
                pass,
                duration,
                writes,
                failed,
            } => Some((*pass, *duration, *writes, *failed)),
            _ => None,
        })
        .collect();
    assert_eq!(
        passes,
        [(1, ms(30), 1, 0), (2, ms(30), 1, 0)],
        "the first pass: a conflicts, b is released; the retry adds a's finalizer"
    );
    let reconciled: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::MachineClassReconciled {
                key,
                outcome,
                requeue,
                requeue_after,
                duration,
                ..
            } => Some((
                key.name.clone(),
                *outcome,
                *requeue,
                *requeue_after,
                *duration,
            )),
            _ => None,
        })
        .collect();
    let mut first_pass = reconciled[..2].to_vec();
    first_pass.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        first_pass,
        [
            (
                "a".into(),
                ClassOutcome::Conflict,
                Requeue::Conflict,
                CONFLICT,
                ms(30)
            ),
            (
                "b".into(),
                ClassOutcome::FinalizerRemoved,
                Requeue::Long,
                LONG,
                ms(30)
            ),
        ]
    );
    assert_eq!(
        reconciled[2..],
        [(
            "a".into(),
            ClassOutcome::FinalizerAdded,
            Requeue::Long,
            LONG,
            ms(30)
        )]
    );
    assert_eq!(
        tally(reconciled.iter().map(|r| r.1)),
        [
            (ClassOutcome::FinalizerAdded, 1),
            (ClassOutcome::FinalizerRemoved, 1),
            (ClassOutcome::Conflict, 1)
        ]
    );
    assert_eq!(
        tally(reconciled.iter().map(|r| r.2)),
        [(Requeue::Long, 2), (Requeue::Conflict, 1)]
    );
    // One event for the class that got its finalizer, counting its Machines.
    let enqueued: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::MachinesEnqueued {
                reason, machines, ..
            } => Some((*reason, *machines)),
            _ => None,
        })
        .collect();
    assert_eq!(enqueued, [(EnqueueReason::FinalizerAdded, 2)]);
}

#[test]
fn the_kube_writer_makes_a_component() {
    fn component<C: poolkeeper_supervisor::Component>() {}
    fn writer<W: ClassWriter>() {}
    component::<Executor<KubeClassWriter>>();
    writer::<KubeClassWriter>();
}
