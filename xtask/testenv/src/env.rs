//! Starting, using and stopping one control plane.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Taint};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, Config};
use serde_json::{Value, json};

use crate::binaries::Binaries;
use crate::certs::ClusterPki;
use crate::manifests::{WebhookRegistration, apply_rank, kind_of, read_yaml_files, yaml_files};
use crate::process::{ManagedProcess, create_temp_dir, free_port, remove_stale_temp_dirs};
use crate::proxy::ApiProxy;
use crate::{FIELD_MANAGER, TestEnvError, etcd, kubeconfig};

const POLL_INTERVAL: Duration = Duration::from_millis(100);
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);
/// How often startup picks new ports when etcd or kube-apiserver lost the race for one.
pub const START_ATTEMPTS: usize = 5;
const LOG_TAIL_LINES: usize = 40;

/// The processes of a control plane, for [`TestEnv::log_tail`], [`TestEnv::kill`] and
/// [`TestEnv::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    Etcd,
    ApiServer,
    Scheduler,
    ControllerManager,
}

/// Options of a control plane; see [`TestEnv::builder`].
#[derive(Debug)]
pub struct TestEnvBuilder {
    scheduler: bool,
    controller_manager: bool,
    crds: Vec<CustomResourceDefinition>,
    crd_files: Vec<PathBuf>,
    startup_timeout: Duration,
    binaries: Option<Binaries>,
    watch_cache: bool,
    client_qps: Option<u32>,
}

impl Default for TestEnvBuilder {
    fn default() -> Self {
        Self {
            scheduler: false,
            controller_manager: false,
            crds: Vec::new(),
            crd_files: Vec::new(),
            startup_timeout: Duration::from_secs(60),
            binaries: None,
            watch_cache: true,
            client_qps: None,
        }
    }
}

impl TestEnvBuilder {
    /// Also run kube-scheduler (off by default), so Pods get bound to Ready nodes.
    pub fn scheduler(mut self, enabled: bool) -> Self {
        self.scheduler = enabled;
        self
    }

    /// The request rate kube-scheduler and kube-controller-manager may send (their defaults:
    /// 50 and 20 per second), with twice that as burst: a scale run creating Pods by the
    /// hundred thousand is otherwise paced by these clients, not by what it measures.
    pub fn client_qps(mut self, qps: u32) -> Self {
        self.client_qps = Some(qps);
        self
    }

    /// Also run kube-controller-manager (off by default): Deployments, ReplicaSets, DaemonSets,
    /// StatefulSets, Jobs and CronJobs create their Pods, namespaces get their default
    /// ServiceAccount and are deleted for real, garbage collection runs. Its node lifecycle
    /// controller is off: the Nodes here have no kubelet to renew their Leases, so it would
    /// mark every one unreachable and evict its Pods.
    pub fn controller_manager(mut self, enabled: bool) -> Self {
        self.controller_manager = enabled;
        self
    }

    /// CRDs to install (and wait for) before `start` returns.
    pub fn crds(mut self, crds: Vec<CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }

