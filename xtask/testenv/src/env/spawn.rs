//! The processes of a control plane: etcd and kube-apiserver started together on fresh ports
//! (again with new ones while a child lost the race for a port), then kube-scheduler and
//! kube-controller-manager.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Client;
use kube::config::Kubeconfig;

use super::POLL_INTERVAL;
use crate::binaries::Binaries;
use crate::certs::ClusterPki;
use crate::kubeconfig::client_for;
use crate::process::{ManagedProcess, free_port};
use crate::{TestEnvError, kubeconfig};

/// How often startup picks new ports when etcd or kube-apiserver lost the race for one.
pub const START_ATTEMPTS: usize = 5;
const LOG_TAIL_LINES: usize = 40;

fn args<const N: usize>(args: [String; N]) -> Vec<OsString> {
    args.into_iter().map(OsString::from).collect()
}

pub(super) struct PkiFiles {
    ca: PathBuf,
    apiserver_cert: PathBuf,
    apiserver_key: PathBuf,
    service_account_private: PathBuf,
    service_account_public: PathBuf,
}

impl PkiFiles {
    pub(super) fn write(dir: &Path, pki: &ClusterPki) -> Result<Self, TestEnvError> {
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
pub(super) struct ApiServerOptions {
    pub(super) watch_cache: bool,
    pub(super) runtime_config: Option<String>,
}

/// etcd and the apiserver, started and ready.
pub(super) struct Started {
    pub(super) etcd: ManagedProcess,
    pub(super) apiserver: ManagedProcess,
    pub(super) ports: Ports,
    /// The admin kubeconfig text.
    pub(super) kubeconfig: String,
}

/// [`start_etcd_and_apiserver`], again with new ports while a child lost the race for one.
pub(super) async fn start_with_port_retries(
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
pub(super) struct Ports {
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

    pub(super) fn etcd_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.etcd_client))
    }

    pub(super) fn apiserver_addr(&self) -> SocketAddr {
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
    if let Some(runtime_config) = &options.runtime_config {
        flags.push(format!("--runtime-config={runtime_config}").into());
        // kube-apiserver exits at startup when its MutatingAdmissionPolicy admission
        // plugin has no resource to watch: a cluster without the resource has neither.
        if runtime_config.contains("mutatingadmissionpolicies=false") {
            flags.push("--disable-admission-plugins=ServiceAccount,MutatingAdmissionPolicy".into());
        }
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
pub(super) async fn wait_until_ready(
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
pub(super) fn client_rate_flags(qps: Option<u32>) -> Vec<String> {
    qps.map(|qps| {
        vec![
            format!("--kube-api-qps={qps}"),
            format!("--kube-api-burst={}", qps.saturating_mul(2)),
        ]
    })
    .unwrap_or_default()
}

/// The flags the scheduler and the controller manager share: without leader election (there is
/// one of each) and without a serving port (nothing scrapes it, and a fixed one would clash
/// between parallel tests), at the client `rate`.
fn single_instance_flags(kubeconfig: &Path, rate: &[String]) -> Vec<OsString> {
    let mut flags = args([
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        "--secure-port=0".to_owned(),
    ]);
    flags.extend(rate.iter().map(Into::into));
    flags
}

pub(super) fn spawn_scheduler(
    binaries: &Binaries,
    dir: &Path,
    kubeconfig: &Path,
    rate: &[String],
) -> Result<ManagedProcess, TestEnvError> {
    let flags = single_instance_flags(kubeconfig, rate);
    ManagedProcess::spawn(
        "kube-scheduler",
        &binaries.kube_scheduler,
        flags,
        dir.join("kube-scheduler.log"),
    )
}

/// Controllers that need a kubelet, a cloud or a CSI driver are left out: with fake Nodes the
/// node lifecycle controller would mark every Node unreachable and evict its Pods after the
/// grace period. The service-account key lets its token controller sign, and the CA becomes
/// every namespace's `kube-root-ca.crt`.
pub(super) fn spawn_controller_manager(
    binaries: &Binaries,
    dir: &Path,
    (files, kubeconfig): (&PkiFiles, &Path),
    rate: &[String],
) -> Result<ManagedProcess, TestEnvError> {
    let mut flags = single_instance_flags(kubeconfig, rate);
    flags.extend(args([
        format!("--controllers={CONTROLLERS}"),
        format!(
            "--service-account-private-key-file={}",
            files.service_account_private.display()
        ),
        format!("--root-ca-file={}", files.ca.display()),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--use-service-account-credentials=false".to_owned(),
    ]));
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
