//! Backpressure on the bus: a consumer that cannot keep up is told how much
//! it missed and resyncs, the publisher never waits for it, and the real
//! reconciler turns a flood it cannot follow into one full trigger.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use poolkeeper_bus::{Bus, Change, Delivery, Event, ObjectKey, ResourceKind, TriggerReason};
use poolkeeper_config::Config;
use poolkeeper_reconciler::{Reconciler, ReconcilerSettings};
use poolkeeper_supervisor::testing::{EventRecorder, spawn};

const FLOOD: u64 = 100_000;

fn machine_changed(i: u64) -> Event {
    Event::ResourceChanged {
        kind: ResourceKind::Machine,
        key: ObjectKey::namespaced("machine-system", format!("machine-{}", i % 500)),
        change: Change::Updated,
        initial: false,
        related: vec![ObjectKey::namespaced("machine-system", "class-a")],
    }
}

/// What the slow consumer saw.
#[derive(Debug, Default)]
struct Tally {
    handled: u64,
    lagged: u64,
    lag_notices: u64,
    /// Full resyncs, one per lag notice: after a lag the consumer cannot
    /// know what it missed, so it starts over from the index (as the
    /// executor and the reconciler do).
    resyncs: u64,
    /// `seq` of the last event handled (`published - 1` at the end).
    last_seq: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_lags_resyncs_and_accounts_for_every_event() {
    let bus = Bus::new(1024);
    let mut subscription = bus.subscribe("slow-consumer");
    bus.start();

    let consumer = tokio::spawn(async move {
        let mut tally = Tally::default();
        while let Some(delivery) = subscription.recv().await {
            match delivery {
                Delivery::Lagged(missed) => {
                    tally.lagged += missed;
                    tally.lag_notices += 1;
                    tally.resyncs += 1;
                }
                Delivery::Event(envelope) => {
                    tally.handled += 1;
                    tally.last_seq = envelope.seq;
                    if matches!(envelope.event, Event::ShutdownRequested) {
                        return tally;
                    }
                    // Far slower than the publisher: one event per millisecond.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        tally
    });

    // A plain thread, outside any runtime: `publish` is synchronous, so the
    // publisher cannot await the consumer even if it wanted to.
    let publisher_bus = bus.clone();
    let slowest = Arc::new(AtomicU64::new(0));
    let slowest_publish = Arc::clone(&slowest);
    let publisher = std::thread::spawn(move || {
        let started = Instant::now();
        for i in 0..FLOOD {
            let before = Instant::now();
            publisher_bus.publish(machine_changed(i));
            let took = before.elapsed().as_nanos() as u64;
            slowest_publish.fetch_max(took, Ordering::Relaxed);
        }
        // The last event marks the end; being the newest, it is never dropped.
        publisher_bus.publish(Event::ShutdownRequested);
        started.elapsed()
    });
    let publishing = publisher.join().expect("the publisher finishes");
    let tally = tokio::time::timeout(Duration::from_secs(60), consumer)
        .await
        .expect("the consumer catches up")
        .expect("the consumer does not panic");

    let published = FLOOD + 1;
    println!(
        "published {published} in {publishing:?} (slowest publish {:?}); handled {}, lagged {} in {} notices, {} resyncs",
        Duration::from_nanos(slowest.load(Ordering::Relaxed)),
        tally.handled,
        tally.lagged,
        tally.lag_notices,
        tally.resyncs
    );
    assert_eq!(
        tally.last_seq + 1,
        published,
        "the end marker is the last event"
    );
    assert_eq!(
        tally.handled + tally.lagged,
        published,
        "every event is either handled or reported missed"
    );
    assert!(tally.lagged > 0, "the consumer is too slow not to lag");
    assert!(tally.resyncs >= 1);
    assert_eq!(tally.resyncs, tally.lag_notices);
    assert!(
        tally.lag_notices < tally.lagged,
        "a notice covers many missed events"
    );
    assert!(
        publishing < Duration::from_secs(1),
        "publishing {published} events took {publishing:?}"
    );
}

/// Counts of `ReconciliationTriggered` by reason.
fn triggers(recorder: &EventRecorder, reason: TriggerReason) -> usize {
    recorder.count(
        |event| matches!(event, Event::ReconciliationTriggered { reason: r } if *r == reason),
    )
}

fn all_triggers(recorder: &EventRecorder) -> usize {
    recorder.count(|event| matches!(event, Event::ReconciliationTriggered { .. }))
}

#[tokio::test(start_paused = true)]
async fn the_reconciler_turns_a_flood_it_cannot_follow_into_one_full_trigger() {
    let bus = Bus::new(16);
    let recorder = EventRecorder::new(&bus);
    let reconciler = Reconciler::new(&bus, ReconcilerSettings::from(&Config::default()));
    bus.start();
    let mut running = spawn(Box::new(reconciler));
    running.wait_ready(Duration::from_secs(1)).await;

    // The whole flood before the reconciler runs again: it lags by nearly
    // all of it.
    for i in 0..FLOOD {
        bus.publish(machine_changed(i));
    }
    recorder
        .wait_for(Duration::from_secs(5), |event| {
            matches!(
                event,
                Event::ReconciliationTriggered {
                    reason: TriggerReason::Lagged
                }
            )
        })
        .await;
    // Long past every debounce deadline: whatever else it would emit has been.
    tokio::time::sleep(Duration::from_secs(30)).await;
    println!(
        "flood of {FLOOD}: {} triggers ({} lagged); the recorder itself lagged by {}",
        all_triggers(&recorder),
        triggers(&recorder, TriggerReason::Lagged),
        recorder.lagged()
    );
    assert_eq!(triggers(&recorder, TriggerReason::Lagged), 1);
    assert_eq!(
        all_triggers(&recorder),
        1,
        "the full trigger covers the flood"
    );
    running.stop().await.expect("the reconciler stops cleanly");
}

#[tokio::test(start_paused = true)]
async fn bursts_the_reconciler_cannot_follow_give_at_most_one_full_trigger_each() {
    const BURSTS: u64 = 20;
    let bus = Bus::new(16);
    let recorder = EventRecorder::new(&bus);
    let reconciler = Reconciler::new(&bus, ReconcilerSettings::from(&Config::default()));
    bus.start();
    let mut running = spawn(Box::new(reconciler));
    running.wait_ready(Duration::from_secs(1)).await;

    // Bursts far beyond the capacity, with the reconciler running in between.
    for burst in 0..BURSTS {
        for i in 0..FLOOD / BURSTS {
            bus.publish(machine_changed(burst * FLOOD / BURSTS + i));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    let lagged = triggers(&recorder, TriggerReason::Lagged);
    let all = all_triggers(&recorder);
    println!("{BURSTS} bursts: {all} triggers ({lagged} lagged)");
    assert!(lagged >= 1, "bursts beyond the capacity make it lag");
    assert!(
        all as u64 <= BURSTS + 1,
        "{all} triggers for {BURSTS} bursts: a storm"
    );
    running.stop().await.expect("the reconciler stops cleanly");
}
