//! Wiring: every component built from the configuration and placed in its
//! supervisor stage (DESIGN §3). Each component takes its settings
//! `From<&Config>`; nothing here maps fields one by one.
//!
//! | stage | components | ready when | startup timeout |
//! |---|---|---|---|
//! | `admin` | admin server, metrics observer | listening | none (ready at once) |
//! | `apiserver` | API server check | the API server answered | `apiServer.startupTimeout` (the check's own) |
//! | `watchers` | one watcher per kind, sync tracker (`/readyz` check `index`) | every kind listed | `watchers.syncTimeout` |
//! | `serve` | HTTPS admission server (if enabled), and leader election gating reconciler and executor (if MachineClasses are enabled), audit and rejected-bindings reporter (if placement is enabled), webhook selectors (if the webhook is too), the webhook certificate (if it comes from a Secret) and Kubernetes Event recorder | certificate loaded and serving; campaigning | `webhook.certificateTimeout` |
//!
//! The two jobs share the last stage so that neither waits for the other: a
//! replica still waiting for its serving certificate campaigns and protects
//! MachineClasses meanwhile (`/readyz` says what the webhook waits for). On
//! shutdown the webhook keeps answering for `shutdown.drainDelay` while
//! `/readyz` fails, and leadership is released at once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kube::Client;
use poolkeeper_admin::{AdminServer, AdminSettings, EventMetrics, ObjectCounts};
use poolkeeper_audit::{Audit, AuditSettings};
use poolkeeper_bus::Bus;
use poolkeeper_certificates::{CertificateSettings, WebhookCertificates};
use poolkeeper_config::Config;
use poolkeeper_executor::{ClassWriter, Executor, ExecutorSettings, KubeClassWriter};
use poolkeeper_index::Index;
use poolkeeper_kube::{ApiServerCheck, ClientError, LeaseElector, LeaseSettings};
use poolkeeper_placement::PolicyCache;
use poolkeeper_policy::RejectedBindings;
use poolkeeper_reconciler::{Reconciler, ReconcilerSettings};
use poolkeeper_recorder::{EventRecorder, RecorderSettings};
use poolkeeper_selectors::{SelectorSettings, WebhookSelectors};
use poolkeeper_supervisor::{
    Component, Drained, Health, LeaderElector, LeaderGated, Supervisor, SupervisorError,
    SupervisorSettings,
};
use poolkeeper_watchers::{WatcherSettings, Watchers};
use poolkeeper_webhook::{WebhookServer, WebhookSettings};
use prometheus_client::registry::Registry;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Health(#[from] poolkeeper_admin::HealthError),
    #[error("webhook: {0}")]
    Webhook(#[from] poolkeeper_webhook::WebhookError),
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
}

/// Runs poolkeeper until `shutdown` completes or a component fails.
pub async fn run(
    config: Config,
    kubeconfig: Option<PathBuf>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ControllerError> {
    let client = poolkeeper_kube::client(kubeconfig.as_deref()).await?;
    let controller = Controller::build(&config, client).await?;
    tracing::info!(admin = %controller.admin_addr(), "admin server listening");
    if let Some(webhook) = controller.webhook_addr() {
        tracing::info!(%webhook, "webhook server bound");
    }
    controller.run(shutdown).await
}

/// A fully wired poolkeeper, ready to run.
pub struct Controller {
    supervisor: Supervisor,
    bus: Bus,
    admin_addr: SocketAddr,
    webhook_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("supervisor", &self.supervisor)
            .field("admin_addr", &self.admin_addr)
            .field("webhook_addr", &self.webhook_addr)
            .finish_non_exhaustive()
    }
}

/// What the stages are built from.
struct Wiring<'a> {
    config: &'a Config,
    client: Client,
    bus: Bus,
    index: Arc<Index>,
    /// The one holder of the placement policy: the webhook, the webhook
    /// selectors, the audit and the rejected-bindings reporter read each
    /// policy generation, and the excluded namespaces, from it.
    policy: PolicyCache,
    registry: Registry,
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
        let mut wiring = Wiring {
            config,
            client,
            index: Arc::new(Index::new(&config.placement.pool_label)),
            policy: PolicyCache::from(&config.placement),
            registry: Registry::with_prefix("poolkeeper"),
            bus: bus.clone(),
        };
        bus.register_metrics(wiring.registry.sub_registry_with_prefix("bus"));
        let mut supervisor = Supervisor::new(
            SupervisorSettings::from(config),
            health.clone(),
            bus.clone(),
        );
        supervisor.register_metrics(&mut wiring.registry);
        let metrics = EventMetrics::new(&bus, &mut wiring.registry, object_counts(&wiring.index));

        // Built first, added last: the admin server renders the registry
        // every other stage registered into.
        let apiserver =
            ApiServerCheck::new(wiring.client.clone(), config.api_server.startup_timeout);
        let watchers = wiring.watchers();
        let webhook = wiring.webhook().await?;
        let leader = wiring.leader(writer);
        let webhook_addr = webhook.as_ref().map(|(_, addr)| *addr);

        let mut admin =
            AdminServer::new(AdminSettings::from(config), &bus, health, wiring.registry);
        let admin_addr = admin.bind().await?;
        supervisor
            .stage("admin", None)
            .add(Box::new(admin))
            .add(Box::new(metrics));
        supervisor.stage("apiserver", None).add(Box::new(apiserver));
        supervisor
            .stage("watchers", Some(config.watchers.sync_timeout))
            .extend(watchers);
        let timeout = webhook
            .is_some()
            .then_some(config.webhook.certificate_timeout);
        let mut serve = supervisor.stage("serve", timeout);
        if let Some((server, _)) = webhook {
            serve.add(Box::new(Drained::new(
                Box::new(server),
                config.shutdown.drain_delay,
            )));
        }
        if let Some(leader) = leader {
            serve.add(Box::new(leader));
        }
        Ok(Self {
            supervisor,
            bus,
            admin_addr,
            webhook_addr,
        })
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Where the webhook server listens, when it is enabled.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook_addr
    }

    /// The bus, to subscribe to before [`Controller::run`] starts it.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ControllerError> {
        Ok(self.supervisor.run(shutdown).await?)
    }
}

