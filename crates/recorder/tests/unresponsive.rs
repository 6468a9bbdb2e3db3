//! An API server that accepts connections and never answers: each write is
//! given up after the write timeout, the next one is tried, and the
//! recorder still stops at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::Client;
use poolkeeper_bus::{Bus, ClassOutcome, Event, ObjectKey, Requeue};
use poolkeeper_config::Config;
use poolkeeper_recorder::{EventRecorder, RecorderSettings};
use poolkeeper_supervisor::testing::spawn;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Accepts connections, keeps them open, reads nothing, answers nothing;
/// returns its URL and the number of connections so far.
async fn silent_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            open.push(socket);
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn a_hung_api_server_delays_each_event_by_the_write_timeout_only() {
    let (url, accepted) = silent_server().await;
    let config = kube::Config::new(url.parse().expect("url"));
    let client = Client::try_from(config).expect("client");
    let mut settings = RecorderSettings::from(&Config::default());
    settings.write_timeout = Duration::from_millis(200);
    let bus = Bus::default();
    let recorder = EventRecorder::new(settings, &bus, client, "replica");
    bus.start();
    let mut running = spawn(Box::new(recorder));
    running.wait_ready(Duration::from_secs(5)).await;

    let started = Instant::now();
    for name in ["a", "b", "c"] {
        bus.publish(Event::MachineClassReconciled {
            key: ObjectKey::namespaced("machine-system", name),
            uid: Some(format!("uid-{name}")),
            outcome: ClassOutcome::FinalizerAdded,
            requeue: Requeue::Long,
            requeue_after: Duration::from_secs(600),
            duration: Duration::ZERO,
        });
    }
    // One request per Event (the Event's write), each given up after 200 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    while accepted.load(Ordering::SeqCst) < 3 {
        assert!(
            Instant::now() < deadline,
            "only {} of 3 writes were tried",
            accepted.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One after the other: the third began when two had timed out.
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert!(!running.is_finished(), "a failed write is not fatal");

    // Stopping does not wait for a write under way.
    bus.publish(Event::MachineClassReconciled {
        key: ObjectKey::namespaced("machine-system", "d"),
        uid: Some("uid-d".into()),
        outcome: ClassOutcome::Error,
        requeue: Requeue::Short,
        requeue_after: Duration::from_secs(5),
        duration: Duration::ZERO,
    });
    let stopping = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(1), running.stop())
        .await
        .expect("stops within a second");
    assert!(result.is_ok(), "{result:?}");
    assert!(stopping.elapsed() < Duration::from_millis(200));
}
