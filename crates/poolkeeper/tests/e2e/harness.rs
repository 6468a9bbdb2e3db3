//! Shared setup: the control plane, a configuration for tests, the
//! controller running in the test's runtime, waiting for what they do
//! asynchronously, and plain HTTP requests to the admin server.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use poolkeeper::controller::Controller;
use poolkeeper_bus::{AdmissionResult, Delivery, Envelope, Event, Mode, Subscription, WebhookKind};
use poolkeeper_config::{Config, EngineChoice, LogFormat};
use poolkeeper_executor::{ClassWriter, KubeClassWriter};
use poolkeeper_testenv::{
    Process, TestEnv, TestEnvBuilder, TestEnvError, WebhookCert, WebhookRegistration, eventually,
};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::objects::{dry_run, plain_pod, pool_affinity};

/// Generous bound for anything the control plane does asynchronously.
pub const TIMEOUT: Duration = Duration::from_secs(30);
pub const BINARY: &str = env!("CARGO_BIN_EXE_poolkeeper");

/// A control plane from `builder` with poolkeeper's CRDs installed and
/// `namespaces` created.
pub async fn control_plane(builder: TestEnvBuilder, namespaces: &[&str]) -> TestEnv {
    let env = builder
        .crds(poolkeeper_api::crds())
        .start()
        .await
        .expect("the control plane starts");
    for namespace in namespaces {
        env.create_namespace(namespace)
            .await
            .unwrap_or_else(|e| panic!("namespace {namespace}: {e}"));
    }
    env
}

/// A serving certificate, written into the directory returned with it (the
/// `webhook.certDir` of the controller).
pub fn serving_cert() -> (TempDir, WebhookCert) {
    let cert_dir = tempfile::tempdir().expect("a temporary directory");
    let cert = WebhookCert::generate().expect("a webhook certificate");
    cert.write_to_dir(cert_dir.path())
        .expect("the certificate is written");
    (cert_dir, cert)
}

/// Puts `config`'s webhook server on a free loopback port fixed before it
/// starts and registers `deploy/webhooks` there (trusting `ca_pem`), so that
/// a controller started, stopped and started again is where the
/// configurations point.
pub async fn register_webhooks_at_a_fixed_port(env: &TestEnv, config: &mut Config, ca_pem: &str) {
    let port = crate::objects::free_port();
    config.webhook.listen = ([127, 0, 0, 1], port).into();
    env.register_webhooks(deploy_webhooks(port, ca_pem))
        .await
        .unwrap();
}

/// The webhook configurations of `deploy/webhooks`, pointed at a server on
/// the loopback `port` that presents a certificate of `ca_pem`.
pub fn deploy_webhooks(port: u16, ca_pem: &str) -> WebhookRegistration {
    WebhookRegistration::installed(port, ca_pem).expect("deploy/webhooks parses")
}

/// `eventually` within [`TIMEOUT`] that fails the test with what it waited
/// for.
pub async fn wait_until<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually(what, TIMEOUT, check)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits, for at most `within`, until the apiserver has poolkeeper place a
/// dry-run Pod of `namespace` into `pool` (it loads webhook configurations,
/// and poolkeeper its policy, asynchronously).
pub async fn placed_within(
    client: &Client,
    namespace: &str,
    pool: &str,
    within: Duration,
) -> Result<(), TestEnvError> {
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace);
    let probe = plain_pod("probe");
    let what = format!("pods of {namespace} placed into {pool}");
    eventually(&what, within, || async {
        let created = pods.create(&dry_run(), &probe).await.ok()?;
        (pool_affinity(&created).as_deref() == Some(pool)).then_some(())
    })
    .await
}

/// [`placed_within`] [`TIMEOUT`], failing the test with the apiserver's log.
pub async fn wait_placed(env: &TestEnv, namespace: &str, pool: &str) {
    placed_within(&env.client(), namespace, pool, TIMEOUT)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}\nkube-apiserver log:\n{}",
                env.log_tail(Process::ApiServer, 30)
            )
        });
}

