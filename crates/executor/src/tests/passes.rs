//! Which keys a pass looks at, and how passes run.

use super::*;

#[tokio::test(start_paused = true)]
async fn triggers_during_a_pass_coalesce_into_one_next_pass() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.fake.set_latency(secs(1));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(100)).await;
    for _ in 0..5 {
        h.trigger(TriggerReason::Debounced);
    }
    h.machine_changed("m1", &["a"]);
    h.trigger(TriggerReason::Lagged);
    h.at(secs(10)).await;
    let started: Vec<_> = h
        .events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::ReconciliationStarted { pass, keys } => Some((at, pass, keys)),
            _ => None,
        })
        .collect();
    assert_eq!(started, [(ms(0), 1, 1), (secs(1), 2, 1)]);
    h.stop().await;
}

/// A change to a class while it is being reconciled waits for the
/// debouncer like any other: a burst of Machine changes during a slow write
/// must not turn into one pass per finished key.
#[tokio::test(start_paused = true)]
async fn a_change_during_a_reconciliation_waits_for_the_next_trigger() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.fake.set_latency(secs(1));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(100)).await;
    h.machine_changed("m1", &["a"]);
    h.at(secs(5)).await;
    let started = |h: &Harness| {
        h.events()
            .into_iter()
            .filter_map(|(at, e)| match e {
                Event::ReconciliationStarted { pass, keys } => Some((at, pass, keys)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(started(&h), [(ms(0), 1, 1)], "no pass without a trigger");
    h.trigger(TriggerReason::Debounced);
    h.at(secs(6)).await;
    assert_eq!(started(&h), [(ms(0), 1, 1), (secs(5), 2, 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_bounded_and_no_key_is_written_twice_at_once() {
    let names: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
    let classes: Vec<_> = names.iter().map(|n| class(n, &[])).collect();
    let machines: Vec<_> = names
        .iter()
        .map(|n| machine(&format!("m-{n}"), n))
        .collect();
    let mut setup = Setup::default();
    setup.settings.concurrency = 3;
    let h = Harness::start_with(&classes, &machines, setup);
    h.fake.set_latency(ms(100));
    h.trigger(TriggerReason::LeadershipGained);
    // A trigger for a key while it is being written.
    h.at(ms(50)).await;
    let mut c00 = class("c00", &[]);
    c00.metadata.resource_version = Some("2".into());
    h.apply(ResourceKind::MachineClass, c00);
    h.trigger(TriggerReason::Debounced);
    h.at(secs(5)).await;
    assert_eq!(h.fake.max_in_flight(), 3);
    assert_eq!(h.fake.overlaps(), 0);
    assert_eq!(h.writes(), 12);
    let last_call = h.calls().iter().map(|call| call.0).max().unwrap();
    assert_eq!(last_call, ms(400), "12 writes of 100 ms, 3 at a time");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_debounced_pass_looks_only_at_the_classes_a_change_relates_to() {
    let h = Harness::start(
        &[
            class("a", &[FINALIZER]),
            class("b", &[]),
            class("idle", &[FINALIZER]),
        ],
        &[machine("m1", "a"), machine("m2", "idle")],
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    // m1 moves from "a" to "b": its change relates to both.
    h.apply(ResourceKind::Machine, machine("m1", "b"));
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    let second: Vec<_> = h
        .reconciled()
        .into_iter()
        .filter(|r| r.0 == ms(10))
        .map(|r| (r.1, r.2))
        .collect();
    assert_eq!(
        second,
        [
            ("a".into(), ClassOutcome::FinalizerRemoved),
            ("b".into(), ClassOutcome::FinalizerAdded)
        ]
    );
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![]));
    assert_eq!(h.fake.finalizers(&key("b")), Some(vec![FINALIZER.into()]));
    assert_eq!(
        h.enqueued(),
        [("b".into(), EnqueueReason::FinalizerAdded, 1)]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_machine_change_dirties_exactly_its_related_classes() {
    let h = Harness::start(
        &[class("a", &[FINALIZER]), class("b", &[FINALIZER])],
        &[machine("m1", "a"), machine("m2", "b")],
    );
    // The event names the classes; the executor does not look them up.
    h.machine_changed("m1", &["b"]);
    h.trigger(TriggerReason::Debounced);
    h.at(ms(10)).await;
    let reconciled: Vec<_> = h.reconciled().into_iter().map(|r| r.1).collect();
    assert_eq!(reconciled, ["b"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_machine_releases_its_class() {
    let h = Harness::start(&[class("a", &[FINALIZER])], &[machine("m1", "a")]);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    h.delete::<Machine>(ResourceKind::Machine, "m1");
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![]));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_trigger_looks_at_every_class_in_the_index() {
    let h = Harness::start(&[class("a", &[])], &[machine("m1", "a")]);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    // Changes the executor never heard of, as after missed events.
    for name in ["b", "c"] {
        let class = class(name, &[]);
        h.fake.insert(&class);
        h.index.apply(class);
        h.index.apply(machine(&format!("m-{name}"), name));
    }
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(
        h.count(|e| matches!(e, Event::ReconciliationStarted { pass: 2, keys: 0 })),
        1,
        "nothing is dirty: a debounced pass looks at no class"
    );
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(30)).await;
    let third: Vec<_> = h
        .reconciled()
        .into_iter()
        .filter(|r| r.0 == ms(20))
        .map(|r| (r.1, r.2))
        .collect();
    assert_eq!(
        third,
        [
            ("a".into(), ClassOutcome::Unchanged),
            ("b".into(), ClassOutcome::FinalizerAdded),
            ("c".into(), ClassOutcome::FinalizerAdded)
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lag_makes_the_next_pass_a_full_one() {
    let setup = Setup {
        capacity: 8,
        ..Setup::default()
    };
    let h = Harness::start_with(
        &[class("a", &[]), class("b", &[])],
        &[machine("m1", "a"), machine("m2", "b")],
        setup,
    );
    // Unrelated churn overflows the executor's queue.
    for i in 0..50 {
        h.bus.publish(Event::ResourceChanged {
            kind: ResourceKind::Node,
            key: ObjectKey::cluster(format!("node-{i}")),
            change: Change::Updated,
            initial: false,
            related: Vec::new(),
        });
    }
    h.at(ms(10)).await;
    assert_eq!(
        h.count(|e| matches!(e, Event::ReconciliationStarted { pass: 1, keys: 2 })),
        1,
        "one pass over every class"
    );
    assert_eq!(h.passes(), 1);
    assert_eq!(
        h.calls(),
        [
            (ms(0), "a".into(), Answer::Accepted),
            (ms(0), "b".into(), Answer::Accepted)
        ]
    );
    h.stop().await;
}

/// `(when, pass, writes, failed)` of every completed pass.
fn completed(h: &Harness) -> Vec<(Duration, u64, usize, usize)> {
    h.events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::ReconciliationCompleted {
                pass,
                writes,
                failed,
                ..
            } => Some((at, pass, writes, failed)),
            _ => None,
        })
        .collect()
}

/// When each patch of class `name` came in, answered or not.
fn attempts(h: &Harness, name: &str) -> Vec<Duration> {
    h.fake
        .attempts()
        .into_iter()
        .filter(|(_, key)| key.name == name)
        .map(|(at, _)| at - h.start)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn writes_that_hang_hold_their_slots_only_and_other_classes_are_reconciled_at_once() {
    let mut setup = Setup::default();
    setup.settings.concurrency = 3;
    let h = Harness::start_with(
        &[class("a", &[]), class("b", &[]), class("c", &[])],
        &[
            machine("m-a", "a"),
            machine("m-b", "b"),
            machine("m-c", "c"),
        ],
        setup,
    );
    // Two of three slots hang until writeTimeout (30 s).
    h.fake.hang(&key("a"));
    h.fake.hang(&key("b"));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(1)).await;
    let d = class("d", &[]);
    h.fake.insert(&d);
    h.apply(ResourceKind::MachineClass, d);
    h.apply(ResourceKind::Machine, machine("m-d", "d"));
    h.trigger(TriggerReason::Debounced);
    h.at(secs(2)).await;
    h.delete::<Machine>(ResourceKind::Machine, "m-c");
    h.trigger(TriggerReason::Debounced);
    h.at(secs(20)).await;
    h.fake.answer(&key("a"));
    h.fake.answer(&key("b"));
    h.at(secs(40)).await;
    let mut calls = h.calls();
    calls.sort_by(|x, y| (x.0, &x.1).cmp(&(y.0, &y.1)));
    assert_eq!(
        calls,
        [
            (ms(0), "c".into(), Answer::Accepted),
            (secs(1), "d".into(), Answer::Accepted),
            (secs(2), "c".into(), Answer::Accepted),
            (secs(35), "a".into(), Answer::Accepted),
            (secs(35), "b".into(), Answer::Accepted),
        ]
    );
    assert_eq!(h.fake.finalizers(&key("c")), Some(vec![]));
    assert_eq!(h.fake.finalizers(&key("d")), Some(vec![FINALIZER.into()]));
    let until_timeout: Vec<_> = completed(&h)
        .into_iter()
        .filter(|c| c.0 <= secs(30))
        .collect();
    assert_eq!(
        until_timeout,
        [(secs(1), 2, 1, 0), (secs(2), 3, 1, 0), (secs(30), 1, 1, 2)],
        "the passes after the hanging writes complete at their trigger"
    );
    let a: Vec<_> = h.reconciled().into_iter().filter(|r| r.1 == "a").collect();
    assert_eq!(
        a,
        [
            (secs(30), "a".into(), ClassOutcome::Error, SHORT),
            (secs(35), "a".into(), ClassOutcome::FinalizerAdded, LONG),
        ]
    );
    assert_eq!(attempts(&h, "a"), [ms(0), secs(35)]);
    assert_eq!(h.fake.max_in_flight(), 3);
    assert_eq!(h.fake.overlaps(), 0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_class_whose_write_hangs_is_left_out_of_later_passes_until_its_write_ends() {
    let h = Harness::start(
        &[class("a", &[]), class("b", &[FINALIZER])],
        &[machine("m-a", "a"), machine("m-b", "b")],
    );
    h.fake.hang(&key("a"));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(1)).await;
    // Work for "a" alone waits for its write; a full pass leaves it out.
    h.machine_changed("m-a", &["a"]);
    h.trigger(TriggerReason::Debounced);
    h.at(secs(2)).await;
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(20)).await;
    h.fake.answer(&key("a"));
    h.at(secs(31)).await;
    let started: Vec<_> = h
        .events()
        .into_iter()
        .filter_map(|(at, e)| match e {
            Event::ReconciliationStarted { pass, keys } => Some((at, pass, keys)),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [(ms(0), 1, 2), (secs(2), 2, 1), (secs(30), 3, 1)],
        "the dirty class runs again as soon as its timed-out write ends"
    );
    assert_eq!(attempts(&h, "a"), [ms(0), secs(30)]);
    assert_eq!(h.fake.overlaps(), 0);
    assert_eq!(h.calls(), [(secs(30), "a".into(), Answer::Accepted)]);
    assert_eq!(h.fake.finalizers(&key("a")), Some(vec![FINALIZER.into()]));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn with_every_slot_hanging_other_classes_wait_at_most_the_write_timeout() {
    let mut setup = Setup::default();
    setup.settings.concurrency = 1;
    let h = Harness::start_with(&[class("a", &[])], &[machine("m-a", "a")], setup);
    h.fake.hang(&key("a"));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(1)).await;
    let b = class("b", &[]);
    h.fake.insert(&b);
    h.apply(ResourceKind::MachineClass, b);
    h.apply(ResourceKind::Machine, machine("m-b", "b"));
    h.trigger(TriggerReason::Debounced);
    h.at(secs(31)).await;
    assert_eq!(h.calls(), [(secs(30), "b".into(), Answer::Accepted)]);
    assert_eq!(
        completed(&h),
        [(secs(30), 1, 0, 1), (secs(30), 2, 1, 0)],
        "the hanging write gives its slot up after writeTimeout"
    );
    h.stop().await;
}
