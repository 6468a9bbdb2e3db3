use super::*;

fn changed(i: usize) -> Event {
    Event::ResourceChanged {
        kind: ResourceKind::Machine,
        key: ObjectKey::namespaced("ns", format!("m{i}")),
        change: Change::Updated,
        initial: false,
        related: Vec::new(),
    }
}

fn name_of(delivery: Delivery) -> String {
    match delivery {
        Delivery::Event(envelope) => match &envelope.event {
            Event::ResourceChanged { key, .. } => key.name.clone(),
            other => other.name().to_string(),
        },
        Delivery::Lagged(n) => format!("lagged {n}"),
    }
}

#[tokio::test]
async fn events_published_before_start_arrive_in_order_after_start() {
    let bus = Bus::new(16);
    let mut sub = bus.subscribe("early");
    for i in 0..3 {
        bus.publish(changed(i));
    }
    assert!(
        sub.try_recv().is_none(),
        "nothing is delivered before start"
    );
    bus.start();
    bus.publish(changed(3));
    let got: Vec<_> = (0..4).map(|_| name_of(sub.try_recv().unwrap())).collect();
    assert_eq!(got, ["m0", "m1", "m2", "m3"]);
    assert!(sub.try_recv().is_none());
}

#[tokio::test]
async fn every_subscriber_sees_every_event_in_publish_order() {
    let bus = Bus::new(1024);
    let mut subs: Vec<_> = (0..4).map(|i| bus.subscribe(format!("s{i}"))).collect();
    bus.start();
    let publisher = {
        let bus = bus.clone();
        tokio::spawn(async move {
            for i in 0..500 {
                bus.publish(changed(i));
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    publisher.await.unwrap();
    let expected: Vec<_> = (0..500).map(|i| format!("m{i}")).collect();
    for sub in &mut subs {
        let mut got = Vec::new();
        while got.len() < 500 {
            got.push(name_of(sub.recv().await.unwrap()));
        }
        assert_eq!(got, expected, "subscriber {}", sub.name());
    }
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_is_told_and_counted() {
    let bus = Bus::new(4);
    let mut registry = Registry::with_prefix("poolkeeper_bus");
    bus.register_metrics(&mut registry);
    let mut slow = bus.subscribe("slow");
    bus.start();
    for i in 0..10 {
        bus.publish(changed(i));
    }
    let first = slow.recv().await.unwrap();
    assert!(matches!(first, Delivery::Lagged(6)), "got {first:?}");
    let rest: Vec<_> = (0..4).map(|_| name_of(slow.try_recv().unwrap())).collect();
    assert_eq!(rest, ["m6", "m7", "m8", "m9"], "the newest events survive");
    assert_eq!(slow.lagged_total(), 6);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"poolkeeper_bus_events_lagged_total{subscriber="slow"} 6"#),
        "{text}"
    );
    assert!(
        text.contains(r#"poolkeeper_bus_events_published_total{event="ResourceChanged"} 10"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_lagging_subscriber_does_not_disturb_a_fast_one_nor_block_publishers() {
    let bus = Bus::new(8);
    let mut fast = bus.subscribe("fast");
    let _idle = bus.subscribe("observer");
    bus.start();
    for i in 0..1000 {
        bus.publish(changed(i));
        assert_eq!(name_of(fast.try_recv().unwrap()), format!("m{i}"));
    }
    assert_eq!(fast.lagged_total(), 0);
}

#[tokio::test]
async fn publishing_with_no_subscribers_is_fine() {
    let bus = Bus::new(2);
    bus.publish(Event::IndexSynchronized);
    bus.start();
    for _ in 0..10 {
        bus.publish(Event::ShutdownRequested);
    }
    // A late subscriber only sees what comes after it, numbered after the
    // 11 events nobody received.
    let mut late = bus.subscribe("late");
    bus.publish(Event::LeadershipChanged { leader: true });
    let Some(Delivery::Event(envelope)) = late.try_recv() else {
        panic!("the late subscriber gets the event published after it subscribed");
    };
    assert_eq!(envelope.event.name(), "LeadershipChanged");
    assert_eq!(envelope.seq, 11);
}

#[tokio::test]
async fn subscription_ends_when_the_bus_is_gone() {
    let bus = Bus::new(2);
    let mut sub = bus.subscribe("s");
    bus.start();
    bus.publish(Event::IndexSynchronized);
    drop(bus);
    assert!(matches!(sub.recv().await, Some(Delivery::Event(_))));
    assert!(sub.recv().await.is_none());
}

#[tokio::test]
async fn publishers_racing_start_keep_order() {
    for _ in 0..50 {
        let bus = Bus::new(4096);
        let mut sub = bus.subscribe("s");
        let publisher = {
            let bus = bus.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    bus.publish(changed(i));
                }
            })
        };
        bus.start();
        publisher.join().unwrap();
        let got: Vec<_> = (0..200).map(|_| name_of(sub.try_recv().unwrap())).collect();
        let expected: Vec<_> = (0..200).map(|i| format!("m{i}")).collect();
        assert_eq!(got, expected);
    }
}

#[tokio::test(start_paused = true)]
async fn next_delivery_delivers_then_never_resolves_once_the_bus_is_gone() {
    let bus = Bus::new(4);
    let mut subscription = bus.subscribe("loop");
    let mut witness = bus.subscribe("witness");
    bus.start();
    bus.publish(changed(1));
    assert_eq!(name_of(subscription.next_delivery().await), "m1");
    drop(bus);
    assert!(witness.recv().await.is_some(), "the event");
    assert!(witness.recv().await.is_none(), "recv says the bus is gone");
    let waited = tokio::time::timeout(
        std::time::Duration::from_secs(3600),
        subscription.next_delivery(),
    )
    .await;
    assert!(waited.is_err(), "a closed bus delivers nothing, ever");
}
