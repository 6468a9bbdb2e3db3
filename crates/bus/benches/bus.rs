//! Throughput of the bus: one publisher, 1/4/16 subscribers draining on
//! their own tasks; and the cost of one publish with one subscriber.

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use poolkeeper_bus::{Bus, Change, Delivery, Event, ObjectKey, ResourceKind};

const EVENTS: u64 = 100_000;

fn event() -> Event {
    Event::ResourceChanged {
        kind: ResourceKind::Machine,
        key: ObjectKey::namespaced("machine-system", "machine-0001"),
        change: Change::Updated,
        initial: false,
        related: Vec::new(),
    }
}

/// Publishes `EVENTS` events and waits until every subscriber has seen all of them.
fn fan_out(runtime: &tokio::runtime::Runtime, subscribers: usize) -> Duration {
    let bus = Bus::new(EVENTS as usize);
    let subs: Vec<_> = (0..subscribers)
        .map(|i| bus.subscribe(format!("bench-{i}")))
        .collect();
    bus.start();
    runtime.block_on(async move {
        let drains: Vec<_> = subs
            .into_iter()
            .map(|mut sub| {
                tokio::spawn(async move {
                    let mut seen = 0;
                    while seen < EVENTS {
                        match sub.recv().await {
                            Some(Delivery::Event(_)) => seen += 1,
                            Some(Delivery::Lagged(n)) => panic!("lagged {n}"),
                            None => break,
                        }
                    }
                })
            })
            .collect();
        let start = Instant::now();
        for _ in 0..EVENTS {
            bus.publish(event());
        }
        for drain in drains {
            drain.await.unwrap();
        }
        start.elapsed()
    })
}

fn throughput(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut group = c.benchmark_group("bus_fan_out");
    group.throughput(Throughput::Elements(EVENTS));
    group.sample_size(10);
    for subscribers in [1, 4, 16] {
        group.bench_function(format!("{subscribers}_subscribers"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| fan_out(&runtime, subscribers)).sum())
        });
    }
    group.finish();

    let bus = Bus::new(1 << 16);
    let mut sub = bus.subscribe("bench");
    bus.start();
    c.bench_function("publish_and_receive_one_event", |b| {
        b.iter(|| {
            bus.publish(event());
            sub.try_recv().unwrap()
        })
    });
}

criterion_group!(benches, throughput);
criterion_main!(benches);
