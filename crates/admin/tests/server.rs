//! The admin server on a real socket, asked by a plain HTTP client.

use std::net::SocketAddr;

use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use poolkeeper_admin::{AdminServer, AdminSettings, HealthError, OPENMETRICS_CONTENT_TYPE};
use poolkeeper_bus::{AuditViolation, Bus, Event, ResourceKind};
use poolkeeper_config::Config;
use poolkeeper_supervisor::testing::{Running, liveness_gate, readiness_gate, spawn};
use poolkeeper_supervisor::{Activity, Component, Context, Health, Readiness};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

struct Admin {
    addr: SocketAddr,
    health: Health,
    bus: Bus,
    running: Running,
    client: Client<HttpConnector, Empty<Bytes>>,
}

struct Answer {
    status: StatusCode,
    content_type: String,
    body: String,
}

impl Admin {
    async fn start(debug_events: usize, bus: Bus) -> Self {
        Self::start_with(debug_events, bus, Registry::with_prefix("poolkeeper")).await
    }

    async fn start_with(debug_events: usize, bus: Bus, registry: Registry) -> Self {
        let health = Health::default();
        let settings = AdminSettings {
            addr: "127.0.0.1:0".parse().unwrap(),
            debug_events,
        };
        let mut server = AdminServer::new(settings, &bus, health.clone(), registry);
        let addr = server.bind().await.unwrap();
        assert_ne!(addr.port(), 0);
        assert_eq!(server.local_addr(), Some(addr));

        let mut running = spawn(Box::new(server));
        running.wait_ready(std::time::Duration::from_secs(5)).await;
        bus.start();
        Self {
            addr,
            health,
            bus,
            running,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn get(&self, path: &str) -> Answer {
        let uri = format!("http://{}{path}", self.addr).parse().unwrap();
        let response = self.client.get(uri).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            content_type,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

    async fn stop(self) {
        self.running.stop().await.unwrap();
    }
}

#[tokio::test]
async fn healthz_reports_liveness() {
    let admin = Admin::start(16, Bus::default()).await;
    let executor = liveness_gate(&admin.health, "executor");
    let watchers = liveness_gate(&admin.health, "watchers");

    let answer = admin.get("/healthz").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, "ok");
    assert_eq!(answer.content_type, "text/plain; charset=utf-8");

    watchers.fail("stalled: handling event for 2m3s");
    let answer = admin.get("/healthz").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        answer.body,
        "[+]executor ok\n[-]watchers failed: stalled: handling event for 2m3s\nhealthz check failed\n"
    );
    let answer = admin.get("/livez").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        answer.body.ends_with("livez check failed\n"),
        "{}",
        answer.body
    );

    watchers.pass();
    assert_eq!(admin.get("/livez").await.status, StatusCode::OK);
    executor.pass();
    admin.stop().await;
}

#[tokio::test]
async fn readyz_lists_checks_when_verbose() {
    let admin = Admin::start(16, Bus::default()).await;
    let index = readiness_gate(&admin.health, "index", "index not synchronized");
    readiness_gate(&admin.health, "webhook", "no certificate").pass();

    let answer = admin.get("/readyz").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        answer.body,
        "[-]index failed: index not synchronized\n[+]webhook ok\nreadyz check failed\n"
    );

    index.pass();
    let answer = admin.get("/readyz").await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (StatusCode::OK, "ok")
    );
    let answer = admin.get("/readyz?verbose").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.body,
        "[+]index ok\n[+]webhook ok\nreadyz check passed\n"
    );
    let answer = admin.get("/readyz?verbose=1").await;
    assert_eq!(
        answer.body,
        "[+]index ok\n[+]webhook ok\nreadyz check passed\n"
    );
    admin.stop().await;
}

#[tokio::test]
async fn single_checks_have_their_own_paths() {
    let admin = Admin::start(16, Bus::default()).await;
    let index = readiness_gate(&admin.health, "index", "index not synchronized");
    liveness_gate(&admin.health, "executor");

    let answer = admin.get("/readyz/index").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.body, "[-]index failed: index not synchronized\n");
    index.pass();
    let answer = admin.get("/readyz/index").await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (StatusCode::OK, "ok")
    );

    assert_eq!(admin.get("/healthz/executor").await.status, StatusCode::OK);
    assert_eq!(admin.get("/livez/executor").await.status, StatusCode::OK);

    let answer = admin.get("/readyz/nope").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.body, "no check named \"nope\"\n");
    assert_eq!(
        admin.get("/healthz/index").await.status,
        StatusCode::NOT_FOUND,
        "readiness is not liveness"
    );
    assert_eq!(admin.get("/nowhere").await.status, StatusCode::NOT_FOUND);
    admin.stop().await;
}

#[tokio::test]
async fn metrics_are_openmetrics() {
    let things = Counter::<u64>::default();
    let mut registry = Registry::with_prefix("poolkeeper");
    registry.register("test_things", "Things counted by the test", things.clone());
    let bus = Bus::default();
    bus.register_metrics(registry.sub_registry_with_prefix("bus"));
    let admin = Admin::start_with(16, bus, registry).await;
    things.inc_by(3);

    let answer = admin.get("/metrics").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_type, OPENMETRICS_CONTENT_TYPE);
    assert!(
        answer
            .body
            .contains("# TYPE poolkeeper_test_things counter\n"),
        "{}",
        answer.body
    );
    assert!(
        answer.body.contains("poolkeeper_test_things_total 3\n"),
        "{}",
        answer.body
    );
    assert!(
        answer
            .body
            .contains("poolkeeper_bus_events_lagged_total{subscriber=\"admin-debug-events\"} 0"),
        "{}",
        answer.body
    );
    assert!(answer.body.ends_with("# EOF\n"));
    admin.stop().await;
}