    /// YAML files (or directories of them) holding CRDs to install before `start` returns.
    pub fn crd_files<I, P>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.crd_files.extend(paths.into_iter().map(Into::into));
        self
    }

    /// How long the apiserver may take to become ready (60 s by default).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Whether the apiserver serves watches from its watch cache (on by default, as in a real
    /// cluster). Off (`--watch-cache=false`), watches go to etcd, so that
    /// [`TestEnv::compact_etcd`] makes a watch from an older resourceVersion fail with
    /// `410 Gone`; with the cache, the apiserver's own event window decides that.
    pub fn watch_cache(mut self, enabled: bool) -> Self {
        self.watch_cache = enabled;
        self
    }

    /// Use these executables instead of discovering them (see [`Binaries::discover`]).
    pub fn binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    pub async fn start(self) -> Result<TestEnv, TestEnvError> {
        let started = Instant::now();
        // kube's TLS stack asks rustls for the process-wide provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        remove_stale_temp_dirs();
        let binaries = match self.binaries {
            Some(binaries) => binaries,
            None => Binaries::discover()?,
        };
        let mut crds = self.crds;
        for (origin, doc) in read_yaml_files(&yaml_files(&self.crd_files)?)? {
            crds.push(parse_crd(&origin, doc)?);
        }

        let dir = create_temp_dir()?;
        let pki = ClusterPki::generate()?;
        let files = PkiFiles::write(dir.path(), &pki)?;

        let options = ApiServerOptions {
            watch_cache: self.watch_cache,
        };
        let processes = start_with_port_retries(
            &binaries,
            dir.path(),
            &files,
            &pki,
            &options,
            self.startup_timeout,
        )
        .await?;
        let kubeconfig_text = processes.kubeconfig;

        let kubeconfig_path = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig_path, &kubeconfig_text)
            .map_err(|e| TestEnvError::io(format!("writing {}", kubeconfig_path.display()), e))?;
        let kubeconfig = Kubeconfig::from_yaml(&kubeconfig_text)?;
        let client = client_for(&kubeconfig).await?;

        let rate = client_rate_flags(self.client_qps);
        let scheduler = if self.scheduler {
            Some(spawn_scheduler(
                &binaries,
                dir.path(),
                &kubeconfig_path,
                &rate,
            )?)
        } else {
            None
        };
        let controller_manager = if self.controller_manager {
            Some(spawn_controller_manager(
                &binaries,
                dir.path(),
                (&files, &kubeconfig_path),
                &rate,
            )?)
        } else {
            None
        };

        let mut env = TestEnv {
            client,
            kubeconfig,
            kubeconfig_path,
            startup: Duration::ZERO,
            startup_timeout: self.startup_timeout,
            etcd_addr: processes.ports.etcd_addr(),
            apiserver_addr: processes.ports.apiserver_addr(),
            scheduler,
            controller_manager,
            apiserver: processes.apiserver,
            etcd: processes.etcd,
            dir,
        };
        if !crds.is_empty() {
            env.install_crds(crds).await?;
        }
        env.startup = started.elapsed();
        Ok(env)
    }
}

/// A running control plane. Dropping it stops every process and removes its directory.
pub struct TestEnv {
    client: Client,
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    startup: Duration,
    startup_timeout: Duration,
    etcd_addr: SocketAddr,
    apiserver_addr: SocketAddr,
    // Declaration order is drop order: clients of a process stop before the process they use.
    scheduler: Option<ManagedProcess>,
    controller_manager: Option<ManagedProcess>,
    apiserver: ManagedProcess,
    etcd: ManagedProcess,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("dir", &self.dir.path())
            .field("kubeconfig_path", &self.kubeconfig_path)
            .field("scheduler", &self.scheduler.is_some())
            .field("controller_manager", &self.controller_manager.is_some())
            .field("startup", &self.startup)
            .finish_non_exhaustive()
    }
}

impl TestEnv {
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// A client with the admin identity (`system:masters`).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client that acts as `user` (for a ServiceAccount
    /// `system:serviceaccount:NAMESPACE:NAME`) through impersonation, so a
    /// test runs with exactly the rights RBAC gives that user.
    pub async fn impersonating(&self, user: &str) -> Result<Client, TestEnvError> {
        let mut config =
            Config::from_custom_kubeconfig(self.kubeconfig.clone(), &KubeConfigOptions::default())
                .await?;
        config.auth_info.impersonate = Some(user.to_owned());
        Client::try_from(config)
            .map_err(|e| TestEnvError::kube(format!("building a client acting as {user}"), e))
    }

