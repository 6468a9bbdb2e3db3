//! Two replicas and rolling restarts (DESIGN §11 "Two replicas"): two
//! `poolkeeper` processes against one real kube-apiserver, etcd and
//! kube-scheduler, each with its own index, admin and webhook ports and
//! serving-certificate directory, leader election on with short timings.
//! Both serve the webhooks of `deploy/webhooks` behind one address, a
//! [`Balancer`] standing in for the Service and kube-proxy: it routes new
//! connections to the replicas whose `/readyz` answered 200 at its last poll.
//!
//! Every test starts its own control plane and ends only the processes it
//! started, by PID. The figures each test prints are those of
//! RELIABILITY.md ("Two replicas and rolling restarts"); see them with
//! `cargo test -p poolkeeper --test e2e replicas -j2 -- --nocapture`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::{Machine, MachineClass, NodePoolType};
use poolkeeper_testenv::{Process, TestEnv, WebhookCert};
use tempfile::TempDir;
use tokio::process::Child;

use crate::balancer::{Backend, Balancer};
use crate::harness::{
    BINARY, control_plane, deploy_webhooks, metric_sum, placed_within, try_http_get,
};
use crate::objects::{
    CONTROLLER_NAMESPACE, FINALIZER, MACHINE_NAMESPACE, create_class, create_machine, create_pool,
    finalized_classes, free_ports, plain_pod, pool_affinity, poolkeeper_events, write_policy,
};

const LEASE_NAME: &str = "poolkeeper";
/// Bound to the pool `edge`.
const EDGE_NAMESPACE: &str = "shop-edge";
/// 6 × 110 Pods: room for every Pod the rolling restart creates.
const EDGE_NODES: [&str; 6] = ["edge-1", "edge-2", "edge-3", "edge-4", "edge-5", "edge-6"];
/// In no pool and untainted: a Pod that lacked the pool affinity could be
/// scheduled here.
const LOOSE_NODE: &str = "loose-1";

const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_secs(1);
const DRAIN_DELAY: Duration = Duration::from_secs(2);
const WEBHOOK_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);
const GRACE_PERIOD: Duration = Duration::from_secs(6);
/// How often a replica looks for its certificate files.
const CERT_RELOAD_INTERVAL: Duration = Duration::from_millis(500);

/// Bound for a replica's start (process spawned to `/readyz` 200), a
/// replica's exit, and anything else the control plane does asynchronously.
const TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

const A: usize = 0;
const B: usize = 1;

/// The debounce of a test's replicas.
#[derive(Clone, Copy, Debug)]
struct Debounce {
    interval: Duration,
    max_delay: Duration,
}

const SHORT_DEBOUNCE: Debounce = Debounce {
    interval: Duration::from_millis(100),
    max_delay: Duration::from_secs(1),
};

/// One poolkeeper process, its files and fixed ports (kept across restarts:
/// the balancer's backends do not move).
struct Replica {
    name: &'static str,
    admin: SocketAddr,
    webhook: SocketAddr,
    cert_dir: PathBuf,
    config: PathBuf,
    kubeconfig: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl Replica {
    fn new(dir: &Path, name: &'static str, kubeconfig: &Path, debounce: Debounce) -> Self {
        let [admin, webhook] = free_ports();
        let home = dir.join(name);
        let cert_dir = home.join("certs");
        std::fs::create_dir_all(&cert_dir).expect("the replica's directory is created");
        let config = home.join("poolkeeper.yaml");
        std::fs::write(&config, config_yaml(admin, webhook, &cert_dir, debounce))
            .expect("the replica's configuration is written");
        Self {
            name,
            admin,
            webhook,
            cert_dir,
            config,
            kubeconfig: kubeconfig.to_owned(),
            log: home.join("poolkeeper.log"),
            child: None,
            starts: 0,
        }
    }

    fn backend(&self) -> Backend {
        Backend {
            admin: self.admin,
            webhook: self.webhook,
        }
    }

    /// The serving certificate written into this replica's `webhook.certDir`.
    fn install_certificate(&self, cert: &WebhookCert) {
        cert.write_to_dir(&self.cert_dir)
            .expect("the serving certificate is written");
    }

    /// Leaves `webhook.certDir` empty, as before a Secret is mounted.
    fn remove_certificate(&self) {
        std::fs::remove_dir_all(&self.cert_dir).expect("the certificate directory is removed");
        std::fs::create_dir_all(&self.cert_dir).expect("the certificate directory is created");
    }

    /// Starts the process; its stderr (the log) is appended to `self.log`.
    /// Under `setpriv --pdeathsig KILL` where available, so it dies with
    /// the test process even when that one is killed outright.
    fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the log file opens");
        writeln!(log, "{}", self.start_marker()).unwrap();
        let config = self.config.to_str().expect("UTF-8 path");
        let kubeconfig = self.kubeconfig.to_str().expect("UTF-8 path");
        let args = ["run", "--config", config, "--kubeconfig", kubeconfig];
        let setpriv = Path::new("/usr/bin/setpriv");
        let mut command = if setpriv.exists() {
            let mut command = tokio::process::Command::new(setpriv);
            command
                .args(["--pdeathsig", "KILL", "--", BINARY])
                .args(args);
            command
        } else {
            let mut command = tokio::process::Command::new(BINARY);
            command.args(args);
            command
        };
        let child = command
            .env("POD_NAME", self.name)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file handle is cloned"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("poolkeeper starts");
        self.child = Some(child);
    }

