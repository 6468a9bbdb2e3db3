//! The server over real TLS on 127.0.0.1: serving, certificate rotation
//! without dropping established connections, shutdown.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use poolkeeper_bus::{Bus, Event};
use poolkeeper_index::Index;
use poolkeeper_supervisor::{Activity, BoxError, Component, Context, Health};
use poolkeeper_webhook::{CERT_FILE, KEY_FILE, WebhookHandle, WebhookServer, WebhookSettings};
use prometheus_client::registry::Registry;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

/// Anything in these tests that waits on the server gives up after this.
const PATIENCE: Duration = Duration::from_secs(20);

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "poolkeeper test CA");
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    /// A serving certificate for localhost: (cert PEM, key PEM, cert DER).
    fn leaf(&self, common_name: &str) -> (String, String, CertificateDer<'static>) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    }

    fn client(&self, versions: &[&'static rustls::SupportedProtocolVersion]) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(versions)
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }
}

/// Polls `condition` (yielding to the server's tasks) until it holds.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::task::yield_now().await;
    }
}

fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// Replaces the pair the way a Secret volume does: new files renamed into place.
fn install(dir: &Path, cert: &str, key: &str) {
    std::fs::write(dir.join("tls.key.new"), key).unwrap();
    std::fs::write(dir.join("tls.crt.new"), cert).unwrap();
    std::fs::rename(dir.join("tls.key.new"), dir.join(KEY_FILE)).unwrap();
    std::fs::rename(dir.join("tls.crt.new"), dir.join(CERT_FILE)).unwrap();
}

struct Connection {
    sender: SendRequest<Full<Bytes>>,
    peer: CertificateDer<'static>,
    version: rustls::ProtocolVersion,
}

async fn connect(connector: &TlsConnector, addr: std::net::SocketAddr) -> Connection {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
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

fn pod_review(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
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
    .unwrap()
}

async fn admit(connection: &mut Connection, uid: &str) -> Value {
    let request = hyper::Request::post("/validate-pods")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(pod_review(uid))))
        .unwrap();
    connection.sender.ready().await.unwrap();
    let response = connection.sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["response"]["uid"], uid);
    review["response"].clone()
}

/// A webhook server on a free local port, running as a component, serving
/// the pair in `cert_dir` and looking for a new one every 20ms.
struct Served {
    bus: Bus,
    health: Health,
    handle: WebhookHandle,
    registry: Registry,
    cancel: CancellationToken,
    ready: watch::Receiver<bool>,
    task: JoinHandle<Result<(), BoxError>>,
}

impl Served {
    fn start(cert_dir: &Path) -> Self {
        let bus = Bus::default();
        let health = Health::default();
        let gate = health.readiness_gate("webhook", "starting");
        let settings = WebhookSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            cert_dir: cert_dir.to_owned(),
            cert_reload_interval: Duration::from_millis(20),
            ..WebhookSettings::default()
        };
        let server =
            WebhookServer::new(settings, Arc::new(Index::new("pool")), &bus, gate).unwrap();
        let handle = server.handle();
        let mut registry = Registry::default();
        server.register_metrics(&mut registry);
        bus.start();
        let cancel = CancellationToken::new();
        let (ready_tx, ready) = watch::channel(false);
        let ctx = Context::new(cancel.clone(), Activity::default(), ready_tx);
        let task = tokio::spawn(Box::new(server).run(ctx));
        Self {
            bus,
            health,
            handle,
            registry,
            cancel,
            ready,
            task,
        }
    }

    /// Waits until the server listens and reports ready; returns where.
    async fn listening_and_ready(&mut self) -> std::net::SocketAddr {
        let addr = tokio::time::timeout(PATIENCE, self.handle.listening())
            .await
            .unwrap();
        tokio::time::timeout(PATIENCE, self.ready.wait_for(|ready| *ready))
            .await
            .unwrap()
            .unwrap();
        addr
    }

    /// Cancels the server and checks that it stops cleanly.
    async fn stop(self) {
        self.cancel.cancel();
        let result = tokio::time::timeout(PATIENCE, self.task)
            .await
            .unwrap()
            .unwrap();
        assert!(result.is_ok(), "{result:?}");
    }
}