    /// The admin kubeconfig file (credentials embedded); valid while this `TestEnv` lives.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    pub fn kubeconfig(&self) -> Kubeconfig {
        self.kubeconfig.clone()
    }

    /// `https://127.0.0.1:PORT` of the apiserver.
    pub fn server_url(&self) -> String {
        self.kubeconfig
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone())
            .unwrap_or_default()
    }

    /// The directory holding certificates, logs and etcd's data; removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Time from [`TestEnvBuilder::start`] until the apiserver was ready and the CRDs established.
    pub fn startup_duration(&self) -> Duration {
        self.startup
    }

    /// The last lines of a process's output, e.g. for a failing assertion's message.
    pub fn log_tail(&self, process: Process, lines: usize) -> String {
        match process {
            Process::Etcd => self.etcd.log_tail(lines),
            Process::ApiServer => self.apiserver.log_tail(lines),
            Process::Scheduler | Process::ControllerManager => self
                .optional(process)
                .map(|p| p.log_tail(lines))
                .unwrap_or_default(),
        }
    }

    /// Path of a process's log file.
    pub fn log_path(&self, process: Process) -> Option<&Path> {
        match process {
            Process::Etcd => Some(self.etcd.log_path()),
            Process::ApiServer => Some(self.apiserver.log_path()),
            Process::Scheduler | Process::ControllerManager => {
                self.optional(process).map(ManagedProcess::log_path)
            }
        }
    }

    /// The pid of a running process; `None` after [`TestEnv::kill`] (or for a process this
    /// control plane does not run).
    pub fn pid(&self, process: Process) -> Option<u32> {
        match process {
            Process::Etcd => self.etcd.pid(),
            Process::ApiServer => self.apiserver.pid(),
            Process::Scheduler | Process::ControllerManager => {
                self.optional(process).and_then(ManagedProcess::pid)
            }
        }
    }

    /// The processes a builder option turns on.
    fn optional(&self, process: Process) -> Option<&ManagedProcess> {
        match process {
            Process::Scheduler => self.scheduler.as_ref(),
            Process::ControllerManager => self.controller_manager.as_ref(),
            Process::Etcd | Process::ApiServer => None,
        }
    }

    fn managed(&mut self, process: Process) -> Result<&mut ManagedProcess, TestEnvError> {
        let (optional, name) = match process {
            Process::Etcd => return Ok(&mut self.etcd),
            Process::ApiServer => return Ok(&mut self.apiserver),
            Process::Scheduler => (self.scheduler.as_mut(), "kube-scheduler"),
            Process::ControllerManager => {
                (self.controller_manager.as_mut(), "kube-controller-manager")
            }
        };
        optional.ok_or(TestEnvError::ProcessState {
            process: name,
            state: "not part of this control plane",
        })
    }

    /// Fault injection: kills `process` with SIGKILL (no graceful shutdown, as in a crash) and
    /// reaps it. Its clients see their connections closed and new ones refused until
    /// [`TestEnv::start`]. Only that process is signalled, by its pid.
    pub fn kill(&mut self, process: Process) -> Result<(), TestEnvError> {
        let managed = self.managed(process)?;
        if !managed.is_running() {
            return Err(TestEnvError::ProcessState {
                process: managed.name(),
                state: "not running",
            });
        }
        managed.kill();
        Ok(())
    }

    /// Starts a killed `process` again with the same flags and ports; etcd keeps its data
    /// directory, so the apiserver finds the same objects and resourceVersions. Returns, with
    /// the time it took, once the process serves: the apiserver's `/readyz` for the apiserver,
    /// etcd's `/health` and then the apiserver's `/readyz` for etcd, at once for the scheduler
    /// and the controller manager.
    pub async fn start(&mut self, process: Process) -> Result<Duration, TestEnvError> {
        let started = Instant::now();
        self.managed(process)?.respawn()?;
        let timeout = self.startup_timeout;
        if process == Process::Etcd {
            let addr = self.etcd_addr;
            eventually("etcd /health after a start", timeout, || async move {
                etcd::healthy(addr).await.then_some(())
            })
            .await?;
        }
        if matches!(process, Process::Etcd | Process::ApiServer) {
            wait_until_ready(&self.client, &mut self.etcd, &mut self.apiserver, timeout).await?;
        }
        Ok(started.elapsed())
    }

    /// [`TestEnv::kill`] then [`TestEnv::start`]: the time from the kill until it serves again.
    pub async fn restart(&mut self, process: Process) -> Result<Duration, TestEnvError> {
        let killed = Instant::now();
        self.kill(process)?;
        self.start(process).await?;
        Ok(killed.elapsed())
    }

    /// `http://127.0.0.1:PORT` of etcd's client port (also its HTTP/JSON gateway, `/v3/...`).
    pub fn etcd_url(&self) -> String {
        format!("http://{}", self.etcd_addr)
    }

    /// etcd's current revision: the resourceVersion of the latest write to any object.
    pub async fn etcd_revision(&self) -> Result<i64, TestEnvError> {
        etcd::revision(self.etcd_addr).await
    }

    /// Fault injection: compacts etcd's history up to its current revision (through its HTTP
    /// gateway) and returns that revision. A watch from an older resourceVersion that reaches
    /// etcd then fails with `410 Gone` (see [`TestEnvBuilder::watch_cache`]). The apiserver
    /// compacts on its own every 5 minutes; this does it now.
    pub async fn compact_etcd(&self) -> Result<i64, TestEnvError> {
        let revision = etcd::revision(self.etcd_addr).await?;
        etcd::compact(self.etcd_addr, revision).await?;
        Ok(revision)
    }

    /// Fault injection: a TCP proxy in front of the apiserver that can be severed and restored,
    /// with an admin client that goes through it (see [`ApiProxy`]).
    pub async fn proxy(&self) -> Result<ApiProxy, TestEnvError> {
        ApiProxy::start(self.apiserver_addr, self.kubeconfig.clone()).await
    }

    pub async fn create_namespace(&self, name: &str) -> Result<Namespace, TestEnvError> {
        let namespace: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name},
        }))
        .map_err(|e| TestEnvError::manifest("namespace", e))?;
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|e| TestEnvError::kube(format!("creating namespace {name}"), e))
    }

    /// Applies the CRDs (server-side) and waits until each is Established and served by discovery.
    pub async fn install_crds(
        &self,
        crds: Vec<CustomResourceDefinition>,
    ) -> Result<(), TestEnvError> {
        let api = Api::<CustomResourceDefinition>::all(self.client());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in &crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let mut crd = crd.clone();
            crd.metadata.resource_version = None;
            crd.metadata.managed_fields = None;
            crd.status = None;
            api.patch(&name, &params, &Patch::Apply(&crd))
                .await
                .map_err(|e| TestEnvError::kube(format!("applying CRD {name}"), e))?;
        }
        for crd in &crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(TestEnvError::Timeout {
                        what: format!("CRD {name} Established"),
                        timeout: ESTABLISH_TIMEOUT,
                        details: format!(": {e}"),
                    });
                }
                Err(_) => {
                    return Err(TestEnvError::Timeout {
                        what: format!("CRD {name} Established"),
                        timeout: ESTABLISH_TIMEOUT,
                        details: String::new(),
                    });
                }
            }
            self.wait_until_discoverable(crd).await?;
        }
        Ok(())
    }

    /// Installs the CRDs of YAML files (directories expand to their YAML files).
    pub async fn install_crd_files<I, P>(&self, paths: I) -> Result<(), TestEnvError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut crds = Vec::new();
        for (origin, doc) in read_yaml_files(&yaml_files(paths)?)? {
            crds.push(parse_crd(&origin, doc)?);
        }
        self.install_crds(crds).await
    }

    /// Established does not yet mean every apiserver handler serves the resource; discovery does.
    async fn wait_until_discoverable(
        &self,
        crd: &CustomResourceDefinition,
    ) -> Result<(), TestEnvError> {
        let group = &crd.spec.group;
        let plural = &crd.spec.names.plural;
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            let group_version = format!("{group}/{}", version.name);
            eventually(
                &format!("{plural}.{group_version} in discovery"),
                ESTABLISH_TIMEOUT,
                || async {
                    let resources = self
                        .client
                        .list_api_group_resources(&group_version)
                        .await
                        .ok()?;
                    resources
                        .resources
                        .iter()
                        .any(|r| &r.name == plural)
                        .then_some(())
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Applies (server-side) every object of a YAML text, resolving kinds through discovery.
    /// Namespaced objects without a namespace go to `default`.
    pub async fn apply_yaml(
        &self,
        text: &str,
        origin: &str,
    ) -> Result<Vec<DynamicObject>, TestEnvError> {
        let documents = crate::parse_yaml_documents(text, origin)?
            .into_iter()
            .map(|doc| (origin.to_owned(), doc))
            .collect();
        self.apply_documents(documents).await
    }

    /// Applies every object of YAML files (directories expand to their YAML files).
    pub async fn apply_files<I, P>(&self, paths: I) -> Result<Vec<DynamicObject>, TestEnvError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        self.apply_documents(read_yaml_files(&yaml_files(paths)?)?)
            .await
    }

    /// In dependency order, whatever order the files list them in: CRDs first (installed and
    /// served before any custom resource), then Namespaces, roles and the rest (stable within
    /// a rank, so later documents still win over earlier ones of the same object).
    async fn apply_documents(
        &self,
        documents: Vec<(String, Value)>,
    ) -> Result<Vec<DynamicObject>, TestEnvError> {
        let (crds, mut objects): (Vec<_>, Vec<_>) = documents
            .into_iter()
            .partition(|(_, doc)| kind_of(doc) == "CustomResourceDefinition");
        if !crds.is_empty() {
            let crds = crds
                .into_iter()
                .map(|(origin, doc)| parse_crd(&origin, doc))
                .collect::<Result<Vec<_>, _>>()?;
            self.install_crds(crds).await?;
        }
        objects.sort_by_key(|(_, doc)| apply_rank(kind_of(doc)));
        let mut applied = Vec::with_capacity(objects.len());
        for (origin, doc) in objects {
            applied.push(self.apply_document(&origin, doc).await?);
        }
        Ok(applied)
    }

    async fn apply_document(
        &self,
        origin: &str,
        doc: Value,
    ) -> Result<DynamicObject, TestEnvError> {
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = kind_of(&doc);
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if api_version.is_empty() || kind.is_empty() || name.is_empty() {
            return Err(TestEnvError::manifest(
                origin,
                "every object needs apiVersion, kind and metadata.name",
            ));
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                TestEnvError::kube(format!("{origin}: resolving {api_version} {kind}"), e)
            })?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => {
                let namespace = doc
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                Api::namespaced_with(self.client(), namespace, &resource)
            }
            Scope::Cluster => Api::all_with(self.client(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&doc),
        )
        .await
        .map_err(|e| TestEnvError::kube(format!("{origin}: applying {kind} {name}"), e))
    }

    /// Registers the webhook configurations, pointed at the local server (see
    /// [`WebhookRegistration`]). The apiserver picks new configurations up asynchronously
    /// (within about a second): tests should wait until a request is seen, e.g. with
    /// [`eventually`] and dry-run creates.
    pub async fn register_webhooks(
        &self,
        registration: WebhookRegistration,
    ) -> Result<(), TestEnvError> {
        let (mutating, validating) = registration.rewritten();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mutating_api = Api::<MutatingWebhookConfiguration>::all(self.client());
        for configuration in &mutating {
            let name = configuration.metadata.name.clone().unwrap_or_default();
            mutating_api
                .patch(&name, &params, &Patch::Apply(configuration))
                .await
                .map_err(|e| {
                    TestEnvError::kube(format!("applying MutatingWebhookConfiguration {name}"), e)
                })?;
        }
        let validating_api = Api::<ValidatingWebhookConfiguration>::all(self.client());
        for configuration in &validating {
            let name = configuration.metadata.name.clone().unwrap_or_default();
            validating_api
                .patch(&name, &params, &Patch::Apply(configuration))
                .await
                .map_err(|e| {
                    TestEnvError::kube(format!("applying ValidatingWebhookConfiguration {name}"), e)
                })?;
        }
        Ok(())
    }

    /// Creates a Node that the scheduler considers: Ready, with allocatable cpu 16, memory 64Gi
    /// and 110 pods, carrying exactly `labels` and `taints`.
    ///
    /// Nothing runs on the node; the scheduler only binds Pods to it. The apiserver's
    /// TaintNodesByCondition admission adds a not-ready taint on creation that no node
    /// controller would remove here, so the taints are set again after the status.
    pub async fn ready_node(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
    ) -> Result<Node, TestEnvError> {
        let api = Api::<Node>::all(self.client());
        let mut all_labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), name.to_owned()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ]);
        all_labels.extend(labels);
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": {"taints": taints},
        }))
        .map_err(|e| TestEnvError::manifest("node", e))?;
        api.create(&PostParams::default(), &node)
            .await
            .map_err(|e| TestEnvError::kube(format!("creating node {name}"), e))?;
        self.make_node_ready(name, taints).await
    }

    /// Gives an existing Node the status of a Ready node (allocatable cpu 16, memory 64Gi, 110
    /// pods) and sets its taints to exactly `taints`, dropping the not-ready taint the
    /// apiserver's admission added when it was created. Nothing renews this status: the node
    /// lifecycle controller is off (see [`TestEnvBuilder::controller_manager`]).
    pub async fn make_node_ready(
        &self,
        name: &str,
        taints: Vec<Taint>,
    ) -> Result<Node, TestEnvError> {
        let api = Api::<Node>::all(self.client());
        let resources =
            json!({"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"});
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status = json!({
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "node created by poolkeeper-testenv",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                    {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                     "lastHeartbeatTime": now, "lastTransitionTime": now},
                ],
                "nodeInfo": {
                    "architecture": "amd64", "operatingSystem": "linux",
                    "kubeletVersion": crate::kubernetes_version(), "kubeProxyVersion": "",
                    "bootID": "", "machineID": "", "systemUUID": "", "kernelVersion": "",
                    "osImage": "", "containerRuntimeVersion": "",
                },
            }
        });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| TestEnvError::kube(format!("setting the status of node {name}"), e))?;
        // A JSON merge patch replaces the whole list, dropping the admission-added taint.
        let taints_value = if taints.is_empty() {
            Value::Null
        } else {
            json!(taints)
        };
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": taints_value}})),
        )
        .await
        .map_err(|e| TestEnvError::kube(format!("setting the taints of node {name}"), e))
    }
}

