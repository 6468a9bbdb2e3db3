//! [`LeaseElector`] through the real kube client against an in-process
//! stand-in for the Lease API (one Lease, optimistic concurrency on
//! `resourceVersion`, switchable failures). Lease durations are whole
//! seconds in the API, so these tests take a few seconds of real time.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use parking_lot::{Mutex, MutexGuard};
use poolkeeper_kube::{LeaseElector, LeaseSettings};
use poolkeeper_supervisor::{LeaderElector, LeadershipReporter};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "poolkeeper-system";
const LEASE: &str = "poolkeeper";

#[derive(Default)]
struct Store {
    lease: Option<Value>,
    version: u64,
    fail_writes: bool,
}

type Shared = Arc<Mutex<Store>>;

/// What the stand-in answers: a status code and a JSON body.
type Reply = (StatusCode, axum::Json<Value>);

fn status(code: StatusCode, reason: &str) -> Reply {
    (
        code,
        axum::Json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": reason, "reason": reason, "code": code.as_u16(),
        })),
    )
}

async fn read(State(store): State<Shared>) -> Reply {
    match &store.lock().lease {
        Some(lease) => (StatusCode::OK, axum::Json(lease.clone())),
        None => status(StatusCode::NOT_FOUND, "NotFound"),
    }
}

/// Locks the store for a write, or answers with the failure that a test
/// switched on.
fn lock_for_write(store: &Shared) -> Result<MutexGuard<'_, Store>, Reply> {
    let store = store.lock();
    if store.fail_writes {
        return Err(status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"));
    }
    Ok(store)
}

fn stored(store: &mut Store, mut lease: Value) -> Reply {
    store.version += 1;
    lease["metadata"]["resourceVersion"] = json!(store.version.to_string());
    lease["kind"] = json!("Lease");
    lease["apiVersion"] = json!("coordination.k8s.io/v1");
    store.lease = Some(lease.clone());
    (StatusCode::OK, axum::Json(lease))
}

async fn create(
    State(store): State<Shared>,
    axum::Json(lease): axum::Json<Value>,
) -> Result<Reply, Reply> {
    let mut store = lock_for_write(&store)?;
    if store.lease.is_some() {
        return Err(status(StatusCode::CONFLICT, "AlreadyExists"));
    }
    Ok(stored(&mut store, lease))
}

async fn replace(
    State(store): State<Shared>,
    axum::Json(lease): axum::Json<Value>,
) -> Result<Reply, Reply> {
    let mut store = lock_for_write(&store)?;
    let current = store
        .lease
        .as_ref()
        .map(|l| l["metadata"]["resourceVersion"].clone());
    match current {
        None => Err(status(StatusCode::NOT_FOUND, "NotFound")),
        Some(version) if version != lease["metadata"]["resourceVersion"] => {
            Err(status(StatusCode::CONFLICT, "Conflict"))
        }
        Some(_) => Ok(stored(&mut store, lease)),
    }
}

