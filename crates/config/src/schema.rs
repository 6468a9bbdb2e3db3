//! The configuration schema: one struct per YAML section.
//!
//! Every struct rejects unknown keys and takes its defaults from its
//! `Default` impl, so a partial file only overrides what it names.
//! `config/poolkeeper.yaml` documents every field with its default.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use poolkeeper_bus::{Constraints, Mode};
use serde::{Deserialize, Serialize};

use crate::formats::{duration, listen_addr, or_default};

/// The whole configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// Namespace of the MachineClasses and Machines.
    pub namespace: String,
    #[serde(deserialize_with = "or_default")]
    pub api_server: ApiServerConfig,
    #[serde(deserialize_with = "or_default")]
    pub leader_election: LeaderElectionConfig,
    #[serde(deserialize_with = "or_default")]
    pub watchers: WatchersConfig,
    #[serde(deserialize_with = "or_default")]
    pub reconciler: ReconcilerConfig,
    #[serde(deserialize_with = "or_default")]
    pub executor: ExecutorConfig,
    #[serde(deserialize_with = "or_default")]
    pub machine_classes: MachineClassesConfig,
    #[serde(deserialize_with = "or_default")]
    pub placement: PlacementConfig,
    #[serde(deserialize_with = "or_default")]
    pub audit: AuditConfig,
    #[serde(deserialize_with = "or_default")]
    pub webhook: WebhookConfig,
    #[serde(deserialize_with = "or_default")]
    pub webhook_selectors: WebhookSelectorsConfig,
    #[serde(deserialize_with = "or_default")]
    pub events: EventsConfig,
    #[serde(deserialize_with = "or_default")]
    pub health: HealthConfig,
    #[serde(deserialize_with = "or_default")]
    pub bus: BusConfig,
    #[serde(deserialize_with = "or_default")]
    pub shutdown: ShutdownConfig,
    #[serde(deserialize_with = "or_default")]
    pub logging: LoggingConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: "machine-system".to_owned(),
            api_server: ApiServerConfig::default(),
            leader_election: LeaderElectionConfig::default(),
            watchers: WatchersConfig::default(),
            reconciler: ReconcilerConfig::default(),
            executor: ExecutorConfig::default(),
            machine_classes: MachineClassesConfig::default(),
            placement: PlacementConfig::default(),
            audit: AuditConfig::default(),
            webhook: WebhookConfig::default(),
            webhook_selectors: WebhookSelectorsConfig::default(),
            events: EventsConfig::default(),
            health: HealthConfig::default(),
            bus: BusConfig::default(),
            shutdown: ShutdownConfig::default(),
            logging: LoggingConfig::default(),
        }
    }
}

/// `webhookSelectors`: how the leader keeps its webhook configurations'
/// selectors in step with the bindings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WebhookSelectorsConfig {
    /// The name of both webhook configurations (the mutating and the
    /// validating one) whose selectors are kept.
    pub configuration_name: String,
    /// Longest one read or patch of a configuration may take.
    #[serde(with = "duration")]
    pub request_timeout: Duration,
    /// First retry delay after a failed update, doubled on each further failure.
    #[serde(with = "duration")]
    pub retry_initial: Duration,
    /// Longest retry delay.
    #[serde(with = "duration")]
    pub retry_max: Duration,
}

impl Default for WebhookSelectorsConfig {
    fn default() -> Self {
        Self {
            configuration_name: "poolkeeper".to_owned(),
            request_timeout: Duration::from_secs(30),
            retry_initial: Duration::from_millis(200),
            retry_max: Duration::from_secs(5),
        }
    }
}

/// `events`: the Kubernetes Events the leader writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct EventsConfig {
    /// Longest one Event write may take before it is given up (logged).
    #[serde(with = "duration")]
    pub write_timeout: Duration,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// `apiServer`: the connection to the Kubernetes API server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApiServerConfig {
    /// Startup fails when the API server has not answered within this time
    /// (the timeout of the `apiserver` stage).
    #[serde(with = "duration")]
    pub startup_timeout: Duration,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        Self {
            startup_timeout: Duration::from_secs(10),
        }
    }
}

