//! Wiring: every component built from the configuration and placed in its
//! supervisor stage (DESIGN §3).
//!
//! | stage | components | ready when |
//! |---|---|---|
//! | `admin` | admin server | listening |
//! | `apiserver` | API server check | the API server answered |
//! | `watchers` | one watcher per kind, sync tracker | every kind listed (`IndexSynchronized`) |
//! | `webhook` | HTTPS admission server (if enabled) | listening |
//! | `leader` | leader election gating reconciler + executor (if MachineClasses are enabled) | campaigning |

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use poolkeeper_bus::{Bus, ResourceKind};
use poolkeeper_config::Config;
use poolkeeper_executor::{
    ClassWriter, Executor, ExecutorMetrics, ExecutorSettings, ExecutorStats, KubeClassWriter,
    Retries,
};
use poolkeeper_health::{AdminServer, AdminSettings, SharedRegistry};
use poolkeeper_index::Index;
use poolkeeper_placement::{PlacementSettings, PolicySource};
use poolkeeper_reconciler::{Reconciler, ReconcilerMetrics, ReconcilerSettings};
use poolkeeper_supervisor::{
    BoxError, Component, Context, Gate, Health, LeaderElector, LeaderGated, LeaseElector,
    LeaseSettings, Supervisor, SupervisorError, SupervisorSettings,
};
use poolkeeper_watchers::{WatcherSettings, Watchers};
use poolkeeper_webhook::{WebhookHandle, WebhookServer, WebhookSettings};
use prometheus_client::registry::Registry;

