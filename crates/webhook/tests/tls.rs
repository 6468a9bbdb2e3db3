//! The server over real TLS on 127.0.0.1, run as a component: serving,
//! certificate rotation without dropping established connections, TLS 1.2
//! and 1.3, HTTP/1.1 and HTTP/2, waiting for a certificate, shutdown.
//! Observed through HTTP, readiness and the bus only.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use poolkeeper_bus::{AdmissionResult, Bus, Event, WebhookKind};
use poolkeeper_config::Config;
use poolkeeper_index::Index;
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::Component;
use poolkeeper_supervisor::testing::{BusRecorder, Running, spawn};
use poolkeeper_webhook::{CERT_FILE, KEY_FILE, WebhookError, WebhookServer, WebhookSettings};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

mod common;

use common::Ca;

/// Anything in these tests that waits on the server gives up after this.
const PATIENCE: Duration = Duration::from_secs(20);
/// How often the server looks at the certificate files.
const RELOAD: Duration = Duration::from_millis(20);

/// Replaces the pair the way a Secret volume does: new files renamed into place.
fn install(dir: &Path, cert: &str, key: &str) {
    std::fs::write(dir.join("tls.key.new"), key).unwrap();
    std::fs::write(dir.join("tls.crt.new"), cert).unwrap();
    std::fs::rename(dir.join("tls.key.new"), dir.join(KEY_FILE)).unwrap();
    std::fs::rename(dir.join("tls.crt.new"), dir.join(CERT_FILE)).unwrap();
}

async fn handshake(connector: &TlsConnector, addr: SocketAddr) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

/// The certificate a new connection is served.
async fn served_certificate(connector: &TlsConnector, addr: SocketAddr) -> CertificateDer<'static> {
    let tls = handshake(connector, addr).await;
    tls.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// Polls new connections until they are served `expected`.
async fn wait_until_served(
    connector: &TlsConnector,
    addr: SocketAddr,
    expected: &CertificateDer<'_>,
) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while served_certificate(connector, addr).await != *expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(RELOAD).await;
    }
}

/// For several reload intervals, every new connection is served `expected`.
async fn keeps_serving(connector: &TlsConnector, addr: SocketAddr, expected: &CertificateDer<'_>) {
    for _ in 0..10 {
        assert_eq!(served_certificate(connector, addr).await, *expected);
        tokio::time::sleep(RELOAD).await;
    }
}

/// An HTTP/1.1 keep-alive connection.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    peer: CertificateDer<'static>,
    version: rustls::ProtocolVersion,
}

async fn connect(connector: &TlsConnector, addr: SocketAddr) -> Connection {
    let tls = handshake(connector, addr).await;
    let (_, session) = tls.get_ref();
    let peer = session.peer_certificates().unwrap()[0].clone();
    let version = session.protocol_version().unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(connection);
    Connection {
        sender,
        peer,
        version,
    }
}

fn review_request(uid: &str) -> hyper::Request<Full<Bytes>> {
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        }
    }))
    .unwrap();
    hyper::Request::post("https://localhost/validate-pods")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

async fn response_of(response: hyper::Response<hyper::body::Incoming>, uid: &str) -> Value {
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["response"]["uid"], uid);
    review["response"].clone()
}

async fn admit(connection: &mut Connection, uid: &str) -> Value {
    connection.sender.ready().await.unwrap();
    let response = connection
        .sender
        .send_request(review_request(uid))
        .await
        .unwrap();
    response_of(response, uid).await
}

/// A webhook server bound to a free local port, running as a component,
/// serving the pair in `cert_dir` and looking for a new one every 20ms.
struct Served {
    addr: SocketAddr,
    recorder: BusRecorder,
    running: Running,
}

impl Served {
    fn start(cert_dir: &Path) -> Self {
        let bus = Bus::default();
        let recorder = BusRecorder::new(&bus);
        bus.start();
        let settings = WebhookSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            cert_dir: cert_dir.to_owned(),
            cert_reload_interval: RELOAD,
            ..WebhookSettings::from(&Config::default())
        };
        let mut server = WebhookServer::new(
            settings,
            &bus,
            Arc::new(Index::new("pool")),
            PolicyCache::from(&Config::default().placement),
        );
        let addr = server.bind().unwrap();
        assert_eq!(server.local_addr(), Some(addr));
        Self {
            addr,
            recorder,
            running: spawn(Box::new(server)),
        }
    }

    /// Cancels the server and checks that it stops cleanly.
    async fn stop(self) {
        let result = tokio::time::timeout(PATIENCE, self.running.stop())
            .await
            .unwrap();
        assert!(result.is_ok(), "{result:?}");
    }

    fn validations_allowed(&self) -> usize {
        self.recorder.count(|event| {
            matches!(
                event,
                Event::AdmissionDecided {
                    webhook: WebhookKind::Validate,
                    result: AdmissionResult::Allowed,
                    ..
                }
            )
        })
    }
}

