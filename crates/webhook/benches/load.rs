//! Admission latency and throughput of the real [`WebhookServer`] over HTTPS
//! keep-alive on loopback, driven by `wrk`.
//!
//! The server runs in-process as a supervisor component on a 2-worker tokio
//! runtime, with an index of 1,000 nodes in 50 Edge pools, the NodePools and
//! the placement ConfigMap, and a fresh self-signed certificate. `wrk -t1`
//! POSTs one AdmissionReview over and over to the validate or the mutate
//! path, on 1, 4 and 16 keep-alive connections (closed loop: a connection
//! sends its next request when the answer arrives), then paced: 18
//! connections each pausing a random 1 to 5 ms after every answer (`delay()`
//! in the Lua script; wrk's timers have millisecond resolution), which comes
//! to about 5,000 requests/s arriving at spread-out times. wrk (not wrk2)
//! cannot send at a fixed rate, so the paced run is the nearest it gets. wrk
//! and the server share the machine's cores.
//!
//! `cargo bench -p poolkeeper-webhook --bench load` needs `wrk` on the PATH
//! (`apt-get install wrk`). Without `--bench` (as under `cargo test
//! --benches`) it only starts the server and checks both answers, no wrk.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use poolkeeper_api::NodePool;
use poolkeeper_bus::Bus;
use poolkeeper_config::Config;
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_supervisor::testing::{Running, spawn};
use poolkeeper_webhook::{CERT_FILE, KEY_FILE, WebhookServer, WebhookSettings};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const NAME: &str = "webhook_load";
const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const NODES: usize = 1_000;
const POOLS: usize = 50;
const DURATION: &str = "10s";
const CONNECTIONS: [u32; 3] = [1, 4, 16];
/// The paced run: connections, each pausing a random 1..=5 ms (3 ms on
/// average) after every answer, which comes to about 5,000 requests/s.
const PACED_CONNECTIONS: u32 = 18;
const PACED_MAX_DELAY_MS: u32 = 5;
const PATIENCE: Duration = Duration::from_secs(20);
/// Set to a number of seconds to keep the server up for wrk runs by hand
/// instead of running the load test.
const SERVE_ENV: &str = "POOLKEEPER_BENCH_SERVE_SECS";

const POLICY: &str = "
bindings:
  - namespace: shop
    nodePool: pool-003
  - namespace: warehouse
    nodePool: pool-004
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
";

fn edge_taint() -> Value {
    json!({"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"})
}

fn populated_index(settings: &WebhookSettings) -> Index {
    let index = Index::new(POOL_LABEL);
    for p in 0..POOLS {
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "apps.openyurt.io/v1beta2",
            "kind": "NodePool",
            "metadata": {"name": format!("pool-{p:03}")},
            "spec": {"type": "Edge", "taints": [edge_taint()]}
        }))
        .expect("a NodePool");
        index.apply(pool);
    }
    for i in 0..NODES {
        let name = format!("ip-10-1-{}-{}.eu-west-1.compute.internal", i / 256, i % 256);
        let zone = ["eu-west-1a", "eu-west-1b", "eu-west-1c"][i % 3];
        let labels = json!({
            POOL_LABEL: format!("pool-{:03}", i % POOLS),
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": "m5.xlarge",
            "topology.kubernetes.io/region": "eu-west-1",
            "topology.kubernetes.io/zone": zone,
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/instance-type": "m5.xlarge",
        });
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [edge_taint()]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("a Node");
        index.apply(node);
    }
    let source = &settings.policy;
    let mut data = serde_json::Map::new();
    data.insert(source.key.clone(), json!(POLICY));
    let policy: ConfigMap = serde_json::from_value(json!({
        "metadata": {"namespace": source.namespace, "name": source.name},
        "data": data
    }))
    .expect("a ConfigMap");
    index.apply(policy);
    index
}

/// A Deployment's Pod in namespace `shop` (bound to `pool-003`), plus `spec`.
fn review(uid: &str, spec: Value) -> Value {
    let mut pod_spec = json!({
        "containers": [{
            "name": "checkout",
            "image": "ghcr.io/shop/checkout-service:2026.11.3",
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                          "limits": {"memory": "512Mi"}},
        }],
        "serviceAccountName": "checkout",
    });
    if let (Some(pod_spec), Value::Object(extra)) = (pod_spec.as_object_mut(), spec) {
        pod_spec.extend(extra);
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "uid": "5e4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                    "system:authenticated"]},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"generateName": "checkout-7d9c5b6f4-", "namespace": "shop",
                                    "labels": {"app": "checkout", "pod-template-hash": "7d9c5b6f4"}},
                       "spec": pod_spec},
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// The plain Pod as the mutating webhook receives it.
fn mutate_body() -> String {
    review("bench-mutate", json!({})).to_string()
}