/// Calls `check` every 100 ms until it returns `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T, TestEnvError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(TestEnvError::Timeout {
                what: what.to_owned(),
                timeout,
                details: String::new(),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn parse_crd(origin: &str, doc: Value) -> Result<CustomResourceDefinition, TestEnvError> {
    if kind_of(&doc) != "CustomResourceDefinition" {
        return Err(TestEnvError::manifest(
            origin,
            format!(
                "expected a CustomResourceDefinition, found kind {:?}",
                kind_of(&doc)
            ),
        ));
    }
    serde_json::from_value(doc).map_err(|e| TestEnvError::manifest(origin, e))
}

fn args<const N: usize>(args: [String; N]) -> Vec<OsString> {
    args.into_iter().map(OsString::from).collect()
}

pub(crate) async fn client_for(kubeconfig: &Kubeconfig) -> Result<Client, TestEnvError> {
    let config =
        Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default()).await?;
    Client::try_from(config).map_err(|e| TestEnvError::kube("building the admin client", e))
}

struct PkiFiles {
    ca: PathBuf,
    apiserver_cert: PathBuf,
    apiserver_key: PathBuf,
    service_account_private: PathBuf,
    service_account_public: PathBuf,
}

impl PkiFiles {
    fn write(dir: &Path, pki: &ClusterPki) -> Result<Self, TestEnvError> {
        let pki_dir = dir.join("pki");
        std::fs::create_dir(&pki_dir)
            .map_err(|e| TestEnvError::io("creating the pki directory", e))?;
        let write = |name: &str, contents: &str| {
            let path = pki_dir.join(name);
            std::fs::write(&path, contents)
                .map(|()| path.clone())
                .map_err(|e| TestEnvError::io(format!("writing {}", path.display()), e))
        };
        Ok(Self {
            ca: write("ca.crt", &pki.ca_pem)?,
            apiserver_cert: write("apiserver.crt", &pki.apiserver.cert_pem)?,
            apiserver_key: write("apiserver.key", &pki.apiserver.key_pem)?,
            service_account_private: write(
                "service-account.key",
                &pki.service_account_private_pem,
            )?,
            service_account_public: write("service-account.pub", &pki.service_account_public_pem)?,
        })
    }
}

