//! The options of a control plane and its start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::config::Kubeconfig;

use super::TestEnv;
use super::apply::parse_crd;
use super::spawn::{
    ApiServerOptions, PkiFiles, client_rate_flags, spawn_controller_manager, spawn_scheduler,
    start_with_port_retries,
};
use crate::TestEnvError;
use crate::binaries::Binaries;
use crate::certs::ClusterPki;
use crate::kubeconfig::client_for;
use crate::manifests::{read_yaml_files, yaml_files};
use crate::process::{ManagedProcess, create_temp_dir, remove_stale_temp_dirs};

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
    runtime_config: Option<String>,
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
            runtime_config: None,
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

    /// The apiserver's `--runtime-config` (`group/version/resource=false` turns one
    /// resource off, as a cluster that does not serve it yet).
    pub fn runtime_config(mut self, value: impl Into<String>) -> Self {
        self.runtime_config = Some(value.into());
        self
    }

    /// Use these executables instead of discovering them (see [`Binaries::discover`]).
    pub fn binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    pub async fn start(mut self) -> Result<TestEnv, TestEnvError> {
        let started = Instant::now();
        // kube's TLS stack asks rustls for the process-wide provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        remove_stale_temp_dirs();
        let binaries = match self.binaries.take() {
            Some(binaries) => binaries,
            None => Binaries::discover()?,
        };
        let crds = self.all_crds()?;

        let dir = create_temp_dir()?;
        let pki = ClusterPki::generate()?;
        let files = PkiFiles::write(dir.path(), &pki)?;
        let options = ApiServerOptions {
            watch_cache: self.watch_cache,
            runtime_config: self.runtime_config.clone(),
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

        let kubeconfig_path = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig_path, &processes.kubeconfig)
            .map_err(|e| TestEnvError::io(format!("writing {}", kubeconfig_path.display()), e))?;
        let kubeconfig = Kubeconfig::from_yaml(&processes.kubeconfig)?;
        let client = client_for(&kubeconfig).await?;
        let (scheduler, controller_manager) =
            self.spawn_optional(&binaries, dir.path(), &files, &kubeconfig_path)?;

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

    /// The CRDs given as values and those read from the files.
    fn all_crds(&mut self) -> Result<Vec<CustomResourceDefinition>, TestEnvError> {
        let mut crds = std::mem::take(&mut self.crds);
        for (origin, doc) in read_yaml_files(&yaml_files(&self.crd_files)?)? {
            crds.push(parse_crd(&origin, doc)?);
        }
        Ok(crds)
    }

    /// kube-scheduler and kube-controller-manager, those that were asked for, once the
    /// apiserver is ready.
    fn spawn_optional(
        &self,
        binaries: &Binaries,
        dir: &Path,
        files: &PkiFiles,
        kubeconfig_path: &Path,
    ) -> Result<(Option<ManagedProcess>, Option<ManagedProcess>), TestEnvError> {
        let rate = client_rate_flags(self.client_qps);
        let scheduler = self
            .scheduler
            .then(|| spawn_scheduler(binaries, dir, kubeconfig_path, &rate))
            .transpose()?;
        let controller_manager = self
            .controller_manager
            .then(|| spawn_controller_manager(binaries, dir, (files, kubeconfig_path), &rate))
            .transpose()?;
        Ok((scheduler, controller_manager))
    }
}