/// `leaderElection`: the Lease that makes one replica the writer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LeaderElectionConfig {
    /// Without leader election this replica always acts as the leader.
    pub enabled: bool,
    pub lease_name: String,
    pub lease_namespace: String,
    /// How long a lease stays valid without renewal (whole seconds: the Lease stores seconds).
    #[serde(with = "duration")]
    pub lease_duration: Duration,
    /// The leader gives up leadership when it could not renew for this long.
    #[serde(with = "duration")]
    pub renew_deadline: Duration,
    /// Interval between acquire/renew attempts.
    #[serde(with = "duration")]
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            lease_name: "poolkeeper".to_owned(),
            lease_namespace: "poolkeeper-system".to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// `watchers`: Kubernetes list/watch tuning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WatchersConfig {
    /// Objects per page of the initial list.
    pub page_size: u32,
    /// How long startup waits for every watched kind to be listed
    /// (`IndexSynchronized`): the timeout of the `watchers` stage.
    #[serde(with = "duration")]
    pub sync_timeout: Duration,
}

impl Default for WatchersConfig {
    fn default() -> Self {
        Self {
            page_size: 500,
            sync_timeout: Duration::from_secs(5 * 60),
        }
    }
}

/// `reconciler`: the debouncer between change events and reconciliation passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ReconcilerConfig {
    /// Quiet period after the last change before a pass is triggered.
    #[serde(with = "duration")]
    pub debounce_interval: Duration,
    /// Upper bound on how long continuous changes can postpone a pass.
    #[serde(with = "duration")]
    pub max_delay: Duration,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        Self {
            debounce_interval: Duration::from_millis(500),
            max_delay: Duration::from_secs(5),
        }
    }
}

/// `executor`: reconciliation passes and per-key requeues.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ExecutorConfig {
    /// MachineClasses and Secrets reconciled at the same time, across every open pass.
    pub concurrency: usize,
    /// Requeue delay after an API error, or while a deleted class is still in use.
    #[serde(with = "duration")]
    pub short_retry: Duration,
    /// Periodic requeue delay of a class in a steady state.
    #[serde(with = "duration")]
    pub long_retry: Duration,
    /// Requeue delay after a write conflict (HTTP 409).
    #[serde(with = "duration")]
    pub conflict_retry: Duration,
    /// Longest one finalizer patch may take before it counts as failed.
    #[serde(with = "duration")]
    pub write_timeout: Duration,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            concurrency: 4,
            short_retry: Duration::from_secs(5),
            long_retry: Duration::from_secs(10 * 60),
            conflict_retry: Duration::from_millis(200),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// `machineClasses`: MachineClass finalizer protection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MachineClassesConfig {
    pub enabled: bool,
    /// Finalizer kept on every MachineClass that Machines still use.
    pub finalizer: String,
    /// Keep `secretFinalizer` on the Secrets of `namespace` that
    /// MachineClasses reference (`secretRef`, `credentialsSecretRef`).
    /// Off: Secrets are neither watched nor written.
    pub protect_secrets: bool,
    /// Finalizer kept on every Secret a MachineClass references, as
    /// machine-controller-manager does; its own, not the class finalizer.
    pub secret_finalizer: String,
}

impl Default for MachineClassesConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            finalizer: "machine.sapcloud.io/machine-controller-manager".to_owned(),
            protect_secrets: true,
            secret_finalizer: "machine.sapcloud.io/machine-controller".to_owned(),
        }
    }
}