fn synced(kind: ResourceKind) -> Event {
    Event::ResourceSynced { kind }
}

fn event_types(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e.get("event") {
            Some(event) => event["type"].as_str().unwrap().to_string(),
            None => format!("lagged {}", e["lagged"]),
        })
        .collect()
}

#[tokio::test]
async fn debug_events_shows_the_last_events_in_order() {
    let bus = Bus::default();
    // Published before the bus starts: held, then delivered in order.
    bus.publish(synced(ResourceKind::Node));
    let admin = Admin::start(16, bus).await;
    admin.bus.publish(synced(ResourceKind::NodePool));
    admin.bus.publish(Event::IndexSynchronized);
    admin.bus.publish(Event::LeadershipChanged { leader: true });

    let answer = admin.get("/debug/events").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_type, "application/json");
    let events: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        event_types(&events),
        [
            "ResourceSynced",
            "ResourceSynced",
            "IndexSynchronized",
            "LeadershipChanged"
        ]
    );
    assert_eq!(events[0]["event"]["kind"], "Node");
    assert_eq!(events[1]["event"]["kind"], "NodePool");
    let seqs: Vec<u64> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    assert!(events[0]["published_at"].is_string());

    let answer = admin.get("/debug/events?limit=2").await;
    let events: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        event_types(&events),
        ["IndexSynchronized", "LeadershipChanged"]
    );

    let answer = admin.get("/debug/events?limit=100").await;
    let events: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(events.as_array().unwrap().len(), 4);

    let answer = admin.get("/debug/events?limit=0").await;
    assert_eq!(answer.body, "[]");

    assert_eq!(
        admin.get("/debug/events?limit=many").await.status,
        StatusCode::BAD_REQUEST
    );
    admin.stop().await;
}

#[tokio::test]
async fn debug_events_keeps_only_the_newest() {
    let admin = Admin::start(3, Bus::default()).await;
    for pass in 0..5 {
        admin
            .bus
            .publish(Event::ReconciliationStarted { pass, keys: 1 });
    }
    let answer = admin.get("/debug/events").await;
    let events: Value = serde_json::from_str(&answer.body).unwrap();
    let passes: Vec<u64> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["pass"].as_u64().unwrap())
        .collect();
    assert_eq!(passes, [2, 3, 4]);
    admin.stop().await;
}

#[tokio::test]
async fn debug_audit_shows_the_last_round_even_after_the_ring_moved_on() {
    let admin = Admin::start(2, Bus::default()).await;
    let answer = admin.get("/debug/audit").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.body);

    for pods in [10, 12] {
        admin.bus.publish(Event::AuditCompleted {
            pods,
            duration: std::time::Duration::from_millis(3),
            counts: Vec::new(),
            violations: vec![AuditViolation {
                namespace: "shop".into(),
                pod: "web-1".into(),
                kind: "Pod",
                api_version: "v1",
                name: "web-1".into(),
                uid: "uid-web-1".into(),
                mode: poolkeeper_bus::Mode::Enforce,
                first_found: true,
                pool: "hangzhou".into(),
                reason: "node_outside_pool",
                node: Some("beijing-1".into()),
                message: "runs on beijing-1, outside pool hangzhou".into(),
            }],
            truncated: false,
            results: Default::default(),
        });
    }
    for pass in 0..5 {
        admin
            .bus
            .publish(Event::ReconciliationStarted { pass, keys: 1 });
    }
    let answer = admin.get("/debug/audit").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let round: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(round["event"]["type"], "AuditCompleted");
    assert_eq!(round["event"]["pods"], 12);
    assert_eq!(round["event"]["violations"][0]["node"], "beijing-1");
    admin.stop().await;
}

#[tokio::test]
async fn debug_events_marks_where_it_lagged() {
    // Each subscriber may fall two events behind; five are published
    // without the feeder getting a chance to run in between.
    let admin = Admin::start(16, Bus::new(2)).await;
    for pass in 0..5 {
        admin
            .bus
            .publish(Event::ReconciliationStarted { pass, keys: 1 });
    }
    let answer = admin.get("/debug/events").await;
    let events: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        event_types(&events),
        ["lagged 3", "ReconciliationStarted", "ReconciliationStarted"]
    );
    assert_eq!(events[2]["event"]["pass"], 4);
    admin.stop().await;
}

#[tokio::test]
async fn a_busy_port_is_a_clear_error() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let bus = Bus::default();
    let settings = AdminSettings {
        addr,
        ..AdminSettings::from(&Config::default())
    };
    let mut server = AdminServer::new(
        settings.clone(),
        &bus,
        Health::default(),
        Registry::default(),
    );
    let error = server.bind().await.unwrap_err();
    assert!(matches!(error, HealthError::Bind { addr: a, .. } if a == addr));
    assert!(
        error
            .to_string()
            .starts_with(&format!("admin server cannot listen on {addr}: ")),
        "{error}"
    );

    // Started without binding first, it fails the same way.
    let server = AdminServer::new(settings, &bus, Health::default(), Registry::default());
    let (ready_tx, ready) = watch::channel(Readiness::Waiting("starting".into()));
    let ctx = Context::new(CancellationToken::new(), Activity::default(), ready_tx);
    let error = Box::new(server).run(ctx).await.unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with(&format!("admin server cannot listen on {addr}: ")),
        "{error}"
    );
    assert!(!ready.borrow().is_ready(), "not ready without a listener");
}