/// The node kube-scheduler binds Pod `namespace/name` to.
pub async fn scheduled_node(env: &TestEnv, namespace: &str, name: &str) -> String {
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(env.client(), namespace);
    eventually(
        &format!("pod {namespace}/{name} bound to a node"),
        TIMEOUT,
        || async { pods.get(name).await.ok()?.spec?.node_name },
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nscheduler log:\n{}",
            env.log_tail(Process::Scheduler, 30)
        )
    })
}

/// Reads `events` until one satisfies `wanted`. Fails on a timeout and on a
/// lag (the awaited event may be among the missed ones).
pub async fn next_event(
    events: &mut Subscription,
    what: &str,
    mut wanted: impl FnMut(&Event) -> bool,
) -> Arc<Envelope> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let delivery = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("no {what} within {TIMEOUT:?}"))
            .expect("the bus stays open while the controller runs");
        match delivery {
            Delivery::Event(envelope) if wanted(&envelope.event) => return envelope,
            Delivery::Event(_) => {}
            Delivery::Lagged(missed) => {
                panic!("the observer lagged ({missed} events missed) waiting for {what}")
            }
        }
    }
}

/// A configuration for one test: loopback ports chosen by the kernel, no
/// leader election (one replica), a short debounce so tests run quickly.
pub fn test_config(namespace: &str, cert_dir: &Path) -> Config {
    let mut config = Config {
        namespace: namespace.to_owned(),
        ..Config::default()
    };
    config.leader_election.enabled = false;
    config.reconciler.debounce_interval = Duration::from_millis(100);
    config.reconciler.max_delay = Duration::from_secs(1);
    config.watchers.sync_timeout = Duration::from_secs(60);
    config.health.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.webhook.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.webhook.cert_dir = cert_dir.to_owned();
    config.shutdown.grace_period = Duration::from_secs(5);
    // One replica and no Service in front of it: nothing to drain.
    config.shutdown.drain_delay = Duration::ZERO;
    config.webhook.shutdown_timeout = Duration::from_secs(3);
    config.logging.format = LogFormat::Text;
    // The tests of the webhooks' decisions see every Pod; those of the CEL
    // engine (engines.rs) choose it.
    config.placement.engine = EngineChoice::Webhook;
    config
}

/// [`test_config`] of a controller that does MachineClass protection only,
/// in [`MACHINE_NAMESPACE`](crate::objects::MACHINE_NAMESPACE).
pub fn protection_only_config(cert_dir: &Path) -> Config {
    let mut config = test_config(crate::objects::MACHINE_NAMESPACE, cert_dir);
    config.placement.enabled = false;
    config.webhook.enabled = false;
    config
}

/// The controller running in a task of the test's runtime.
pub struct Running {
    pub admin: SocketAddr,
    pub webhook: Option<SocketAddr>,
    /// Subscribed before the bus started: sees every event.
    pub events: Subscription,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), poolkeeper::controller::ControllerError>>>,
}

impl Running {
    /// Starts the controller as it runs in a cluster: authenticated as
    /// poolkeeper's ServiceAccount, with no more rights than
    /// `deploy/rbac.yaml` grants (see [`controller_client`]).
    pub async fn start(config: &Config, env: &TestEnv) -> Self {
        let client = controller_client(env, config).await;
        let writer = KubeClassWriter::new(client.clone());
        Self::start_as(config, client, writer).await
    }

    /// [`Running::start`] with the MachineClass writer of the test.
    pub async fn start_with_writer<W: ClassWriter + Clone>(
        config: &Config,
        env: &TestEnv,
        writer: W,
    ) -> Self {
        let client = controller_client(env, config).await;
        Self::start_as(config, client, writer).await
    }