/// The same Pod as the validating webhook receives it after mutation: pool
/// affinity and the edge toleration.
fn validate_body() -> String {
    review(
        "bench-validate",
        json!({
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": POOL_LABEL, "operator": "In", "values": ["pool-003"]}]}]}}},
            "tolerations": [{"key": "node-role.kubernetes.io/edge", "operator": "Exists",
                             "effect": "NoSchedule"}],
        }),
    )
    .to_string()
}

struct Pki {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer =
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA");
        Self { issuer }
    }

    fn write_serving_pair(&self, dir: &Path) {
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        std::fs::write(dir.join(KEY_FILE), key.serialize_pem()).expect("writes tls.key");
        std::fs::write(dir.join(CERT_FILE), cert.pem()).expect("writes tls.crt");
    }

    fn connector(&self) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::clone(self.issuer.der()))
            .expect("CA is a trust anchor");
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }
}

/// One POST over a fresh TLS connection; the AdmissionReview response.
async fn post(connector: &TlsConnector, addr: SocketAddr, path: &str, body: String) -> Value {
    let tcp = TcpStream::connect(addr).await.expect("connects");
    let name = ServerName::try_from("localhost").expect("server name");
    let tls = connector.connect(name, tcp).await.expect("TLS handshake");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("HTTP handshake");
    tokio::spawn(connection);
    let request = hyper::Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    assert_eq!(response.status(), 200, "{path}");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    serde_json::from_slice::<Value>(&body).expect("an AdmissionReview")["response"].clone()
}

struct Server {
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
    running: Running,
    _cert_dir: tempfile::TempDir,
}

fn start_server(pki: &Pki) -> Server {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cert_dir = tempfile::tempdir().expect("temporary directory");
    pki.write_serving_pair(cert_dir.path());
    let settings = WebhookSettings {
        listen: "127.0.0.1:0".parse().expect("address"),
        cert_dir: cert_dir.path().to_owned(),
        ..WebhookSettings::from(&Config::default())
    };
    let index = Arc::new(populated_index(&settings));
    let (addr, running) = runtime.block_on(async {
        let bus = Bus::default();
        bus.start();
        let mut server = WebhookServer::new(settings, index, &bus);
        let addr = server.bind().expect("binds a free port");
        let mut running = spawn(Box::new(server));
        running.wait_ready(PATIENCE).await;
        (addr, running)
    });
    Server {
        runtime,
        addr,
        running,
        _cert_dir: cert_dir,
    }
}

/// Both paths answer as intended before anything is measured.
fn check_answers(server: &Server, pki: &Pki) {
    let connector = pki.connector();
    server.runtime.block_on(async {
        let validated = post(&connector, server.addr, "/validate-pods", validate_body()).await;
        assert_eq!(validated["allowed"], true, "{validated}");
        let mutated = post(&connector, server.addr, "/mutate-pods", mutate_body()).await;
        assert_eq!(mutated["allowed"], true, "{mutated}");
        assert_eq!(mutated["patchType"], "JSONPatch", "{mutated}");
    });
}

fn stop(server: Server) {
    let result = server.runtime.block_on(async {
        tokio::time::timeout(PATIENCE, server.running.stop())
            .await
            .expect("the server stops")
    });
    assert!(result.is_ok(), "{result:?}");
}

fn wrk_available() -> bool {
    Command::new("wrk").arg("--version").output().is_ok()
}

/// A wrk script POSTing `body`; with `max_delay_ms`, each connection pauses
/// a random 1..=max_delay_ms milliseconds after every answer.
fn write_script(
    dir: &Path,
    name: &str,
    body: &str,
    max_delay_ms: Option<u32>,
) -> std::path::PathBuf {
    assert!(!body.contains("]==]"), "the body fits a Lua long string");
    let mut script = String::new();
    writeln!(script, "wrk.method = \"POST\"").unwrap();
    writeln!(
        script,
        "wrk.headers[\"Content-Type\"] = \"application/json\""
    )
    .unwrap();
    writeln!(script, "wrk.body = [==[{body}]==]").unwrap();
    if let Some(ms) = max_delay_ms {
        writeln!(script, "function delay() return math.random(1, {ms}) end").unwrap();
    }
    // --latency prints up to p99; the tail beyond it, in microseconds.
    writeln!(
        script,
        "function done(summary, latency, requests) \
         io.write(string.format(\"p99.9 %d\\n\", latency:percentile(99.9))) end"
    )
    .unwrap();
    let path = dir.join(name);
    std::fs::write(&path, script).expect("writes the wrk script");
    path
}

#[derive(Debug, Default)]
struct WrkResult {
    requests_per_second: f64,
    requests: u64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    non_2xx: u64,
    socket_errors: String,
}