#[tokio::test]
async fn serves_rotates_certificates_and_keeps_connections() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let (first_pem, first_key, first_der) = ca.leaf("first");
    install(dir.path(), &first_pem, &first_key);

    let mut served = Served::start(dir.path());
    served.running.wait_ready(PATIENCE).await;
    let addr = served.addr;
    let connector = ca.any_version();
    let mut kept = connect(&connector, addr).await;
    assert_eq!(kept.peer, first_der);
    assert_eq!(kept.version, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(admit(&mut kept, "one").await["allowed"], true);

    // TLS 1.2 clients are served too.
    let mut old_client = connect(&ca.client(&[&rustls::version::TLS12], &[]), addr).await;
    assert_eq!(old_client.version, rustls::ProtocolVersion::TLSv1_2);
    assert_eq!(admit(&mut old_client, "tls12").await["allowed"], true);

    // Rotate: a half-written pair (new certificate, old key) is refused and
    // the old one stays in service; the complete pair is taken.
    let (second_pem, second_key, second_der) = ca.leaf("second");
    std::fs::write(dir.path().join(CERT_FILE), &second_pem).unwrap();
    keeps_serving(&connector, addr, &first_der).await;
    let mut during = connect(&connector, addr).await;
    assert_eq!(admit(&mut during, "during").await["allowed"], true);
    install(dir.path(), &second_pem, &second_key);
    wait_until_served(&connector, addr, &second_der).await;

    let mut fresh = connect(&connector, addr).await;
    assert_eq!(fresh.peer, second_der);
    assert_eq!(admit(&mut fresh, "two").await["allowed"], true);

    // The connection opened before the rotation still works.
    assert_eq!(admit(&mut kept, "three").await["allowed"], true);
    assert_eq!(kept.peer, first_der);

    // Garbage in the files later on does not take the server down.
    std::fs::write(dir.path().join(CERT_FILE), "not a certificate").unwrap();
    keeps_serving(&connector, addr, &second_der).await;
    let mut after_garbage = connect(&connector, addr).await;
    assert_eq!(admit(&mut after_garbage, "four").await["allowed"], true);
    assert!(served.running.is_ready());

    // Every request was published, whichever connection it came on.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while served.validations_allowed() < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            served.recorder.events()
        );
        tokio::time::sleep(RELOAD).await;
    }
    assert_eq!(served.validations_allowed(), 6);
    served.stop().await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed after shutdown"
    );
}

#[tokio::test]
async fn serves_http2() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let (pem, key, _) = ca.leaf("h2");
    install(dir.path(), &pem, &key);
    let mut served = Served::start(dir.path());
    served.running.wait_ready(PATIENCE).await;

    let connector = ca.client(&[&rustls::version::TLS13], &[b"h2", b"http/1.1"]);
    let tls = handshake(&connector, served.addr).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    // Several requests multiplexed on the one connection.
    let requests = ["h2-a", "h2-b", "h2-c"].map(|uid| {
        let response = sender.send_request(review_request(uid));
        async move { response_of(response.await.unwrap(), uid).await }
    });
    for response in futures::future::join_all(requests).await {
        assert_eq!(response["allowed"], true);
    }
    served.stop().await;
}

#[tokio::test]
async fn waits_for_a_certificate_before_serving() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let mut served = Served::start(dir.path());

    // Not ready while the Secret is empty; the reason says why.
    let expected = format!(
        "waiting for the serving certificate in {}: cannot read {}",
        dir.path().display(),
        dir.path().join(CERT_FILE).display()
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match served.running.waiting_reason() {
            Some(reason) if reason.starts_with(&expected) => break,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "waiting reason {other:?}, expected {expected:?}"
            ),
        }
        tokio::time::sleep(RELOAD).await;
    }
    assert!(!served.running.is_ready());

    // A client that connects now waits in the listen backlog and is served
    // once the certificate is there.
    let connector = ca.client(&[&rustls::version::TLS13], &[]);
    let addr = served.addr;
    let early = tokio::spawn(async move { connect(&connector, addr).await });
    tokio::time::sleep(RELOAD * 3).await;
    assert!(!early.is_finished(), "no TLS before a certificate");

    let (pem, key, der) = ca.leaf("late");
    install(dir.path(), &pem, &key);
    served.running.wait_ready(PATIENCE).await;
    let mut connection = tokio::time::timeout(PATIENCE, early)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(connection.peer, der);
    assert_eq!(admit(&mut connection, "early").await["allowed"], true);
    served.stop().await;
}

#[tokio::test]
async fn stops_while_waiting_for_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path());
    served.stop().await;
}

#[tokio::test]
async fn a_taken_port_is_a_failure() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let settings = WebhookSettings {
        listen: taken.local_addr().unwrap(),
        ..WebhookSettings::from(&Config::default())
    };
    let index = Arc::new(Index::new("pool"));
    let bus = Bus::default();

    // Reported by the bind step, before the server runs...
    let mut server = WebhookServer::new(
        settings.clone(),
        &bus,
        Arc::clone(&index),
        PolicyCache::from(&Config::default().placement),
    );
    let error = server.bind().unwrap_err();
    assert!(matches!(error, WebhookError::Listen { .. }), "{error:?}");
    assert!(
        error.to_string().starts_with("cannot listen on 127.0.0.1:"),
        "{error}"
    );
    assert_eq!(server.local_addr(), None);

    // ...and by the component when nothing bound it first.
    let server = WebhookServer::new(
        settings,
        &bus,
        index,
        PolicyCache::from(&Config::default().placement),
    );
    assert_eq!(server.readiness_check(), Some("webhook"));
    let running = spawn(Box::new(server));
    let error = tokio::time::timeout(PATIENCE, running.stop())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        error.to_string().starts_with("cannot listen on 127.0.0.1:"),
        "{error}"
    );
}