/// `placement`: NodePool placement of Pods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PlacementConfig {
    pub enabled: bool,
    /// Label naming the pool of a Node, and of a Pod that picks its pool itself.
    pub pool_label: String,
    /// The mode of a binding that names none.
    pub default_mode: Mode,
    /// What a binding that names none does with a Pod's own node constraints.
    pub default_constraints: Constraints,
    /// Namespaces never bound, whatever the policy says (poolkeeper's own,
    /// the policy ConfigMap's, is always excluded too).
    pub excluded_namespaces: Vec<String>,
    #[serde(deserialize_with = "or_default")]
    pub policy_config_map: PolicyConfigMapRef,
    #[serde(deserialize_with = "or_default")]
    pub namespace_labels: NamespaceLabels,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            pool_label: "apps.openyurt.io/nodepool".to_owned(),
            default_mode: Mode::Enforce,
            default_constraints: Constraints::Judge,
            excluded_namespaces: ["kube-system", "kube-public", "kube-node-lease"]
                .map(str::to_owned)
                .to_vec(),
            policy_config_map: PolicyConfigMapRef::default(),
            namespace_labels: NamespaceLabels::default(),
        }
    }
}

/// `placement.namespaceLabels`: the labels by which a Namespace binds
/// itself, as a binding of the policy ConfigMap would.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NamespaceLabels {
    /// Off: Namespaces are not watched; only the policy ConfigMap binds.
    pub enabled: bool,
    /// Label naming the Namespace's pool, or several joined by `_`.
    pub pool: String,
    /// Label naming the binding's mode; `placement.defaultMode` without it.
    pub mode: String,
    /// Label naming the binding's constraints; `placement.defaultConstraints`
    /// without it.
    pub constraints: String,
}

impl Default for NamespaceLabels {
    fn default() -> Self {
        Self {
            enabled: true,
            pool: "apps.openyurt.io/nodepool".to_owned(),
            mode: "poolkeeper.io/mode".to_owned(),
            constraints: "poolkeeper.io/constraints".to_owned(),
        }
    }
}

/// `placement.policyConfigMap`: where the namespace bindings and edge tolerations live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PolicyConfigMapRef {
    pub namespace: String,
    pub name: String,
    /// Data key holding the policy document.
    pub key: String,
}

impl Default for PolicyConfigMapRef {
    fn default() -> Self {
        Self {
            namespace: "poolkeeper-system".to_owned(),
            name: "poolkeeper-placement".to_owned(),
            key: "placement.yaml".to_owned(),
        }
    }
}

/// `audit`: the leader's periodic check of the Pods already running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Time between two audit rounds; `0s` turns the audit off.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// Pods per page of the audit's LIST.
    pub page_size: u32,
    /// LISTs of a round in flight at once (each namespace's pages one
    /// after another); a few keep the round short without making the audit
    /// the API server's heaviest client.
    pub concurrency: usize,
    /// Violations kept in detail per round (`/debug/audit`, Events); the
    /// gauges count every one.
    pub max_reported: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            page_size: 500,
            concurrency: 4,
            max_reported: 100,
        }
    }
}

/// `webhook`: the HTTPS admission server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WebhookConfig {
    pub enabled: bool,
    #[serde(with = "listen_addr")]
    pub listen: SocketAddr,
    /// Directory holding `tls.crt` and `tls.key`; reloaded when they change.
    pub cert_dir: PathBuf,
    /// How often the certificate files are checked for a change.
    #[serde(with = "duration")]
    pub cert_reload_interval: Duration,
    /// How long startup waits for the certificate files to appear: the
    /// timeout of the `webhook` stage.
    #[serde(with = "duration")]
    pub certificate_timeout: Duration,
    /// On shutdown, how long in-flight admission requests may take to
    /// finish; part of `shutdown.gracePeriod`.
    #[serde(with = "duration")]
    pub shutdown_timeout: Duration,
    pub mutate_path: String,
    pub validate_path: String,
    /// Larger request bodies are refused.
    pub max_body_bytes: usize,
    /// A TLS handshake not done within this time closes the connection.
    #[serde(with = "duration")]
    pub tls_handshake_timeout: Duration,
    /// A request whose headers have not all arrived within this time closes
    /// the connection (slowloris).
    #[serde(with = "duration")]
    pub header_read_timeout: Duration,
    /// A request body not read within this time is answered 408.
    #[serde(with = "duration")]
    pub body_read_timeout: Duration,
    /// A keep-alive connection idle for this long is closed; longer than
    /// the API server's own idle timeout (90s).
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    #[serde(deserialize_with = "or_default")]
    pub certificate: WebhookCertificateConfig,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 9443),
            cert_dir: PathBuf::from("/tmp/k8s-webhook-server/serving-certs"),
            cert_reload_interval: Duration::from_secs(5),
            certificate_timeout: Duration::from_secs(5 * 60),
            shutdown_timeout: Duration::from_secs(15),
            mutate_path: "/mutate-pods".to_owned(),
            validate_path: "/validate-pods".to_owned(),
            max_body_bytes: 3 * 1024 * 1024,
            tls_handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections: 1024,
            certificate: WebhookCertificateConfig::default(),
        }
    }
}