impl Wiring<'_> {
    fn watchers(&self) -> Vec<Box<dyn Component>> {
        let settings = WatcherSettings::from(self.config);
        Watchers::new(
            &settings,
            &self.bus,
            self.client.clone(),
            self.index.clone(),
        )
        .into_components()
    }

    /// The webhook server, bound already so a busy port fails startup at
    /// once, and its address.
    async fn webhook(&self) -> Result<Option<(WebhookServer, SocketAddr)>, ControllerError> {
        if !self.config.webhook.enabled {
            return Ok(None);
        }
        let mut server = WebhookServer::new(
            WebhookSettings::from(self.config),
            &self.bus,
            self.index.clone(),
            self.policy.clone(),
        )
        .with_client(self.client.clone());
        let addr = server.bind()?;
        Ok(Some((server, addr)))
    }

    /// Leader election gating fresh instances of the leader's components
    /// per term, when any of them runs.
    fn leader<W: ClassWriter + Clone>(&self, writer: W) -> Option<LeaderGated> {
        let config = self.config;
        if !(config.machine_classes.enabled || config.placement.enabled) {
            return None;
        }
        let election = &config.leader_election;
        let identity = identity();
        let elector: Option<Box<dyn LeaderElector>> = election.enabled.then(|| {
            let settings = LeaseSettings::new(election, identity.clone());
            Box::new(LeaseElector::new(self.client.clone(), settings)) as Box<dyn LeaderElector>
        });
        let components = LeaderComponents {
            classes: config.machine_classes.enabled,
            placement: config.placement.enabled,
            webhook: config.webhook.enabled,
            reconciler: ReconcilerSettings::from(config),
            executor: ExecutorSettings::from(config),
            audit: AuditSettings::from(config),
            selectors: SelectorSettings::from(config),
            certificates: CertificateSettings::from(config),
            recorder: RecorderSettings::from(config),
            policy: self.policy.clone(),
            bus: self.bus.clone(),
            index: self.index.clone(),
            client: self.client.clone(),
            identity,
            writer,
        };
        // Stopped before another replica can take the lease over.
        let stop_timeout = election
            .lease_duration
            .saturating_sub(election.renew_deadline);
        Some(LeaderGated::new(
            "leader-election",
            elector,
            self.bus.clone(),
            stop_timeout,
            move || components.build(),
        ))
    }
}