/// How the apiserver runs, beyond the fixed flags of [`spawn_apiserver`].
struct ApiServerOptions {
    watch_cache: bool,
}

/// etcd and the apiserver, started and ready.
struct Started {
    etcd: ManagedProcess,
    apiserver: ManagedProcess,
    ports: Ports,
    /// The admin kubeconfig text.
    kubeconfig: String,
}

/// [`start_etcd_and_apiserver`], again with new ports while a child lost the race for one.
async fn start_with_port_retries(
    binaries: &Binaries,
    dir: &Path,
    files: &PkiFiles,
    pki: &ClusterPki,
    options: &ApiServerOptions,
    timeout: Duration,
) -> Result<Started, TestEnvError> {
    let mut attempt = 1;
    loop {
        let result =
            start_etcd_and_apiserver(binaries, dir, files, pki, options, attempt, timeout).await;
        match result {
            Err(error) if error.is_port_conflict() && attempt < START_ATTEMPTS => {
                tracing::debug!(%error, attempt, "port taken by another process, retrying with new ports");
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Starts etcd and kube-apiserver on fresh ports and waits for `/readyz`.
async fn start_etcd_and_apiserver(
    binaries: &Binaries,
    dir: &Path,
    files: &PkiFiles,
    pki: &ClusterPki,
    options: &ApiServerOptions,
    attempt: usize,
    timeout: Duration,
) -> Result<Started, TestEnvError> {
    let ports = Ports::pick()?;
    let mut etcd = spawn_etcd(binaries, dir, &ports, attempt)?;
    // The apiserver retries its etcd connection, so both start at once.
    let mut apiserver = spawn_apiserver(binaries, dir, files, &ports, options, attempt)?;
    let text = kubeconfig::render(&format!("https://127.0.0.1:{}", ports.apiserver), pki);
    let client = client_for(&Kubeconfig::from_yaml(&text)?).await?;
    wait_until_ready(&client, &mut etcd, &mut apiserver, timeout).await?;
    Ok(Started {
        etcd,
        apiserver,
        ports,
        kubeconfig: text,
    })
}

/// Ports free at the time of picking; another process may still take one before the child
/// binds it, which the caller's retry covers.
struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
}

impl Ports {
    fn pick() -> Result<Self, TestEnvError> {
        Ok(Self {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
        })
    }

    fn etcd_url(&self) -> String {
        format!("http://{}", self.etcd_addr())
    }

    fn etcd_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.etcd_client))
    }

    fn apiserver_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.apiserver))
    }
}