/// `webhook.certificate`: where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WebhookCertificateConfig {
    pub source: CertificateSource,
    /// The `kubernetes.io/tls` Secret of sources `secret` and `self`, in
    /// poolkeeper's namespace (the placement policy ConfigMap's).
    pub secret_name: String,
    /// The Service the API server calls the webhooks through: the serving
    /// certificate of source `self` is for `<name>.<namespace>.svc` and
    /// `<name>.<namespace>.svc.cluster.local`.
    pub service_name: String,
    /// Source `self`: lifetime of a CA.
    #[serde(with = "duration")]
    pub ca_validity: Duration,
    /// Source `self`: lifetime of a serving certificate.
    #[serde(with = "duration")]
    pub leaf_validity: Duration,
    /// Source `self`: a serving certificate is renewed this long before it
    /// expires.
    #[serde(with = "duration")]
    pub renew_before: Duration,
}

impl Default for WebhookCertificateConfig {
    fn default() -> Self {
        const DAY: u64 = 24 * 60 * 60;
        Self {
            source: CertificateSource::Files,
            secret_name: "poolkeeper-webhook-tls".to_owned(),
            service_name: "poolkeeper-webhook".to_owned(),
            ca_validity: Duration::from_secs(365 * DAY),
            leaf_validity: Duration::from_secs(150 * DAY),
            renew_before: Duration::from_secs(15 * DAY),
        }
    }
}

/// `webhook.certificate.source`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CertificateSource {
    /// `tls.crt` / `tls.key` in `webhook.certDir` (a mounted Secret).
    #[default]
    Files,
    /// The Secret `secretName`, issued by someone else (cert-manager, an
    /// operator), read through the API.
    Secret,
    /// The Secret `secretName`, issued and rotated by poolkeeper's leader.
    #[serde(rename = "self")]
    SelfManaged,
}

impl CertificateSource {
    /// Whether every replica reads the serving certificate from the Secret.
    pub fn is_secret(self) -> bool {
        matches!(
            self,
            CertificateSource::Secret | CertificateSource::SelfManaged
        )
    }
}

/// `health`: the admin server (`/healthz`, `/readyz`, `/metrics`, `/debug/events`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HealthConfig {
    #[serde(with = "listen_addr")]
    pub listen: SocketAddr,
    /// A component busy with one unit of work for longer than this is reported stalled.
    #[serde(with = "duration")]
    pub stall_timeout: Duration,
    /// Bus events kept for `/debug/events`.
    pub debug_events: usize,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8081),
            stall_timeout: Duration::from_secs(2 * 60),
            debug_events: 256,
        }
    }
}

/// `bus`: the in-process event bus.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BusConfig {
    /// Events a subscriber may fall behind before it is told it lagged.
    pub capacity: usize,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self { capacity: 8192 }
    }
}

/// `shutdown`: graceful termination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// Time for in-flight work to finish after SIGTERM before the process exits.
    #[serde(with = "duration")]
    pub grace_period: Duration,
    /// After SIGTERM, how long the webhook keeps answering while `/readyz`
    /// fails, so the endpoint leaves the Service before the server stops.
    #[serde(with = "duration")]
    pub drain_delay: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(25),
            drain_delay: Duration::from_secs(5),
        }
    }
}

/// `logging`: log output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// A level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or a
    /// `tracing` filter such as `info,kube=warn`.
    pub level: String,
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self {
            level: "info".to_owned(),
            format: LogFormat::Json,
        }
    }
}

/// `logging.format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    #[default]
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}