/// What the leader runs, built afresh for each term: one method per
/// component, each `None` when its part of poolkeeper is off.
struct LeaderComponents<W> {
    /// `machineClasses.enabled`: reconciler and executor.
    classes: bool,
    /// `placement.enabled`: audit (which idles while `audit.interval` is
    /// 0s) and rejected-bindings reporter; the webhook selectors too when
    /// `webhook.enabled`.
    placement: bool,
    webhook: bool,
    reconciler: ReconcilerSettings,
    executor: ExecutorSettings,
    audit: AuditSettings,
    selectors: SelectorSettings,
    /// Its source says whether the leader issues (`self`) or publishes
    /// (`secret`) the webhook's serving certificate.
    certificates: CertificateSettings,
    recorder: RecorderSettings,
    policy: PolicyCache,
    bus: Bus,
    index: Arc<Index>,
    client: Client,
    identity: String,
    writer: W,
}

impl<W: ClassWriter + Clone> LeaderComponents<W> {
    fn build(&self) -> Vec<Box<dyn Component>> {
        [
            self.reconciler(),
            self.executor(),
            self.audit(),
            self.rejected_bindings(),
            self.selectors(),
            self.certificates(),
            Some(self.recorder()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn reconciler(&self) -> Option<Box<dyn Component>> {
        self.classes
            .then(|| Box::new(Reconciler::new(self.reconciler.clone(), &self.bus)) as _)
    }

    fn executor(&self) -> Option<Box<dyn Component>> {
        self.classes.then(|| {
            Box::new(Executor::new(
                self.executor.clone(),
                &self.bus,
                self.index.clone(),
                self.writer.clone(),
            )) as _
        })
    }

    fn audit(&self) -> Option<Box<dyn Component>> {
        self.placement.then(|| {
            Box::new(Audit::new(
                self.audit.clone(),
                &self.bus,
                self.client.clone(),
                self.index.clone(),
                self.policy.clone(),
            )) as _
        })
    }

    /// Whenever placement is enabled, so that an installation without the
    /// webhook still reports the label bindings the audit does not apply.
    fn rejected_bindings(&self) -> Option<Box<dyn Component>> {
        self.placement.then(|| {
            Box::new(RejectedBindings::new(
                &self.bus,
                self.index.clone(),
                self.policy.clone(),
            )) as _
        })
    }

    fn selectors(&self) -> Option<Box<dyn Component>> {
        (self.placement && self.webhook).then(|| {
            Box::new(WebhookSelectors::new(
                self.selectors.clone(),
                &self.bus,
                self.client.clone(),
                self.index.clone(),
                self.policy.clone(),
            )) as _
        })
    }

    /// With the webhook, when its certificate comes from a Secret.
    fn certificates(&self) -> Option<Box<dyn Component>> {
        (self.webhook && self.certificates.source.is_secret()).then(|| {
            Box::new(WebhookCertificates::new(
                self.certificates.clone(),
                self.client.clone(),
            )) as _
        })
    }

    fn recorder(&self) -> Box<dyn Component> {
        Box::new(EventRecorder::new(
            self.recorder.clone(),
            &self.bus,
            self.client.clone(),
            self.identity.clone(),
        ))
    }
}

fn object_counts(index: &Arc<Index>) -> ObjectCounts {
    let index = index.clone();
    Arc::new(move || index.object_counts())
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