/// How long the API server may stay unreachable at startup before the
/// process gives up (and Kubernetes restarts it with backoff).
pub const APISERVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Name of the readiness check that passes on `IndexSynchronized`.
pub const INDEX_CHECK: &str = "index";
/// Name of the readiness check of the API server connection.
pub const APISERVER_CHECK: &str = "apiserver";

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no Kubernetes client configuration (in-cluster or $KUBECONFIG): {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Health(#[from] poolkeeper_health::HealthError),
    #[error("watchers: {0}")]
    Watchers(#[from] poolkeeper_watchers::WatchersError),
    #[error("reconciler: {0}")]
    Reconciler(#[from] poolkeeper_reconciler::ReconcilerError),
    #[error("webhook: {0}")]
    Webhook(#[from] poolkeeper_webhook::WebhookError),
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
}

/// Builds the client from `kubeconfig`, or else in-cluster / `$KUBECONFIG`
/// / `~/.kube/config` as kubectl does.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, ControllerError> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ControllerError::Kubeconfig {
                    path: path.to_owned(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| ControllerError::Kubeconfig {
                    path: path.to_owned(),
                    source,
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(ControllerError::InferConfig)?,
    };
    tracing::info!(server = %config.cluster_url, "using the Kubernetes API server");
    Client::try_from(config).map_err(ControllerError::Client)
}

/// Runs poolkeeper until `shutdown` completes or a component fails.
pub async fn run(
    config: Config,
    kubeconfig: Option<PathBuf>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ControllerError> {
    let client = client(kubeconfig.as_deref()).await?;
    let controller = Controller::build(&config, client).await?;
    tracing::info!(admin = %controller.admin_addr(), "admin server listening");
    controller.run(shutdown).await
}

/// A fully wired poolkeeper, ready to run.
pub struct Controller {
    supervisor: Supervisor,
    bus: Bus,
    index: Arc<Index>,
    health: Health,
    registry: SharedRegistry,
    admin_addr: SocketAddr,
    webhook: Option<WebhookHandle>,
    executor_stats: Option<ExecutorStats>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("supervisor", &self.supervisor)
            .field("admin_addr", &self.admin_addr)
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// Wires every component, writing MachineClasses through `client`.
    pub async fn build(config: &Config, client: Client) -> Result<Self, ControllerError> {
        let writer = KubeClassWriter::new(client.clone());
        Self::build_with_writer(config, client, writer).await
    }

    /// [`Controller::build`] with the executor writing through `writer`
    /// (cloned for each leadership term), so tests can inject conflicts.
    pub async fn build_with_writer<W: ClassWriter + Clone>(
        config: &Config,
        client: Client,
        writer: W,
    ) -> Result<Self, ControllerError> {
        let bus = Bus::new(config.bus.capacity);
        let health = Health::default();
        let mut registry = Registry::default();
        bus.register_metrics(&mut registry);
        let registry: SharedRegistry = Arc::new(Mutex::new(registry));

        let mut admin = AdminServer::new(
            AdminSettings {
                addr: config.health.listen,
                debug_events: config.health.debug_events,
            },
            health.clone(),
            registry.clone(),
            &bus,
        );
        let admin_addr = admin.bind().await?;

        let mut supervisor = Supervisor::new(
            SupervisorSettings {
                stall_timeout: config.health.stall_timeout,
                grace_period: config.shutdown.grace_period,
                startup_timeout: config.watchers.sync_timeout,
            },
            health.clone(),
            bus.clone(),
        );
        supervisor.stage("admin").add(Box::new(admin));
        supervisor
            .stage("apiserver")
            .add(Box::new(ApiServerCheck::new(
                client.clone(),
                health.readiness_gate(APISERVER_CHECK, "not connected yet"),
            )));

        let placement = placement_settings(config);
        let index = Arc::new(Index::new(&placement.pool_label));
        let watcher_settings = WatcherSettings {
            kinds: WatcherSettings::kinds_for(
                config.machine_classes.enabled,
                config.placement.enabled,
            ),
            namespace: config.namespace.clone(),
            page_size: config.watchers.page_size,
            placement_config_map: placement.policy.config_map_key(),
            pool_label: placement.pool_label.clone(),
        };
        let watchers = Watchers::new(client.clone(), &bus, index.clone(), &watcher_settings)?
            .with_readiness_gate(health.readiness_gate(INDEX_CHECK, "index not synchronized"));
        {
            let mut registry = registry.lock();
            index.register_metrics(&mut registry);
            watchers.register_metrics(&mut registry);
        }
        supervisor
            .stage("watchers")
            .extend(watchers.into_components());

        let webhook = if config.webhook.enabled {
            let server = WebhookServer::new(
                webhook_settings(config, placement),
                index.clone(),
                &bus,
                health.readiness_gate(poolkeeper_webhook::COMPONENT_NAME, "not started"),
            )?;
            server.register_metrics(&mut registry.lock());
            let handle = server.handle();
            supervisor.stage("webhook").add(Box::new(server));
            Some(handle)
        } else {
            None
        };

        let executor_stats = if config.machine_classes.enabled {
            let gated = leader_gated(config, client, &bus, index.clone(), writer)?;
            gated.gated.register_metrics(&mut registry.lock());
            gated.reconciler.register(&mut registry.lock());
            gated.executor.register(&mut registry.lock());
            supervisor.stage("leader").add(Box::new(gated.gated));
            Some(gated.executor.stats())
        } else {
            None
        };

        supervisor.register_metrics(&mut registry.lock());
        Ok(Self {
            supervisor,
            bus,
            index,
            health,
            registry,
            admin_addr,
            webhook,
            executor_stats,
        })
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    pub fn index(&self) -> &Arc<Index> {
        &self.index
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    pub fn registry(&self) -> &SharedRegistry {
        &self.registry
    }

    /// The webhook server's handle, when the webhook is enabled.
    pub fn webhook(&self) -> Option<&WebhookHandle> {
        self.webhook.as_ref()
    }

    /// Executor totals over every leadership term, when MachineClass
    /// protection is enabled.
    pub fn executor_stats(&self) -> Option<&ExecutorStats> {
        self.executor_stats.as_ref()
    }

    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ControllerError> {
        Ok(self.supervisor.run(shutdown).await?)
    }
}

pub(crate) fn placement_settings(config: &Config) -> PlacementSettings {
    let source = &config.placement.policy_config_map;
    PlacementSettings {
        pool_label: config.placement.pool_label.clone(),
        policy: PolicySource {
            namespace: source.namespace.clone(),
            name: source.name.clone(),
            key: source.key.clone(),
        },
    }
}

fn webhook_settings(config: &Config, placement: PlacementSettings) -> WebhookSettings {
    let webhook = &config.webhook;
    WebhookSettings {
        listen: webhook.listen,
        cert_dir: webhook.cert_dir.clone(),
        mutate_path: webhook.mutate_path.clone(),
        validate_path: webhook.validate_path.clone(),
        max_body_bytes: webhook.max_body_bytes,
        // In-flight admission requests get most of the grace period.
        shutdown_timeout: config.shutdown.grace_period.mul_f32(0.8),
        placement,
        ..WebhookSettings::default()
    }
}

struct LeaderStage {
    gated: LeaderGated,
    reconciler: ReconcilerMetrics,
    executor: ExecutorMetrics,
}

fn leader_gated<W: ClassWriter + Clone>(
    config: &Config,
    client: Client,
    bus: &Bus,
    index: Arc<Index>,
    writer: W,
) -> Result<LeaderStage, ControllerError> {
    let reconciler_settings = ReconcilerSettings {
        debounce_interval: config.reconciler.debounce_interval,
        max_delay: config.reconciler.max_delay,
        kinds: vec![ResourceKind::MachineClass, ResourceKind::Machine],
    };
    reconciler_settings.validate()?;
    let executor_settings = ExecutorSettings {
        finalizer: config.machine_classes.finalizer.clone(),
        concurrency: config.executor.concurrency,
        retries: Retries {
            short_retry: config.executor.short_retry,
            long_retry: config.executor.long_retry,
            conflict_retry: config.executor.conflict_retry,
        },
        ..ExecutorSettings::default()
    };
    let elector: Option<Box<dyn LeaderElector>> = if config.leader_election.enabled {
        let election = &config.leader_election;
        let settings = LeaseSettings {
            lease_duration: election.lease_duration,
            renew_deadline: election.renew_deadline,
            retry_period: election.retry_period,
            ..LeaseSettings::new(&election.lease_namespace, &election.lease_name, identity())
        };
        Some(Box::new(LeaseElector::new(client, settings)?))
    } else {
        None
    };

    let reconciler_metrics = ReconcilerMetrics::new();
    let executor_metrics = ExecutorMetrics::default();
    let factory = {
        let bus = bus.clone();
        let reconciler_metrics = reconciler_metrics.clone();
        let executor_metrics = executor_metrics.clone();
        move || -> Vec<Box<dyn Component>> {
            let reconciler = Reconciler::with_metrics(
                &bus,
                reconciler_settings.clone(),
                reconciler_metrics.clone(),
            )
            .expect("reconciler settings were validated when the controller was built");
            let executor = Executor::with_metrics(
                &bus,
                index.clone(),
                writer.clone(),
                executor_settings.clone(),
                executor_metrics.clone(),
            );
            vec![Box::new(reconciler), Box::new(executor)]
        }
    };
    Ok(LeaderStage {
        gated: LeaderGated::new("leader-election", elector, bus.clone(), factory),
        reconciler: reconciler_metrics,
        executor: executor_metrics,
    })
}

/// This replica's name in the Lease: the Pod name where the Deployment
/// passes it, else the host name; a process-unique suffix keeps two
/// processes on one host apart.
fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "poolkeeper".to_owned());
    format!("{base}_{}", unique_suffix())
}

fn unique_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:08x}", hasher.finish() as u32)
}

/// `error: cause: cause`, so that "connection refused" is not hidden behind
/// a generic "client error".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Fails startup with a clear error when the API server cannot be reached,
/// instead of watchers retrying forever behind a `/readyz` that never
/// turns green.
struct ApiServerCheck {
    client: Client,
    gate: Gate,
}

impl ApiServerCheck {
    fn new(client: Client, gate: Gate) -> Self {
        Self { client, gate }
    }

    async fn check(self: Box<Self>, ctx: Context) -> Result<(), BoxError> {
        let deadline = tokio::time::Instant::now() + APISERVER_TIMEOUT;
        let mut delay = Duration::from_millis(200);
        let version = loop {
            let attempt = tokio::time::timeout_at(deadline, self.client.apiserver_version());
            let error = tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                result = attempt => match result {
                    Ok(Ok(version)) => break version,
                    Ok(Err(error)) => error_chain(&error),
                    Err(_) => "no answer".to_owned(),
                },
            };
            self.gate.fail(format!("API server unreachable: {error}"));
            if tokio::time::Instant::now() + delay >= deadline {
                return Err(format!(
                    "the Kubernetes API server could not be reached within {}: {error}",
                    humantime::format_duration(APISERVER_TIMEOUT)
                )
                .into());
            }
            tracing::warn!(%error, "API server not reachable yet, retrying");
            tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(2));
        };
        tracing::info!(
            version = %version.git_version,
            platform = %version.platform,
            "connected to the Kubernetes API server"
        );
        self.gate.pass();
        ctx.mark_ready();
        ctx.cancelled().await;
        Ok(())
    }
}

impl Component for ApiServerCheck {
    fn name(&self) -> &'static str {
        "apiserver-check"
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.check(ctx))
    }
}