/// `250.00us`, `1.20ms`, `2.00s` in microseconds.
fn micros(text: &str) -> f64 {
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1_000.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000_000.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        (text, 1.0)
    };
    number.parse::<f64>().unwrap_or(f64::NAN) * factor
}

fn parse_wrk(output: &str) -> WrkResult {
    let mut result = WrkResult::default();
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => result.p50_us = micros(v),
            ["90%", v] => result.p90_us = micros(v),
            ["99%", v] => result.p99_us = micros(v),
            ["p99.9", v] => result.p999_us = v.parse().unwrap_or(f64::NAN),
            ["Latency", _avg, _stdev, max, ..] => result.max_us = micros(max),
            ["Requests/sec:", v] => result.requests_per_second = v.parse().unwrap_or(f64::NAN),
            [n, "requests", "in", ..] => result.requests = n.parse().unwrap_or(0),
            ["Non-2xx", "or", "3xx", "responses:", n] => result.non_2xx = n.parse().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => result.socket_errors = rest.join(" "),
            _ => {}
        }
    }
    result
}

fn run_wrk(url: &str, connections: u32, script: &Path) -> WrkResult {
    let connections = connections.to_string();
    let script = script.to_string_lossy();
    let args = [
        "-t1",
        "-c",
        &connections,
        "-d",
        DURATION,
        "--latency",
        "-s",
        &script,
        url,
    ];
    let output = Command::new("wrk").args(args).output().expect("wrk starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "wrk {} failed: {}\n{stdout}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let result = parse_wrk(&stdout);
    assert!(result.requests > 0, "wrk sent nothing:\n{stdout}");
    result
}

fn load(server: &Server) {
    let scripts = tempfile::tempdir().expect("temporary directory");
    let paths = [
        ("validate", "/validate-pods", validate_body()),
        ("mutate", "/mutate-pods", mutate_body()),
    ];
    println!(
        "{NAME}: wrk -t1 -d{DURATION} --latency, HTTPS keep-alive to 127.0.0.1, {NODES} nodes in {POOLS} pools"
    );
    println!(
        "| webhook | connections | pacing | requests/s | p50 | p90 | p99 | p99.9 | max | non-2xx | socket errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (webhook, path, body) in &paths {
        let url = format!("https://{}{path}", server.addr);
        let closed = write_script(scripts.path(), &format!("{webhook}.lua"), body, None);
        let paced = write_script(
            scripts.path(),
            &format!("{webhook}-paced.lua"),
            body,
            Some(PACED_MAX_DELAY_MS),
        );
        let runs = CONNECTIONS
            .iter()
            .map(|c| (*c, &closed, "closed loop".to_owned()))
            .chain([(
                PACED_CONNECTIONS,
                &paced,
                format!("paced: random 1-{PACED_MAX_DELAY_MS} ms pause per request"),
            )]);
        for (connections, script, pacing) in runs {
            let r = run_wrk(&url, connections, script);
            println!(
                "| {webhook} | {connections} | {pacing} | {:.0} | {:.0} µs | {:.0} µs | {:.0} µs | {:.2} ms | {:.2} ms | {} | {} |",
                r.requests_per_second,
                r.p50_us,
                r.p90_us,
                r.p99_us,
                r.p999_us / 1_000.0,
                r.max_us / 1_000.0,
                r.non_2xx,
                if r.socket_errors.is_empty() {
                    "none"
                } else {
                    &r.socket_errors
                },
            );
        }
    }
}

/// Keeps the server up for a while, for wrk runs by hand: prints the URLs
/// and writes the request bodies beside the scripts it prints.
fn serve_for(server: &Server, duration: Duration) {
    let dir = std::env::temp_dir().join("poolkeeper-webhook-load");
    std::fs::create_dir_all(&dir).expect("creates the script directory");
    for (webhook, path, body) in [
        ("validate", "/validate-pods", validate_body()),
        ("mutate", "/mutate-pods", mutate_body()),
    ] {
        let script = write_script(&dir, &format!("{webhook}.lua"), &body, None);
        println!(
            "{webhook}: wrk -t1 -c4 -d10s --latency -s {} https://{}{path}",
            script.display(),
            server.addr
        );
    }
    println!("serving for {duration:?}");
    std::thread::sleep(duration);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        return;
    }
    if benching && !wrk_available() {
        eprintln!(
            "{NAME}: `wrk` was not found on the PATH; install it (Debian/Ubuntu: `apt-get install wrk`)"
        );
        std::process::exit(1);
    }
    let pki = Pki::new();
    let server = start_server(&pki);
    check_answers(&server, &pki);
    if let Some(seconds) = std::env::var(SERVE_ENV)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        serve_for(&server, Duration::from_secs(seconds));
    } else if benching {
        load(&server);
    } else {
        println!("{NAME}: server answers both webhooks (run with --bench for the load test)");
    }
    stop(server);
}