    /// The controller with whatever identity `client` has.
    pub async fn start_as<W: ClassWriter + Clone>(
        config: &Config,
        client: kube::Client,
        writer: W,
    ) -> Self {
        init_logging();
        let controller = Controller::build_with_writer(config, client, writer)
            .await
            .expect("the controller is wired");
        let events = controller.bus().subscribe("e2e-observer");
        let admin = controller.admin_addr();
        let webhook = controller.webhook_addr();
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(controller.run(async move {
            let _ = stop.await;
        }));
        Self {
            admin,
            webhook,
            events,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// Requests a graceful shutdown and asserts that it was clean.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let task = self.task.take().expect("stopped once");
        let result = tokio::time::timeout(TIMEOUT, task)
            .await
            .expect("the controller stops within the timeout")
            .expect("the controller task joins");
        assert!(result.is_ok(), "the controller stopped with {result:?}");
    }

    /// GET on the admin server.
    pub async fn get(&self, path: &str) -> (u16, String) {
        http_get(self.admin, path).await
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let (status, text) = self.get("/metrics").await;
        assert_eq!(status, 200, "{text}");
        text
    }

    /// `(webhook, result, mode, reason)` of the AdmissionDecided events
    /// published since the last call.
    pub fn admission_decisions(
        &mut self,
    ) -> Vec<(WebhookKind, AdmissionResult, Mode, &'static str)> {
        let mut found = Vec::new();
        while let Some(delivery) = self.events.try_recv() {
            if let Delivery::Event(envelope) = delivery
                && let Event::AdmissionDecided {
                    webhook,
                    result,
                    mode,
                    reason,
                    ..
                } = &envelope.event
            {
                found.push((*webhook, *result, *mode, *reason));
            }
        }
        found
    }

    /// The executor's totals as `/metrics` reports them, once they have
    /// stopped changing (the metrics observer follows the bus
    /// asynchronously).
    pub async fn executor_totals(&self) -> ExecutorTotals {
        let mut last = self.scrape_executor_totals().await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.scrape_executor_totals().await;
            if now == last {
                return now;
            }
            last = now;
        }
    }