async fn api_server(store: Shared) -> kube::Client {
    let base = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
    let app = Router::new()
        .route(&base, post(create))
        .route(&format!("{base}/{LEASE}"), get(read).put(replace))
        .with_state(store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn settings(identity: &str) -> LeaseSettings {
    LeaseSettings {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(500),
        retry_period: Duration::from_millis(50),
        namespace: NAMESPACE.to_owned(),
        name: LEASE.to_owned(),
        identity: identity.to_owned(),
    }
}

struct Candidate {
    changes: mpsc::UnboundedReceiver<bool>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), poolkeeper_supervisor::BoxError>>,
    term: poolkeeper_supervisor::LeaderTerm,
}

impl Candidate {
    fn start(client: &kube::Client, identity: &str) -> Self {
        let elector = LeaseElector::new(client.clone(), settings(identity));
        let term = elector.term();
        let (reporter, changes) = LeadershipReporter::channel();
        let stop = CancellationToken::new();
        let task = tokio::spawn(Box::new(elector).campaign(reporter, stop.clone()));
        Self {
            changes,
            stop,
            task,
            term,
        }
    }

    async fn next_change(&mut self) -> bool {
        tokio::time::timeout(Duration::from_secs(10), self.changes.recv())
            .await
            .expect("a leadership change within 10s")
            .expect("the elector is still running")
    }

    fn no_change_yet(&mut self) -> bool {
        self.changes.try_recv().is_err()
    }

    async fn stop(mut self) -> Vec<bool> {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
        let mut rest = Vec::new();
        while let Ok(change) = self.changes.try_recv() {
            rest.push(change);
        }
        rest
    }
}

fn spec(store: &Shared) -> Value {
    store.lock().lease.as_ref().unwrap()["spec"].clone()
}

#[tokio::test]
async fn leadership_moves_on_release() {
    let store = Shared::default();
    let client = api_server(store.clone()).await;

    let mut a = Candidate::start(&client, "pod-a");
    assert!(a.next_change().await, "a creates the lease and leads");
    let created = spec(&store);
    assert_eq!(created["holderIdentity"], "pod-a");
    assert_eq!(created["leaseDurationSeconds"], 1);
    assert_eq!(created["leaseTransitions"], 0);

    let mut b = Candidate::start(&client, "pod-b");
    // Renewals keep the lease a's.
    tokio::time::timeout(Duration::from_millis(1500), b.changes.recv())
        .await
        .expect_err("b follows while a renews");
    assert_eq!(spec(&store)["holderIdentity"], "pod-a");
    assert_ne!(spec(&store)["renewTime"], created["renewTime"], "a renewed");

    assert_eq!(
        a.stop().await,
        [false],
        "a gives leadership up when stopped"
    );
    assert!(b.next_change().await, "b takes over the released lease");
    let taken = spec(&store);
    assert_eq!(taken["holderIdentity"], "pod-b");
    assert_eq!(taken["leaseTransitions"], 1);

    assert_eq!(b.stop().await, [false]);
    assert_eq!(spec(&store).get("holderIdentity"), None, "released on stop");
}

#[tokio::test]
async fn an_abandoned_lease_is_taken_over_after_it_expires() {
    let store = Shared::default();
    store.lock().lease = Some(json!({
        "metadata": {"name": LEASE, "namespace": NAMESPACE, "resourceVersion": "7"},
        "spec": {
            "holderIdentity": "crashed-pod",
            "leaseDurationSeconds": 1,
            "renewTime": "2020-01-01T00:00:00.000000Z",
            "leaseTransitions": 4,
        },
    }));
    store.lock().version = 7;
    let client = api_server(store.clone()).await;

    let started = tokio::time::Instant::now();
    let mut c = Candidate::start(&client, "pod-c");
    assert!(c.next_change().await);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waits a full lease duration from its own first sight, whatever renewTime says"
    );
    assert_eq!(spec(&store)["holderIdentity"], "pod-c");
    assert_eq!(spec(&store)["leaseTransitions"], 5);
    c.stop().await;
}

#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down() {
    let store = Shared::default();
    let client = api_server(store.clone()).await;
    let mut a = Candidate::start(&client, "pod-a");
    assert!(a.next_change().await);
    assert!(a.no_change_yet());

    store.lock().fail_writes = true;
    let failing = tokio::time::Instant::now();
    assert!(!a.next_change().await, "gives up after renewDeadline");
    let waited = failing.elapsed();
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert!(
        waited < Duration::from_secs(1),
        "before the lease expires: {waited:?}"
    );

    store.lock().fail_writes = false;
    assert!(
        a.next_change().await,
        "its own lease is renewed once writes work again"
    );
    a.stop().await;
}

/// While leading, the term's epoch is the Lease's `leaseTransitions` and it
/// holds at most `renewDeadline`; once renewals fail, no write is permitted
/// from the moment leadership is given up.
#[tokio::test]
async fn the_term_follows_the_lease() {
    let store = Shared::default();
    let client = api_server(store.clone()).await;
    let mut a = Candidate::start(&client, "pod-a");
    assert!(a.next_change().await);
    let term = a.term.current().expect("a confirmed term");
    assert_eq!(
        Some(term.epoch),
        spec(&store)["leaseTransitions"].as_i64(),
        "the epoch is leaseTransitions"
    );
    let left = term
        .valid_until
        .saturating_duration_since(tokio::time::Instant::now());
    assert!(left <= Duration::from_millis(500), "{left:?}");
    assert!(a.term.permit().is_ok());

    store.lock().fail_writes = true;
    assert!(!a.next_change().await);
    assert!(
        a.term.permit().is_err(),
        "no write permitted once leadership is given up"
    );
    a.stop().await;
}
