//! Backpressure on the bus: a consumer that cannot keep up is told how much
//! it missed and resyncs, the publisher never waits for it, and the real
//! reconciler turns a flood it cannot follow into one full trigger.
//!
//! Every test runs on tokio's paused clock and asserts counts, so the
//! outcome does not depend on how busy the machine is.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use poolkeeper_bus::{
    Bus, Change, Delivery, Event, ObjectKey, ResourceKind, Subscription, TriggerReason,
};
use poolkeeper_config::Config;
use poolkeeper_reconciler::{Reconciler, ReconcilerSettings};
use poolkeeper_supervisor::testing::{BusRecorder, spawn};

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
    /// know what it missed, so it starts over from the source of truth (as
    /// the executor and the reconciler start over from the index).
    resyncs: u64,
    /// `seq` of the last event handled (`published - 1` at the end).
    last_seq: u64,
    /// What the consumer knows: the events it handled plus its resyncs.
    known: BTreeSet<u64>,
    /// The lag metric of its subscription (`events_lagged_total`).
    lagged_metric: u64,
}

/// The number in an event's key (`item-N`).
fn item_of(event: &Event) -> Option<u64> {
    match event {
        Event::ResourceChanged { key, .. } => key.name.strip_prefix("item-")?.parse().ok(),
        _ => None,
    }
}

fn item_changed(i: u64) -> Event {
    Event::ResourceChanged {
        kind: ResourceKind::Machine,
        key: ObjectKey::namespaced("machine-system", format!("item-{i}")),
        change: Change::Created,
        initial: false,
        related: Vec::new(),
    }
}

/// Handles one event per (paused) millisecond, resyncing from `truth` on
/// every lag notice, until the end marker.
async fn slow_consumer(mut subscription: Subscription, truth: Arc<Mutex<BTreeSet<u64>>>) -> Tally {
    let mut tally = Tally::default();
    while let Some(delivery) = subscription.recv().await {
        match delivery {
            Delivery::Lagged(missed) => {
                tally.lagged += missed;
                tally.lag_notices += 1;
                tally.resyncs += 1;
                tally
                    .known
                    .extend(truth.lock().expect("the truth").iter().copied());
            }
            Delivery::Event(envelope) => {
                tally.handled += 1;
                tally.last_seq = envelope.seq;
                if matches!(envelope.event, Event::ShutdownRequested) {
                    break;
                }
                tally.known.extend(item_of(&envelope.event));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    tally.lagged_metric = subscription.lagged_total();
    tally
}

#[tokio::test(start_paused = true)]
async fn a_slow_subscriber_lags_resyncs_and_accounts_for_every_event() {
    const CAPACITY: usize = 1024;
    const BURSTS: u64 = 50;
    const BURST: u64 = FLOOD / BURSTS;
    const _: () = assert!(BURST as usize > CAPACITY, "each burst overflows the buffer");
    let bus = Bus::new(CAPACITY);
    let truth = Arc::new(Mutex::new(BTreeSet::new()));
    let consumer = tokio::spawn(slow_consumer(bus.subscribe("slow-consumer"), truth.clone()));
    bus.start();

    for burst in 0..BURSTS {
        // `publish` is synchronous and this runtime has one thread: the
        // consumer cannot run until the burst is out, so a publish that
        // waited for it would never return.
        for i in burst * BURST..(burst + 1) * BURST {
            truth.lock().expect("the truth").insert(i);
            bus.publish(item_changed(i));
        }
        // Ten (paused) milliseconds: about ten events for the consumer.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The newest event is never the one dropped.
    bus.publish(Event::ShutdownRequested);
    let tally = consumer.await.expect("the consumer does not panic");

    let published = FLOOD + 1;
    println!(
        "published {published}; handled {}, lagged {} in {} notices, {} resyncs",
        tally.handled, tally.lagged, tally.lag_notices, tally.resyncs
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
    assert_eq!(
        tally.lagged_metric, tally.lagged,
        "the lag metric counts what was missed"
    );
    assert_eq!(
        tally.lag_notices, BURSTS,
        "one notice for each burst it could not follow"
    );
    assert_eq!(tally.resyncs, tally.lag_notices);
    assert!(
        tally.handled > CAPACITY as u64 && tally.handled < published / 10,
        "handled {}: the consumer drains the buffer but is far slower than the flood",
        tally.handled
    );
    assert_eq!(
        tally.known,
        *truth.lock().expect("the truth"),
        "after its resyncs the consumer knows every item"
    );
}

/// Counts of `ReconciliationTriggered` by reason.
fn triggers(recorder: &BusRecorder, reason: TriggerReason) -> usize {
    recorder.count(
        |event| matches!(event, Event::ReconciliationTriggered { reason: r } if *r == reason),
    )
}

fn all_triggers(recorder: &BusRecorder) -> usize {
    recorder.count(|event| matches!(event, Event::ReconciliationTriggered { .. }))
}

#[tokio::test(start_paused = true)]
async fn the_reconciler_turns_a_flood_it_cannot_follow_into_one_full_trigger() {
    let bus = Bus::new(16);
    let recorder = BusRecorder::new(&bus);
    let reconciler = Reconciler::new(ReconcilerSettings::from(&Config::default()), &bus);
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
    let recorder = BusRecorder::new(&bus);
    let reconciler = Reconciler::new(ReconcilerSettings::from(&Config::default()), &bus);
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