#[tokio::test]
async fn serves_rotates_certificates_and_keeps_connections() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let (first_pem, first_key, first_der) = ca.leaf("first");
    install(dir.path(), &first_pem, &first_key);

    let mut served = Served::start(dir.path());
    served.bus.publish(Event::IndexSynchronized);
    let addr = served.listening_and_ready().await;
    let readiness = served.health.readiness();
    assert_eq!(readiness.len(), 1);
    assert_eq!(readiness[0].status, Ok(()));
    tokio::time::timeout(PATIENCE, served.handle.wait_index_synchronized())
        .await
        .unwrap();

    let connector = ca.client(&[&rustls::version::TLS13, &rustls::version::TLS12]);
    let mut kept = connect(&connector, addr).await;
    assert_eq!(kept.peer, first_der);
    assert_eq!(kept.version, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(admit(&mut kept, "one").await["allowed"], true);

    // TLS 1.2 clients are served too.
    let mut old_client = connect(&ca.client(&[&rustls::version::TLS12]), addr).await;
    assert_eq!(old_client.version, rustls::ProtocolVersion::TLSv1_2);
    assert_eq!(admit(&mut old_client, "tls12").await["allowed"], true);

    // Rotate: a half-written pair (new certificate, old key) is refused and
    // the old one stays in service; the complete pair is taken.
    let (second_pem, second_key, second_der) = ca.leaf("second");
    std::fs::write(dir.path().join(CERT_FILE), &second_pem).unwrap();
    eventually("the mismatched pair to be refused", || {
        encode(&served.registry)
            .contains("poolkeeper_webhook_certificate_reloads_total{result=\"error\"} 1")
    })
    .await;
    assert_eq!(served.handle.certificate_generation(), 1);
    let mut during = connect(&connector, addr).await;
    assert_eq!(during.peer, first_der, "the mismatched pair is not served");
    assert_eq!(admit(&mut during, "during").await["allowed"], true);
    install(dir.path(), &second_pem, &second_key);
    tokio::time::timeout(PATIENCE, served.handle.wait_certificate_generation(2))
        .await
        .expect("the new certificate is loaded");

    let mut fresh = connect(&connector, addr).await;
    assert_eq!(
        fresh.peer, second_der,
        "new connections get the new certificate"
    );
    assert_eq!(admit(&mut fresh, "two").await["allowed"], true);

    // The connection opened before the rotation still works.
    assert_eq!(admit(&mut kept, "three").await["allowed"], true);
    assert_eq!(kept.peer, first_der);

    // Garbage in the files later on does not take the server down.
    std::fs::write(dir.path().join(CERT_FILE), "not a certificate").unwrap();
    eventually("the garbage to be refused", || {
        encode(&served.registry)
            .contains("poolkeeper_webhook_certificate_reloads_total{result=\"error\"} 2")
    })
    .await;
    let mut after_garbage = connect(&connector, addr).await;
    assert_eq!(admit(&mut after_garbage, "four").await["allowed"], true);
    assert_eq!(after_garbage.peer, second_der);
    assert!(encode(&served.registry).contains(
        "poolkeeper_admission_requests_total{webhook=\"validate\",result=\"allowed\"} 6"
    ));

    let health = served.health.clone();
    served.stop().await;
    assert!(
        health.readiness()[0].status.is_err(),
        "not ready after shutdown"
    );
}

#[tokio::test]
async fn waits_for_a_certificate_before_listening() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let mut served = Served::start(dir.path());

    // Not ready while the Secret is empty; the reason says why.
    let waiting = |health: &Health| match &health.readiness()[0].status {
        Err(reason) if reason.contains("waiting for a serving certificate") => Some(reason.clone()),
        _ => None,
    };
    eventually("the gate to report the missing certificate", || {
        waiting(&served.health).is_some()
    })
    .await;
    let reason = waiting(&served.health).unwrap();
    assert!(reason.contains(CERT_FILE), "{reason}");
    assert_eq!(served.handle.local_addr(), None);
    assert!(!*served.ready.borrow());

    let (pem, key, der) = ca.leaf("late");
    install(dir.path(), &pem, &key);
    let addr = served.listening_and_ready().await;
    let mut connection = connect(&ca.client(&[&rustls::version::TLS13]), addr).await;
    assert_eq!(connection.peer, der);
    // The index has not synchronized: the request is answered, and denied.
    let response = admit(&mut connection, "early").await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 503);

    served.stop().await;
}

#[tokio::test]
async fn a_taken_port_is_a_failure() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let (pem, key, _) = ca.leaf("busy");
    install(dir.path(), &pem, &key);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bus = Bus::default();
    let health = Health::default();
    let settings = WebhookSettings {
        listen: taken.local_addr().unwrap(),
        cert_dir: dir.path().to_owned(),
        ..WebhookSettings::default()
    };
    let server = WebhookServer::new(
        settings,
        Arc::new(Index::new("pool")),
        &bus,
        health.readiness_gate("webhook", "starting"),
    )
    .unwrap();
    let (ready_tx, _ready_rx) = tokio::sync::watch::channel(false);
    let ctx = Context::new(CancellationToken::new(), Activity::default(), ready_tx);
    let result = tokio::time::timeout(PATIENCE, Box::new(server).run(ctx))
        .await
        .unwrap();
    let error = result.unwrap_err().to_string();
    assert!(error.starts_with("cannot listen on 127.0.0.1:"), "{error}");
}
