//! Shared setup: a configuration for tests, the controller running in the
//! test's runtime, and plain HTTP requests to its admin server.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use poolkeeper::controller::Controller;
use poolkeeper_bus::Subscription;
use poolkeeper_config::{Config, LogFormat};
use poolkeeper_executor::{ClassWriter, KubeClassWriter};
use poolkeeper_testenv::TestEnv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Generous bound for anything the control plane does asynchronously.
pub const TIMEOUT: Duration = Duration::from_secs(30);

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
        let (status, text) = self.get("/metrics").await;
        assert_eq!(status, 200, "{text}");
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

/// A minimal HTTP/1.0 GET: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    (status, body.to_owned())
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
