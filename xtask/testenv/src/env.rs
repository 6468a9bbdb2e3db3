//! One control plane: its processes, their control, and the clients that reach it. Starting
//! it is [`TestEnvBuilder`]'s (`builder.rs`, with the processes in `spawn.rs`); what tests do
//! to it lives beside: objects and CRDs applied (`apply.rs`), Nodes made Ready (`nodes.rs`).

mod apply;
mod builder;
mod nodes;
mod spawn;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::process::ManagedProcess;
use crate::proxy::ApiProxy;
use crate::{TestEnvError, etcd};

pub use builder::TestEnvBuilder;
pub use spawn::START_ATTEMPTS;
use spawn::wait_until_ready;

const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The processes of a control plane, for [`TestEnv::log_tail`], [`TestEnv::kill`] and
/// [`TestEnv::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    Etcd,
    ApiServer,
    Scheduler,
    ControllerManager,
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
        let mut config = kube::Config::from_custom_kubeconfig(
            self.kubeconfig.clone(),
            &KubeConfigOptions::default(),
        )
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