    fn pid(&self) -> u32 {
        let child = self.child.as_ref().expect("the replica runs");
        child.id().expect("the replica has not been reaped")
    }

    /// SIGTERM, as the kubelet sends it: a graceful shutdown.
    fn terminate(&self) {
        let pid = self.pid().to_string();
        let status = std::process::Command::new("kill")
            .args(["-s", "TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s TERM {pid}: {status}");
    }

    /// SIGSTOP (`freeze: true`) or SIGCONT: the process paused as by a
    /// frozen cgroup or a stalled host, and resumed.
    fn freeze(&self, freeze: bool) {
        let pid = self.pid().to_string();
        let signal = if freeze { "STOP" } else { "CONT" };
        let status = std::process::Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s {signal} {pid}: {status}");
    }

    /// SIGKILL, and the process reaped.
    async fn kill(&mut self) {
        let mut child = self.child.take().expect("the replica runs");
        child.start_kill().expect("SIGKILL is sent");
        tokio::time::timeout(TIMEOUT, child.wait())
            .await
            .expect("a killed process is reaped at once")
            .expect("the process is waited for");
    }

    /// Waits for the process to exit (after [`Replica::terminate`]).
    async fn wait_exit(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("the replica runs");
        let status = tokio::time::timeout(TIMEOUT, child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit within {TIMEOUT:?}", self.name))
            .expect("the process is waited for");
        self.child = None;
        status
    }

    async fn readyz(&self) -> Option<(u16, String)> {
        try_http_get(self.admin, "/readyz?verbose", Duration::from_secs(2))
            .await
            .ok()
    }

    /// Waits until `/readyz` answers 200; returns how long that took.
    async fn wait_ready(&self) -> Duration {
        let started = Instant::now();
        loop {
            let answer = self.readyz().await;
            if matches!(answer, Some((200, _))) {
                return started.elapsed();
            }
            if started.elapsed() > TIMEOUT {
                panic!(
                    "{} not ready within {TIMEOUT:?}: {answer:?}\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn metrics(&self) -> String {
        let (status, text) = try_http_get(self.admin, "/metrics", Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("scraping {}: {e}", self.name));
        assert_eq!(status, 200, "{}: {text}", self.name);
        text
    }

    /// Whether a Lease holder identity is this replica's (the binary
    /// appends a per-process suffix to `POD_NAME`).
    fn is(&self, holder: &str) -> bool {
        holder
            .strip_prefix(self.name)
            .is_some_and(|rest| rest.starts_with('_'))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The line `start` writes to the log before each start.
    fn start_marker(&self) -> String {
        format!("===== {} start #{} =====", self.name, self.starts)
    }

    /// The log since the replica's latest start.
    fn log_of_this_start(&self) -> String {
        let text = self.log_text();
        match text.rfind(&self.start_marker()) {
            Some(at) => text[at..].to_owned(),
            None => text,
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        format!(
            "--- last {lines} lines of {} ---\n{tail}",
            self.log.display()
        )
    }
}

fn config_yaml(admin: SocketAddr, webhook: SocketAddr, cert_dir: &Path, d: Debounce) -> String {
    let secs = |d: Duration| format!("{}ms", d.as_millis());
    format!(
        "namespace: {MACHINE_NAMESPACE}
leaderElection:
  enabled: true
  leaseName: {LEASE_NAME}
  leaseNamespace: {CONTROLLER_NAMESPACE}
  leaseDuration: {lease}
  renewDeadline: {renew}
  retryPeriod: {retry}
watchers: {{syncTimeout: 60s}}
reconciler: {{debounceInterval: {debounce}, maxDelay: {max_delay}}}
audit: {{interval: 0s}}
placement: {{engine: webhook}}
webhook:
  listen: \"{webhook}\"
  certDir: \"{cert_dir}\"
  certReloadInterval: {reload}
  certificateTimeout: 5m
  shutdownTimeout: {webhook_shutdown}
health: {{listen: \"{admin}\"}}
shutdown: {{gracePeriod: {grace}, drainDelay: {drain}}}
logging: {{level: info, format: text}}
",
        lease = secs(LEASE_DURATION),
        renew = secs(RENEW_DEADLINE),
        retry = secs(RETRY_PERIOD),
        debounce = secs(d.interval),
        max_delay = secs(d.max_delay),
        cert_dir = cert_dir.display(),
        reload = secs(CERT_RELOAD_INTERVAL),
        webhook_shutdown = secs(WEBHOOK_SHUTDOWN_TIMEOUT),
        grace = secs(GRACE_PERIOD),
        drain = secs(DRAIN_DELAY),
    )
}

/// A control plane with the edge pool, its nodes and binding, two replicas
/// (not started yet, their serving certificate in place) and the webhooks
/// registered behind the balancer.
struct Fleet {
    // Declaration order is drop order: the replicas stop first, then the
    // balancer, then the control plane.
    replicas: [Replica; 2],
    balancer: Balancer,
    env: TestEnv,
    client: Client,
    cert: WebhookCert,
    /// When the fleet was set up, the origin of the balancer's history.
    created: Instant,
    _dir: TempDir,
}

async fn setup(debounce: Debounce) -> Fleet {
    let env = control_plane(
        TestEnv::builder().scheduler(true),
        &[CONTROLLER_NAMESPACE, MACHINE_NAMESPACE, EDGE_NAMESPACE],
    )
    .await;
    let client = env.client();
    create_edge_pool(&env).await;

    let dir = tempfile::tempdir().unwrap();
    let cert = WebhookCert::generate().unwrap();
    let replicas = ["replica-a", "replica-b"]
        .map(|name| Replica::new(dir.path(), name, env.kubeconfig_path(), debounce));
    for replica in &replicas {
        replica.install_certificate(&cert);
    }
    let balancer = Balancer::start(&replicas.each_ref().map(Replica::backend)).await;
    env.register_webhooks(deploy_webhooks(balancer.port(), &cert.ca_pem))
        .await
        .unwrap();
    Fleet {
        replicas,
        balancer,
        env,
        client,
        cert,
        created: Instant::now(),
        _dir: dir,
    }
}

/// The NodePool `edge`, its tainted nodes, an unpooled node, and the
/// placement ConfigMap binding `shop-edge` to `edge` with the edge
/// toleration.
async fn create_edge_pool(env: &TestEnv) {
    create_pool(env, "edge", NodePoolType::Edge, &EDGE_NODES).await;
    env.ready_node(LOOSE_NODE, BTreeMap::new(), Vec::new())
        .await
        .unwrap();
    write_policy(&env.client(), &[(EDGE_NAMESPACE, "edge", "enforce")]).await;
}

impl Fleet {
    /// Starts replica `index` and waits for `/readyz` 200 (its webhook has
    /// a certificate) and for the balancer to route to it.
    async fn start_ready(&mut self, index: usize) -> Duration {
        let started = Instant::now();
        self.replicas[index].start();
        self.replicas[index].wait_ready().await;
        self.balancer.wait_backend(index, true, TIMEOUT).await;
        started.elapsed()
    }

    /// The Lease's holder, `None` while it is free or not created yet.
    async fn lease_holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), CONTROLLER_NAMESPACE)
            .get_opt(LEASE_NAME)
            .await
            .expect("reading the Lease")?
            .spec?
            .holder_identity
            .filter(|holder| !holder.is_empty())
    }

    /// Waits until replica `index` holds the Lease; returns the holder
    /// identity and how long it took.
    async fn wait_holder(&self, index: usize, within: Duration) -> (String, Duration) {
        let started = Instant::now();
        loop {
            let holder = self.lease_holder().await;
            if let Some(holder) = holder.as_ref().filter(|h| self.replicas[index].is(h)) {
                return (holder.clone(), started.elapsed());
            }
            if started.elapsed() > within {
                self.fail(&format!(
                    "{} does not hold the Lease within {within:?} (holder: {holder:?})",
                    self.replicas[index].name
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the apiserver calls the webhooks through the balancer
    /// (it loads webhook configurations asynchronously): a dry-run create
    /// in the bound namespace comes back with the pool affinity.
    async fn wait_webhooks_in_effect(&self) {
        if let Err(error) = placed_within(&self.client, EDGE_NAMESPACE, "edge", TIMEOUT).await {
            self.fail(&format!(
                "the webhooks are not in effect through the balancer: {error}"
            ));
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), EDGE_NAMESPACE)
    }

    fn classes(&self) -> Api<MachineClass> {
        Api::namespaced(self.client.clone(), MACHINE_NAMESPACE)
    }

    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), MACHINE_NAMESPACE)
    }

    /// Creates, 8 at a time, a MachineClass `{prefix}-{i}` and a Machine
    /// using it for every `i` below `count`; returns their class names.
    async fn create_classes_in_use(&self, prefix: &str, count: usize) -> Vec<String> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
        let (classes, machines) = (self.classes(), self.machines());
        futures::stream::iter(names.clone())
            .map(|name| {
                let (classes, machines) = (classes.clone(), machines.clone());
                async move {
                    create_class(&classes, &name).await;
                    create_machine(&machines, &format!("{name}-machine"), &name).await;
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<()>>()
            .await;
        names
    }

    /// How many of `names` carry the finalizer now.
    async fn finalized(&self, names: &[String]) -> usize {
        let state = finalized_classes(&self.classes(), FINALIZER).await;
        names
            .iter()
            .filter(|name| state.get(*name).copied().unwrap_or_default())
            .count()
    }

    /// Waits until every class of `names` has the finalizer; returns the
    /// time since `since`.
    async fn wait_finalized(&self, names: &[String], since: Instant, within: Duration) -> Duration {
        loop {
            let done = self.finalized(names).await;
            if done == names.len() {
                return since.elapsed();
            }
            if since.elapsed() > within {
                self.fail(&format!(
                    "{done} of {} MachineClasses have the finalizer {:?} after the change",
                    names.len(),
                    since.elapsed()
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Fails the test with the replicas' logs and the balancer's view.
    fn fail(&self, what: &str) -> ! {
        let logs: Vec<String> = self.replicas.iter().map(|r| r.log_tail(60)).collect();
        panic!(
            "{what}\nbalancer: {}\n{}\n--- kube-apiserver ---\n{}",
            self.balancer.history(self.created),
            logs.join("\n"),
            self.env.log_tail(Process::ApiServer, 20)
        )
    }
}

const API_WRITES: &str = "poolkeeper_executor_api_writes_total";
const API_WRITES_OK: &str = r#"poolkeeper_executor_api_writes_total{result="ok"}"#;
const LEADING: &str = "poolkeeper_leader_election_leading ";
const ADMISSIONS: &str = "poolkeeper_webhook_admissions_total{";

/// The sum of `prefix` on `replica`'s `/metrics` once it reaches `at_least`
/// (the metrics observer follows the bus asynchronously), or after 5 s.
async fn wait_metric(replica: &Replica, prefix: &str, at_least: u64) -> u64 {
    let mut value = 0;
    for _ in 0..50 {
        value = metric_sum(&replica.metrics().await, prefix);
        if value >= at_least {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    value
}

/// The Kubernetes Events poolkeeper reported in the machine namespace, as
/// (reason, reportingInstance).
async fn class_events(client: &Client) -> Vec<(String, String)> {
    poolkeeper_events(client, MACHINE_NAMESPACE)
        .await
        .into_iter()
        .map(|event| {
            (
                event.reason.unwrap_or_default(),
                event.reporting_instance.unwrap_or_default(),
            )
        })
        .collect()
}

/// Both replicas up; MachineClass work happens; only the Lease holder
/// writes: the follower's executor writes nothing (its
/// `poolkeeper_executor_api_writes_total` stays 0) and every Event on the
/// classes names the holder as `reportingInstance`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_writes_machine_classes() {
    let mut fleet = setup(SHORT_DEBOUNCE).await;
    fleet.start_ready(A).await;
    let (holder, _) = fleet.wait_holder(A, TIMEOUT).await;
    fleet.start_ready(B).await;
    fleet.wait_webhooks_in_effect().await;

    let started = Instant::now();
    let names = fleet.create_classes_in_use("work", 10).await;
    let converged = fleet.wait_finalized(&names, started, TIMEOUT).await;

    let (leader, follower) = (&fleet.replicas[A], &fleet.replicas[B]);
    let leader_writes = wait_metric(leader, API_WRITES_OK, 10).await;
    let leader_metrics = leader.metrics().await;
    let follower_metrics = follower.metrics().await;
    assert!(
        follower_metrics.contains(API_WRITES),
        "the follower exposes {API_WRITES}:\n{follower_metrics}"
    );
    let follower_writes = metric_sum(&follower_metrics, API_WRITES);
    let mut events = Vec::new();
    for _ in 0..100 {
        events = class_events(&fleet.client).await;
        if events.len() >= names.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let by_leader = events
        .iter()
        .filter(|(_, instance)| *instance == holder)
        .count();
    println!(
        "[replicas/leader-writes] holder {holder}; 10 classes finalized after {converged:?}; \
         api writes: leader {leader_writes} ok, follower {follower_writes}; \
         Events: {} ({by_leader} from the holder)",
        events.len()
    );
    assert_eq!(fleet.lease_holder().await.as_deref(), Some(holder.as_str()));
    assert!(
        leader_writes >= 10,
        "leader writes: {leader_writes}\n{leader_metrics}"
    );
    assert_eq!(
        follower_writes, 0,
        "the follower wrote:\n{follower_metrics}"
    );
    assert_eq!(metric_sum(&leader_metrics, LEADING), 1, "{leader_metrics}");
    assert_eq!(
        metric_sum(&follower_metrics, LEADING),
        0,
        "{follower_metrics}"
    );
    assert!(
        events.len() >= names.len(),
        "one FinalizerAdded Event per class: {events:?}"
    );
    assert!(
        events.iter().all(|(_, instance)| *instance == holder),
        "Events from another instance than the holder {holder}: {events:?}"
    );
}

/// The debounce of the SIGKILL test: long enough that the 50 changes are
/// still pending in the leader when it dies.
const PENDING_DEBOUNCE: Debounce = Debounce {
    interval: Duration::from_secs(1),
    max_delay: Duration::from_secs(5),
};

/// SIGKILL of the leader with 50 MachineClass changes pending: all 50
/// converge (finalizer present) on the new leader within
/// leaseDuration + retryPeriod + 5 s of the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_leader_s_pending_changes_converge_on_the_new_leader() {
    let mut fleet = setup(PENDING_DEBOUNCE).await;
    fleet.start_ready(A).await;
    fleet.wait_holder(A, TIMEOUT).await;
    fleet.start_ready(B).await;

    let created = Instant::now();
    let names = fleet.create_classes_in_use("pending", 50).await;
    let creating = created.elapsed();
    fleet.replicas[A].kill().await;
    let killed = Instant::now();
    let done_at_kill = fleet.finalized(&names).await;

    let bound = LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(5);
    let (holder, took_over) = fleet.wait_holder(B, bound).await;
    let converged = fleet.wait_finalized(&names, killed, bound).await;
    println!(
        "[replicas/sigkill] 50 classes + machines created in {creating:?}; {done_at_kill}/50 \
         finalized at the SIGKILL; {holder} held the Lease {took_over:?} after it; all 50 \
         finalized {converged:?} after it (bound {bound:?})"
    );
    assert!(converged <= bound);
}

/// The leader frozen (SIGSTOP) for 2 × leaseDuration with 20 MachineClass
/// changes pending in its debouncer: the other replica takes the Lease over
/// and finalizes them; resumed, the old leader finds its term over and
/// writes nothing: its accepted-writes counter does not move, its log shows
/// no finalizer update after the resume, and it steps down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_leader_resumed_after_a_takeover_writes_nothing() {
    let mut fleet = setup(PENDING_DEBOUNCE).await;
    fleet.start_ready(A).await;
    fleet.wait_holder(A, TIMEOUT).await;
    fleet.start_ready(B).await;
    let warm = fleet.create_classes_in_use("warm", 3).await;
    fleet.wait_finalized(&warm, Instant::now(), TIMEOUT).await;
    let writes_before = wait_metric(&fleet.replicas[A], API_WRITES_OK, 3).await;

    let names = fleet.create_classes_in_use("frozen", 20).await;
    fleet.replicas[A].freeze(true);
    let frozen = Instant::now();
    let bound = LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(5);
    let (holder, took_over) = fleet.wait_holder(B, bound).await;
    let converged = fleet.wait_finalized(&names, frozen, bound).await;
    // More work that the resumed replica's watches bring it at once.
    let late = fleet.create_classes_in_use("late", 5).await;
    tokio::time::sleep((2 * LEASE_DURATION).saturating_sub(frozen.elapsed())).await;
    let log_at_resume = fleet.replicas[A].log_text().len();
    fleet.replicas[A].freeze(false);
    let paused = frozen.elapsed();
    fleet.wait_finalized(&late, Instant::now(), bound).await;
    // Room for the resumed replica's debounce (max 5 s) and a pass.
    tokio::time::sleep(PENDING_DEBOUNCE.max_delay + RETRY_PERIOD).await;

    let writes_after = metric_sum(&fleet.replicas[A].metrics().await, API_WRITES_OK);
    let resumed_log = fleet.replicas[A].log_text()[log_at_resume..].to_owned();
    let refused = resumed_log
        .matches("without a renewal: not writing")
        .count();
    println!(
        "[replicas/sigstop] leader paused {paused:?}; {holder} held the Lease {took_over:?} \
         after the pause and finalized the 20 pending classes {converged:?} after it; the \
         resumed replica's accepted writes {writes_before} -> {writes_after}, {refused} \
         refused by its term guard"
    );
    assert!(
        fleet
            .lease_holder()
            .await
            .is_some_and(|h| fleet.replicas[B].is(&h)),
        "the resumed replica did not take the Lease back"
    );
    assert_eq!(
        writes_after, writes_before,
        "the resumed replica wrote as leader:\n{resumed_log}"
    );
    assert!(
        !resumed_log.contains("MachineClass finalizers updated"),
        "the resumed replica wrote a finalizer:\n{resumed_log}"
    );
    assert!(
        resumed_log.contains("giving up leadership")
            || resumed_log.contains("the lease was taken over"),
        "the resumed replica stepped down:\n{resumed_log}"
    );
}

/// SIGTERM of the leader: the other replica holds the Lease within 2 s
/// (the leader releases it). The stopped replica restarts as a follower and
/// serves admissions: once the other is stopped too, a Pod created through
/// the apiserver and the balancer is placed by the restarted one alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_leader_hands_over_the_lease_and_restarts_as_a_serving_follower() {
    let mut fleet = setup(SHORT_DEBOUNCE).await;
    fleet.start_ready(A).await;
    fleet.wait_holder(A, TIMEOUT).await;
    fleet.start_ready(B).await;
    fleet.wait_webhooks_in_effect().await;

    fleet.replicas[A].terminate();
    let terminated = Instant::now();
    let (holder_b, handover) = fleet.wait_holder(B, TIMEOUT).await;
    let status = fleet.replicas[A].wait_exit().await;
    let exited = terminated.elapsed();
    println!(
        "[replicas/sigterm] {holder_b} held the Lease {handover:?} after the SIGTERM of the \
         leader, which exited after {exited:?} ({status})"
    );
    assert!(
        handover <= Duration::from_secs(2),
        "Lease handed over after {handover:?}"
    );
    assert!(status.success(), "graceful shutdown ended with {status}");

    let restart = fleet.start_ready(A).await;
    let a = &fleet.replicas[A];
    assert!(
        fleet.replicas[B].is(&fleet.lease_holder().await.unwrap_or_default()),
        "the Lease stays with the other replica"
    );
    assert_eq!(
        metric_sum(&a.metrics().await, LEADING),
        0,
        "restarted as a follower"
    );
    // Readiness does not wait for the first Lease read.
    wait_log(&fleet, A, "following").await;

    // The other replica leaves; only the restarted one is behind the balancer.
    fleet.replicas[B].terminate();
    let status = fleet.replicas[B].wait_exit().await;
    assert!(status.success(), "graceful shutdown ended with {status}");
    fleet.balancer.wait_backend(B, false, TIMEOUT).await;
    assert!(fleet.balancer.is_ready(A));
    let admitted = fleet
        .pods()
        .create(&PostParams::default(), &plain_pod("after-restart"))
        .await
        .unwrap_or_else(|e| {
            fleet.fail(&format!(
                "a Pod create with only the restarted replica: {e}"
            ))
        });
    let admissions = wait_metric(&fleet.replicas[A], ADMISSIONS, 2).await;
    let (holder_a, _) = fleet
        .wait_holder(A, LEASE_DURATION + RETRY_PERIOD * 2)
        .await;
    println!(
        "[replicas/sigterm] restarted replica ready after {restart:?}, following; with the other \
         stopped it admitted the Pod ({admissions} admissions counted) and took the Lease as {holder_a}"
    );
    assert_eq!(pool_affinity(&admitted).as_deref(), Some("edge"));
    assert!(
        admissions >= 2,
        "mutate and validate were answered by the restarted replica: {admissions}"
    );
}

/// A replica started without its serving certificate: `/readyz` says the
/// webhook waits for it, but it campaigns: when the leader is killed it
/// takes the Lease and protects MachineClasses; once the certificate files
/// appear it serves admissions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_without_certificate_leads_and_serves_once_the_certificate_appears() {
    let mut fleet = setup(SHORT_DEBOUNCE).await;
    fleet.replicas[B].remove_certificate();
    fleet.start_ready(A).await;
    fleet.wait_holder(A, TIMEOUT).await;
    fleet.wait_webhooks_in_effect().await;
    fleet.replicas[B].start();
    let waiting = wait_for_certificate_wait(&fleet.replicas[B]).await;
    wait_log(&fleet, B, "following").await;

    fleet.replicas[A].kill().await;
    let killed = Instant::now();
    let (holder, took_over) = fleet.wait_holder(B, TIMEOUT).await;
    let names = fleet.create_classes_in_use("uncertified", 1).await;
    let protected = fleet.wait_finalized(&names, killed, TIMEOUT).await;
    let (status, body) = fleet.replicas[B].readyz().await.expect("/readyz answers");
    assert_eq!(status, 503, "still without a certificate: {body}");

    fleet.replicas[B].install_certificate(&fleet.cert);
    let installed = Instant::now();
    fleet.replicas[B].wait_ready().await;
    fleet.balancer.wait_backend(B, true, TIMEOUT).await;
    let serving = installed.elapsed();
    let admitted = fleet
        .pods()
        .create(&PostParams::default(), &plain_pod("certified"))
        .await
        .unwrap_or_else(|e| {
            fleet.fail(&format!("a Pod create once the certificate is there: {e}"))
        });
    println!(
        "[replicas/no-certificate] /readyz while waiting: {waiting:?}; {holder} took the Lease \
         {took_over:?} after the SIGKILL of the leader, finalized a new class {protected:?} after \
         it; ready and routed {serving:?} after the certificate was written"
    );
    assert_eq!(pool_affinity(&admitted).as_deref(), Some("edge"));
    let admissions = wait_metric(&fleet.replicas[B], ADMISSIONS, 2).await;
    assert!(
        admissions >= 2,
        "the replica that waited for its certificate answered the admission: {admissions}"
    );
}

/// Waits until `/readyz` fails on the webhook waiting for its certificate;
/// returns that line.
async fn wait_for_certificate_wait(replica: &Replica) -> String {
    let started = Instant::now();
    loop {
        if let Some((503, body)) = replica.readyz().await
            && let Some(line) = body.lines().find(|line| {
                line.starts_with("[-]webhook failed: waiting for the serving certificate")
            })
        {
            return line.to_owned();
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "{} never reported waiting for its certificate: {:?}\n{}",
            replica.name,
            replica.readyz().await,
            replica.log_tail(40)
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn wait_log(fleet: &Fleet, index: usize, needle: &str) {
    let started = Instant::now();
    while !fleet.replicas[index].log_of_this_start().contains(needle) {
        if started.elapsed() > TIMEOUT {
            fleet.fail(&format!(
                "{needle:?} not logged by {}",
                fleet.replicas[index].name
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Concurrent Pod creators during the rolling restart.
const CREATORS: usize = 4;
/// Each creator starts a create every 250 ms (16/s in all) unless the
/// previous one is still running.
const CREATE_PERIOD: Duration = Duration::from_millis(250);
/// Bound on the creates of one creator.
const MAX_CREATES: usize = 160;
/// The creators run at least this long.
const CREATE_WINDOW: Duration = Duration::from_secs(20);
/// Rolling restarts (both replicas, one after the other) follow each other
/// while they fit in the window, at most this many.
const MAX_ROUNDS: usize = 4;

/// What the creators saw.
#[derive(Debug, Default)]
struct Creates {
    /// Created Pods and their create latency.
    created: Vec<(String, Duration)>,
    /// Failed creates: name, when (since the start), error.
    failed: Vec<(String, Duration, String)>,
    /// Created Pods without the pool affinity.
    unplaced: Vec<String>,
}

/// One creator: creates `rolling-{id}-{n}` every period until `stop`.
async fn creator(pods: Api<Pod>, id: usize, start: Instant, stop: Arc<AtomicBool>) -> Creates {
    let mut creates = Creates::default();
    let mut ticker = tokio::time::interval(CREATE_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0..MAX_CREATES {
        ticker.tick().await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let name = format!("rolling-{id}-{n}");
        let began = Instant::now();
        match pods.create(&PostParams::default(), &plain_pod(&name)).await {
            Ok(created) => {
                if pool_affinity(&created).as_deref() != Some("edge") {
                    creates.unplaced.push(name.clone());
                }
                creates.created.push((name, began.elapsed()));
            }
            Err(error) => creates
                .failed
                .push((name, began.duration_since(start), short(&error))),
        }
    }
    creates
}

/// An API error's message, cut to 200 characters.
fn short(error: &kube::Error) -> String {
    let text = match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    };
    text.chars().take(200).collect()
}

/// Rolling restarts of both replicas, one at a time (SIGTERM, exited,
/// started again, ready and routed, then the other), round after round
/// during 20 s or more of continuous Pod creates in a bound namespace: none
/// fails, every one is pinned to its pool and scheduled inside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_under_continuous_pod_creates_loses_nothing() {
    let mut fleet = setup(SHORT_DEBOUNCE).await;
    fleet.start_ready(A).await;
    fleet.start_ready(B).await;
    fleet.wait_webhooks_in_effect().await;

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let creators: Vec<_> = (0..CREATORS)
        .map(|id| tokio::spawn(creator(fleet.pods(), id, start, stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut restarts = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let round = Instant::now();
        for index in [A, B] {
            restarts.push(restart(&mut fleet, index, start).await);
        }
        // Another round only if it ends within the window too.
        if start.elapsed() + round.elapsed() > CREATE_WINDOW {
            break;
        }
    }
    let remaining = CREATE_WINDOW.saturating_sub(start.elapsed());
    tokio::time::sleep(remaining.max(Duration::from_secs(2))).await;
    stop.store(true, Ordering::SeqCst);
    let mut creates = Creates::default();
    for task in creators {
        let one = task.await.expect("a creator task joins");
        creates.created.extend(one.created);
        creates.failed.extend(one.failed);
        creates.unplaced.extend(one.unplaced);
    }
    let window = start.elapsed();
    report_rolling(&fleet, &creates, &restarts, start);

    assert!(
        creates.failed.is_empty(),
        "failed creates: {:?}",
        creates.failed
    );
    assert!(
        creates.unplaced.is_empty(),
        "Pods without the pool affinity: {:?}",
        creates.unplaced
    );
    assert!(window >= CREATE_WINDOW);
    let rate = creates.created.len() as f64 / window.as_secs_f64();
    assert!(rate >= 10.0, "{rate:.1} creates/s");
    assert_scheduled_in_pool(&fleet, &creates).await;
}

/// One replica's restart: when it was terminated, exited and was routed
/// again (since the start of the creates).
struct Restart {
    name: &'static str,
    terminated: Duration,
    exited: Duration,
    routed: Duration,
}

async fn restart(fleet: &mut Fleet, index: usize, start: Instant) -> Restart {
    let terminated = start.elapsed();
    fleet.replicas[index].terminate();
    let status = fleet.replicas[index].wait_exit().await;
    let exited = start.elapsed();
    if !status.success() {
        fleet.fail(&format!(
            "{} ended its graceful shutdown with {status}",
            fleet.replicas[index].name
        ));
    }
    fleet.start_ready(index).await;
    Restart {
        name: fleet.replicas[index].name,
        terminated,
        exited,
        routed: start.elapsed(),
    }
}

fn report_rolling(fleet: &Fleet, creates: &Creates, restarts: &[Restart], start: Instant) {
    let window = start.elapsed();
    let mut latencies: Vec<Duration> = creates.created.iter().map(|(_, d)| *d).collect();
    latencies.sort();
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let total = creates.created.len() + creates.failed.len();
    println!(
        "[replicas/rolling] {total} creates in {window:?} ({:.1}/s, {CREATORS} creators) across \
         {} replica restarts, {} failed; latency p50 {:?}, p99 {:?}, max {:?}; balancer: forwarded A {} B {}, \
         unroutable {}, refused {}",
        total as f64 / window.as_secs_f64(),
        restarts.len(),
        creates.failed.len(),
        percentile(0.5),
        percentile(0.99),
        latencies.last().copied().unwrap_or_default(),
        fleet.balancer.forwarded(A),
        fleet.balancer.forwarded(B),
        fleet.balancer.unroutable(),
        fleet.balancer.refused(),
    );
    for r in restarts {
        println!(
            "[replicas/rolling] {}: SIGTERM at +{:.1}s, exited at +{:.1}s, ready and routed \
             again at +{:.1}s",
            r.name,
            r.terminated.as_secs_f64(),
            r.exited.as_secs_f64(),
            r.routed.as_secs_f64()
        );
    }
    println!(
        "[replicas/rolling] balancer: {}",
        fleet.balancer.history(start)
    );
    for failure in creates.failed.iter().take(10) {
        println!("[replicas/rolling] failed: {failure:?}");
    }
}

/// Waits until every created Pod is bound; each one's node is in the pool.
async fn assert_scheduled_in_pool(fleet: &Fleet, creates: &Creates) {
    let started = Instant::now();
    loop {
        let listed = fleet
            .pods()
            .list(&ListParams::default())
            .await
            .expect("listing Pods");
        let nodes: BTreeMap<String, Option<String>> = listed
            .items
            .into_iter()
            .map(|pod| {
                let node = pod.spec.and_then(|spec| spec.node_name);
                (pod.metadata.name.unwrap_or_default(), node)
            })
            .collect();
        let outside: Vec<_> = nodes
            .iter()
            .filter(|(_, node)| {
                node.as_ref()
                    .is_some_and(|n| !EDGE_NODES.contains(&n.as_str()))
            })
            .collect();
        assert!(
            outside.is_empty(),
            "Pods scheduled outside the pool: {outside:?}"
        );
        let unbound = creates
            .created
            .iter()
            .filter(|(name, _)| !matches!(nodes.get(name), Some(Some(_))))
            .count();
        if unbound == 0 {
            println!(
                "[replicas/rolling] all {} Pods scheduled inside the pool after {:?}",
                creates.created.len(),
                started.elapsed()
            );
            return;
        }
        if started.elapsed() > TIMEOUT {
            panic!(
                "{unbound} Pods not bound within {TIMEOUT:?}\n{}",
                fleet.env.log_tail(Process::Scheduler, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