    async fn scrape_executor_totals(&self) -> ExecutorTotals {
        let text = self.metrics().await;
        ExecutorTotals {
            passes: metric_sum(&text, "poolkeeper_executor_passes_total"),
            reconciliations: metric_sum(&text, "poolkeeper_executor_reconciliations_total{"),
            writes: metric_sum(
                &text,
                r#"poolkeeper_executor_api_writes_total{result="ok"}"#,
            ),
            conflicts: metric_sum(
                &text,
                r#"poolkeeper_executor_api_writes_total{result="conflict"}"#,
            ),
            errors: metric_sum(
                &text,
                r#"poolkeeper_executor_api_writes_total{result="error"}"#,
            ),
            machines_enqueued: metric_sum(&text, "poolkeeper_executor_machines_enqueued_total{"),
        }
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let (status, body) = self.get("/readyz?verbose").await;
            if status == 200 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not ready within {TIMEOUT:?}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Executor counters read from `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutorTotals {
    /// Passes started.
    pub passes: u64,
    /// Keys reconciled.
    pub reconciliations: u64,
    /// Patches the API server accepted.
    pub writes: u64,
    /// Patches rejected as conflicts.
    pub conflicts: u64,
    /// Patches that failed otherwise.
    pub errors: u64,
    pub machines_enqueued: u64,
}

/// The sum of the samples whose line starts with `prefix` (a metric name,
/// or a name and some of its labels).
pub fn metric_sum(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// A minimal HTTP/1.0 GET: status code and body. Fails the test when the
/// server does not answer within [`TIMEOUT`].
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path, TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"))
}

/// A minimal HTTP/1.0 GET with an overall `timeout`: status code and body,
/// or the error of a dead or silent server.
pub async fn try_http_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, io::Error>(response)
    };
    let response = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("GET {addr}{path}")))??;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("no status in {head:?}"))
        })?;
    Ok((status, body.to_owned()))
}

/// One subscriber for every test binary's logs; `RUST_LOG` selects them.
fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off")
            }),
        )
        .with_test_writer()
        .try_init();
}

/// The namespace and name of poolkeeper's ServiceAccount in `deploy/rbac.yaml`.
pub const SERVICE_ACCOUNT: (&str, &str) = ("poolkeeper-system", "poolkeeper");
const RBAC_MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/rbac.yaml");

/// A client authenticated as poolkeeper's ServiceAccount with a token from
/// the TokenRequest API, after `deploy/rbac.yaml` is applied (the
/// namespaces its objects live in are created first when missing). Panics
/// when `config` puts an object poolkeeper works on where the Roles grant
/// nothing, so a test cannot pass with rights a cluster would not give.
pub async fn controller_client(env: &TestEnv, config: &Config) -> kube::Client {
    let text = std::fs::read_to_string(RBAC_MANIFEST).expect("deploy/rbac.yaml is readable");
    let rbac = poolkeeper_testenv::parse_yaml_documents(&text, RBAC_MANIFEST)
        .expect("deploy/rbac.yaml parses");
    assert_roles_cover(config, &rbac);
    let namespaces: std::collections::BTreeSet<&str> = rbac
        .iter()
        .filter_map(|doc| doc.pointer("/metadata/namespace")?.as_str())
        .collect();
    for namespace in namespaces {
        let manifest = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n");
        env.apply_yaml(&manifest, "namespace of deploy/rbac.yaml")
            .await
            .unwrap_or_else(|e| panic!("namespace {namespace}: {e}"));
    }
    env.apply_files([RBAC_MANIFEST])
        .await
        .expect("deploy/rbac.yaml applies");
    service_account_client(env).await
}

/// A client with a fresh token of [`SERVICE_ACCOUNT`] (which must exist).
pub async fn service_account_client(env: &TestEnv) -> kube::Client {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;

    let (namespace, name) = SERVICE_ACCOUNT;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = kube::Api::<ServiceAccount>::namespaced(env.client(), namespace)
        .create_token_request(name, &kube::api::PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token for ServiceAccount {namespace}/{name}: {e}"))
        .status
        .and_then(|status| status.token)
        .expect("the TokenRequest has a token");
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(env.kubeconfig(), &options)
        .await
        .expect("the test kubeconfig loads");
    // The token alone: the admin's client certificate would authenticate first.
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..kube::config::AuthInfo::default()
    };
    kube::Client::try_from(config).expect("a client for the ServiceAccount")
}

/// Each namespace `config` makes poolkeeper work in has the Role that
/// grants it there.
fn assert_roles_cover(config: &Config, rbac: &[serde_json::Value]) {
    let granted = |namespace: &str, resource: &str| {
        rbac.iter().any(|doc| {
            doc["kind"] == "Role"
                && doc.pointer("/metadata/namespace").and_then(|n| n.as_str()) == Some(namespace)
                && doc["rules"].as_array().into_iter().flatten().any(|rule| {
                    rule["resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| r == resource)
                })
        })
    };
    let mut needed = Vec::new();
    if config.machine_classes.enabled {
        needed.push(("machineclasses", config.namespace.as_str()));
        needed.push(("machines", config.namespace.as_str()));
        if config.machine_classes.protect_secrets {
            needed.push(("secrets", config.namespace.as_str()));
        }
    }
    if config.placement.enabled {
        needed.push((
            "configmaps",
            config.placement.policy_config_map.namespace.as_str(),
        ));
    }
    if config.leader_election.enabled {
        needed.push(("leases", config.leader_election.lease_namespace.as_str()));
    }
    for (resource, namespace) in needed {
        assert!(
            granted(namespace, resource),
            "the test configuration has poolkeeper use {resource} in namespace {namespace}, \
             where deploy/rbac.yaml grants it nothing"
        );
    }
}