/// Each attempt gets its own data directory and log, so a failed attempt's log stays readable.
fn spawn_etcd(
    binaries: &Binaries,
    dir: &Path,
    ports: &Ports,
    attempt: usize,
) -> Result<ManagedProcess, TestEnvError> {
    let client_url = ports.etcd_url();
    let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
    ManagedProcess::spawn(
        "etcd",
        &binaries.etcd,
        args([
            format!(
                "--data-dir={}",
                dir.join(format!("etcd-{attempt}")).display()
            ),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true".to_owned(),
            // The default 2 GiB fills up under a scale run's 150,000 Pods and Node
            // heartbeats between two compactions; a quota only caps, it reserves nothing.
            "--quota-backend-bytes=8589934592".to_owned(),
            "--log-level=warn".to_owned(),
        ]),
        dir.join(format!("etcd-{attempt}.log")),
    )
}

/// Flags as controller-runtime's envtest sets them for a control plane without
/// kube-controller-manager (DESIGN §10).
fn spawn_apiserver(
    binaries: &Binaries,
    dir: &Path,
    files: &PkiFiles,
    ports: &Ports,
    options: &ApiServerOptions,
    attempt: usize,
) -> Result<ManagedProcess, TestEnvError> {
    let mut flags = args([
        format!("--etcd-servers={}", ports.etcd_url()),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", files.apiserver_cert.display()),
        format!("--tls-private-key-file={}", files.apiserver_key.display()),
        format!("--client-ca-file={}", files.ca.display()),
        format!("--secure-port={}", ports.apiserver),
        "--bind-address=127.0.0.1".to_owned(),
        "--advertise-address=127.0.0.1".to_owned(),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--disable-admission-plugins=ServiceAccount".to_owned(),
        "--authorization-mode=RBAC".to_owned(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
        format!(
            "--service-account-key-file={}",
            files.service_account_public.display()
        ),
        format!(
            "--service-account-signing-key-file={}",
            files.service_account_private.display()
        ),
        "--allow-privileged=true".to_owned(),
        // Background work a test cluster does not need.
        "--enable-priority-and-fairness=false".to_owned(),
        "--endpoint-reconciler-type=none".to_owned(),
        "--profiling=false".to_owned(),
    ]);
    if !options.watch_cache {
        flags.push("--watch-cache=false".into());
    }
    ManagedProcess::spawn(
        "kube-apiserver",
        &binaries.kube_apiserver,
        flags,
        dir.join(format!("kube-apiserver-{attempt}.log")),
    )
}

/// Polls the apiserver's `/readyz` until it answers, failing early with the log of a process
/// that exited (a taken port shows up there) and, on timeout, with the last answer.
async fn wait_until_ready(
    client: &Client,
    etcd: &mut ManagedProcess,
    apiserver: &mut ManagedProcess,
    timeout: Duration,
) -> Result<(), TestEnvError> {
    let deadline = Instant::now() + timeout;
    loop {
        for process in [&mut *etcd, &mut *apiserver] {
            if let Some(status) = process.exited() {
                return Err(TestEnvError::Exited {
                    process: process.name(),
                    status,
                    log_tail: process.log_tail(LOG_TAIL_LINES),
                });
            }
        }
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| {
                TestEnvError::kube("building the readyz request", kube::Error::HttpError(e))
            })?;
        let last_error = match client.request_text(request).await {
            Ok(_) => return Ok(()),
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(TestEnvError::Timeout {
                what: "kube-apiserver /readyz".to_owned(),
                timeout,
                details: format!(
                    "; last answer: {last_error}\nlast lines of kube-apiserver's log:\n{}",
                    apiserver.log_tail(LOG_TAIL_LINES)
                ),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// `--kube-api-qps` and `--kube-api-burst` (twice the rate) when a rate is set.
fn client_rate_flags(qps: Option<u32>) -> Vec<String> {
    qps.map(|qps| {
        vec![
            format!("--kube-api-qps={qps}"),
            format!("--kube-api-burst={}", qps.saturating_mul(2)),
        ]
    })
    .unwrap_or_default()
}

/// Without leader election (there is one scheduler) and without a serving port (nothing
/// scrapes it, and a fixed one would clash between parallel tests).
fn spawn_scheduler(
    binaries: &Binaries,
    dir: &Path,
    kubeconfig: &Path,
    rate: &[String],
) -> Result<ManagedProcess, TestEnvError> {
    let mut flags = args([
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        "--secure-port=0".to_owned(),
    ]);
    flags.extend(rate.iter().map(Into::into));
    ManagedProcess::spawn(
        "kube-scheduler",
        &binaries.kube_scheduler,
        flags,
        dir.join("kube-scheduler.log"),
    )
}

/// Controllers that need a kubelet, a cloud or a CSI driver are left out: with fake Nodes the
/// node lifecycle controller would mark every Node unreachable and evict its Pods after the
/// grace period. Without leader election (there is one) and without a serving port, as the
/// scheduler. The service-account key lets its token controller sign, and the CA becomes every
/// namespace's `kube-root-ca.crt`.
fn spawn_controller_manager(
    binaries: &Binaries,
    dir: &Path,
    (files, kubeconfig): (&PkiFiles, &Path),
    rate: &[String],
) -> Result<ManagedProcess, TestEnvError> {
    let mut flags = args([
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        "--secure-port=0".to_owned(),
        format!("--controllers={CONTROLLERS}"),
        format!(
            "--service-account-private-key-file={}",
            files.service_account_private.display()
        ),
        format!("--root-ca-file={}", files.ca.display()),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--use-service-account-credentials=false".to_owned(),
    ]);
    flags.extend(rate.iter().map(Into::into));
    ManagedProcess::spawn(
        "kube-controller-manager",
        &binaries.kube_controller_manager,
        flags,
        dir.join("kube-controller-manager.log"),
    )
}

/// kube-controller-manager's `--controllers`: the default set without those that act on
/// kubelets' heartbeats or a cloud.
const CONTROLLERS: &str = "*,-node-lifecycle-controller,-node-ipam-controller,\
-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller";
