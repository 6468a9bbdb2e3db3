//! The soak of `cargo xtask soak`: the poolkeeper binary, with its webhooks registered, against
//! a local control plane (`poolkeeper-testenv`), under steady Pod admissions and Machine churn
//! for a fixed time. Samples the process's RSS and open file descriptors and its `/metrics`
//! every interval, prints a table and exits non-zero when memory or descriptors grow past
//! 1.5x their value after warm-up, or any request the load made failed or was answered wrongly.
//!
//! ```sh
//! soak --poolkeeper target/debug/poolkeeper --duration 600 [--pods-per-second 5] [--machines-per-second 2]
//! ```
//!
//! Everything runs on 127.0.0.1; the controller is ended by its PID (SIGTERM, then SIGKILL),
//! the control plane by dropping the `TestEnv`.

use std::collections::{BTreeMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Taint};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_api::{Machine, MachineClass, NodePool};
use poolkeeper_testenv::{TestEnv, WebhookCert, WebhookRegistration, free_port};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::MissedTickBehavior;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const POOL_LABEL: &str = "apps.openyurt.io/nodepool";
const EDGE_TAINT: &str = "node-role.kubernetes.io/edge";
const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
const CONTROLLER_NAMESPACE: &str = "poolkeeper-system";
const MACHINE_NAMESPACE: &str = "machine-system";
/// Bound to the pool `edge` by the placement policy.
const BOUND_NAMESPACE: &str = "soak-edge";
/// Bound to nothing: its Pods name their pool with the pool label.
const LABELLED_NAMESPACE: &str = "soak-plain";
const CLASSES: usize = 4;
/// Consecutive Machine creates of one class. With [`MAX_MACHINES`] alive and the oldest
/// deleted first, the Machines alive span two or three classes: each class in turn gets its
/// first Machine and later loses its last, so the finalizer is added and removed all along.
const CREATES_PER_CLASS: u64 = 6;
/// Pods and Machines alive at once; older ones are deleted.
const MAX_PODS: usize = 25;
const MAX_MACHINES: usize = 12;
const FIELD_MANAGER: &str = "poolkeeper-soak";
const PATIENCE: Duration = Duration::from_secs(60);

struct Args {
    poolkeeper: PathBuf,
    duration: Duration,
    pods_per_second: f64,
    machines_per_second: f64,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        poolkeeper: PathBuf::new(),
        duration: Duration::from_secs(600),
        pods_per_second: 5.0,
        machines_per_second: 2.0,
    };
    let mut rest = std::env::args().skip(1);
    while let Some(arg) = rest.next() {
        let mut value = || rest.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--poolkeeper" => args.poolkeeper = PathBuf::from(value()?),
            "--duration" => args.duration = Duration::from_secs(value()?.parse()?),
            "--pods-per-second" => args.pods_per_second = value()?.parse()?,
            "--machines-per-second" => args.machines_per_second = value()?.parse()?,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if args.poolkeeper.as_os_str().is_empty() {
        return Err("--poolkeeper PATH is required".into());
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let outcome = match parse_args() {
        Ok(args) => soak(args).await,
        Err(error) => Err(error),
    };
    match outcome {
        Ok(problems) if problems.is_empty() => {
            println!("soak passed");
            ExitCode::SUCCESS
        }
        Ok(problems) => {
            println!("soak FAILED:");
            for problem in problems {
                println!("  - {problem}");
            }
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("soak: error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the soak; the problems it found (none: passed).
async fn soak(args: Args) -> Result<Vec<String>, BoxError> {
    let started = Instant::now();
    let env = TestEnv::builder()
        .crds(poolkeeper_api::crds())
        .start()
        .await?;
    let client = env.client();
    seed_cluster(&env, &client).await?;
    let dir = tempfile::tempdir()?;
    let cert = WebhookCert::generate()?;
    cert.write_to_dir(dir.path())?;
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let webhook_port = free_port()?;
    let config = write_config(dir.path(), admin, webhook_port)?;
    let log = dir.path().join("poolkeeper.log");
    let mut controller = Controller::start(&args.poolkeeper, &config, env.kubeconfig_path(), &log)?;
    println!(
        "control plane and poolkeeper (pid {}) started in {:.1}s; log {}",
        controller.pid,
        started.elapsed().as_secs_f64(),
        log.display()
    );
    wait_ready(admin).await?;
    env.register_webhooks(registration(webhook_port, &cert.ca_pem)?)
        .await?;
    let mut load = Load::new(client);
    load.wait_webhooks_in_effect().await?;

    let samples = drive(&args, &mut load, &controller, admin).await?;
    let mut problems = load.final_checks().await;
    let stop = controller.stop().await;
    print_table(&samples, &args);
    problems.extend(judge(&samples, &load));
    problems.extend(judge_log(&log));
    if let Err(error) = stop {
        problems.push(format!("poolkeeper did not stop cleanly: {error}"));
    }
    if !problems.is_empty() {
        println!("last lines of the poolkeeper log:\n{}", tail(&log, 30));
    }
    Ok(problems)
}

/// Namespaces, the pools `edge` (two tainted nodes) and `cloud` (one node), the placement
/// policy binding [`BOUND_NAMESPACE`] to `edge`, and the MachineClasses.
async fn seed_cluster(env: &TestEnv, client: &Client) -> Result<(), BoxError> {
    for namespace in [
        CONTROLLER_NAMESPACE,
        MACHINE_NAMESPACE,
        BOUND_NAMESPACE,
        LABELLED_NAMESPACE,
    ] {
        env.create_namespace(namespace).await?;
    }
    let pools: Api<NodePool> = Api::all(client.clone());
    for (name, pool_type) in [("edge", "Edge"), ("cloud", "Cloud")] {
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "apps.openyurt.io/v1beta2", "kind": "NodePool",
            "metadata": {"name": name}, "spec": {"type": pool_type}
        }))?;
        pools.create(&PostParams::default(), &pool).await?;
    }
    let taint = Taint {
        key: EDGE_TAINT.to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    };
    for (name, pool, taints) in [
        ("edge-1", "edge", vec![taint.clone()]),
        ("edge-2", "edge", vec![taint]),
        ("cloud-1", "cloud", Vec::new()),
    ] {
        let labels = BTreeMap::from([(POOL_LABEL.to_owned(), pool.to_owned())]);
        env.ready_node(name, labels, taints).await?;
    }
    let policy = format!(
        "bindings:\n  - {{namespace: {BOUND_NAMESPACE}, nodePool: edge}}\nedgeTolerations:\n  - {{key: {EDGE_TAINT}, operator: Exists, effect: NoSchedule}}\n"
    );
    let config_map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "poolkeeper-placement", "namespace": CONTROLLER_NAMESPACE},
        "data": {"placement.yaml": policy},
    });
    Api::<ConfigMap>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .patch(
            "poolkeeper-placement",
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&config_map),
        )
        .await?;
    let classes: Api<MachineClass> = Api::namespaced(client.clone(), MACHINE_NAMESPACE);
    for i in 0..CLASSES {
        let class: MachineClass = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": format!("class-{i}")},
            "providerSpec": {"instanceType": "m5.large"}
        }))?;
        classes.create(&PostParams::default(), &class).await?;
    }
    Ok(())
}

fn write_config(dir: &Path, admin: SocketAddr, webhook_port: u16) -> Result<PathBuf, BoxError> {
    let path = dir.join("poolkeeper.yaml");
    let text = format!(
        "namespace: {MACHINE_NAMESPACE}
leaderElection: {{enabled: true, leaseNamespace: {CONTROLLER_NAMESPACE}}}
webhook: {{listen: \"127.0.0.1:{webhook_port}\", certDir: \"{}\", shutdownTimeout: 5s}}
health: {{listen: \"{admin}\"}}
shutdown: {{gracePeriod: 10s, drainDelay: 0s}}
logging: {{format: text, level: info}}
",
        dir.display()
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

/// `deploy/webhooks` pointed at 127.0.0.1, with the namespace selectors of the bound
/// namespace filled in (what the leader keeps in step with the bindings).
fn registration(port: u16, ca_pem: &str) -> Result<WebhookRegistration, BoxError> {
    let mut registration = WebhookRegistration::installed(port, ca_pem)?;
    for configuration in &mut registration.mutating {
        *configuration =
            serde_json::from_value(bind_selectors(serde_json::to_value(&*configuration)?))?;
    }
    for configuration in &mut registration.validating {
        *configuration =
            serde_json::from_value(bind_selectors(serde_json::to_value(&*configuration)?))?;
    }
    Ok(registration)
}

/// `In` lists exactly the bound namespace; `NotIn` also excludes it.
fn bind_selectors(mut configuration: Value) -> Value {
    let webhooks = configuration["webhooks"].as_array_mut();
    for webhook in webhooks.into_iter().flatten() {
        let expressions = webhook["namespaceSelector"]["matchExpressions"].as_array_mut();
        for expression in expressions.into_iter().flatten() {
            if expression["key"] != "kubernetes.io/metadata.name" {
                continue;
            }
            match expression["operator"].as_str() {
                Some("In") => expression["values"] = json!([BOUND_NAMESPACE]),
                Some("NotIn") => {
                    if let Some(values) = expression["values"].as_array_mut() {
                        values.push(json!(BOUND_NAMESPACE));
                    }
                }
                _ => {}
            }
        }
    }
    configuration
}

/// The poolkeeper process this soak started.
struct Controller {
    child: tokio::process::Child,
    pid: u32,
}

impl Controller {
    fn start(
        binary: &Path,
        config: &Path,
        kubeconfig: &Path,
        log: &Path,
    ) -> Result<Self, BoxError> {
        let log_file = std::fs::File::create(log)?;
        let child = tokio::process::Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(config)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let pid = child.id().ok_or("poolkeeper exited at once")?;
        Ok(Self { child, pid })
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM to this PID, then SIGKILL if it has not exited within 30 s.
    async fn stop(&mut self) -> Result<(), BoxError> {
        if !self.is_running() {
            return Err("poolkeeper had already exited".into());
        }
        std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()?;
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if status.success() {
                    Ok(())
                } else {
                    Err(format!("poolkeeper exited with {status}").into())
                }
            }
            Err(_) => {
                self.child.start_kill()?;
                Err("poolkeeper did not exit within 30s of SIGTERM".into())
            }
        }
    }
}

/// A minimal HTTP/1.0 GET on the admin server: status and body.
async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no HTTP status line")?;
    Ok((status, body.to_owned()))
}

async fn wait_ready(admin: SocketAddr) -> Result<(), BoxError> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok((200, _)) = http_get(admin, "/readyz").await {
            return Ok(());
        }
        if Instant::now() > deadline {
            let body = http_get(admin, "/readyz?verbose").await.map(|r| r.1);
            return Err(format!("poolkeeper not ready within {PATIENCE:?}: {body:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The load and what came of it.
struct Load {
    client: Client,
    pods: VecDeque<(String, String)>,
    machines: VecDeque<String>,
    next: u64,
    created_pods: u64,
    denied_as_expected: u64,
    deleted_pods: u64,
    machine_ops: u64,
    machine_creates: u64,
    failures: Vec<String>,
}

impl Load {
    fn new(client: Client) -> Self {
        Self {
            client,
            pods: VecDeque::new(),
            machines: VecDeque::new(),
            next: 0,
            created_pods: 0,
            denied_as_expected: 0,
            deleted_pods: 0,
            machine_ops: 0,
            machine_creates: 0,
            failures: Vec::new(),
        }
    }

    fn fail(&mut self, what: String) {
        if self.failures.len() < 1000 {
            eprintln!("soak: {what}");
            self.failures.push(what);
        }
    }

    /// Until a Pod of the bound namespace comes back with the pool's affinity.
    async fn wait_webhooks_in_effect(&mut self) -> Result<(), BoxError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), BOUND_NAMESPACE);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(pod) = pods
                .create(&dry_run, &pod("soak-probe", json!({}), None))
                .await
                && placed_in_edge(&pod)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("the webhooks did not take effect".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One admission: mostly Pods that must be placed in `edge` (by namespace or by label),
    /// every tenth one a Pod pinned outside its pool that must be denied.
    async fn admit_one(&mut self) {
        self.next += 1;
        let n = self.next;
        let (namespace, labels) = if n.is_multiple_of(2) {
            (BOUND_NAMESPACE, json!({}))
        } else {
            (LABELLED_NAMESPACE, json!({POOL_LABEL: "edge"}))
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let name = format!("soak-{n}");
        if n.is_multiple_of(10) {
            let foreign = pod(&name, labels, Some("cloud-1"));
            match api.create(&PostParams::default(), &foreign).await {
                Err(kube::Error::Api(status)) if status.code == 403 => self.denied_as_expected += 1,
                Err(error) => self.fail(format!("create {namespace}/{name} (foreign): {error}")),
                Ok(_) => self.fail(format!("{namespace}/{name} outside its pool was admitted")),
            }
            return;
        }
        match api
            .create(&PostParams::default(), &pod(&name, labels, None))
            .await
        {
            Ok(created) if placed_in_edge(&created) => {
                self.created_pods += 1;
                self.pods.push_back((namespace.to_owned(), name));
            }
            Ok(_) => {
                self.fail(format!(
                    "{namespace}/{name} was admitted without its pool's affinity"
                ));
                self.pods.push_back((namespace.to_owned(), name));
            }
            Err(error) => self.fail(format!("create {namespace}/{name}: {error}")),
        }
        while self.pods.len() > MAX_PODS {
            let (namespace, name) = self.pods.pop_front().expect("not empty");
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => self.deleted_pods += 1,
                Err(error) => self.fail(format!("delete {namespace}/{name}: {error}")),
            }
        }
    }

    /// One Machine created ([`CREATES_PER_CLASS`] of each class in turn), or the oldest
    /// deleted once there are enough.
    async fn churn_one(&mut self) {
        let api: Api<Machine> = Api::namespaced(self.client.clone(), MACHINE_NAMESPACE);
        self.machine_ops += 1;
        if self.machines.len() >= MAX_MACHINES
            || (self.machine_ops.is_multiple_of(3) && !self.machines.is_empty())
        {
            let name = self.machines.pop_front().expect("not empty");
            if let Err(error) = api.delete(&name, &DeleteParams::default()).await {
                self.fail(format!("delete Machine {name}: {error}"));
            }
            return;
        }
        let name = format!("soak-machine-{}", self.machine_ops);
        let class = format!(
            "class-{}",
            (self.machine_creates / CREATES_PER_CLASS) % CLASSES as u64
        );
        self.machine_creates += 1;
        let result = serde_json::from_value::<Machine>(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"class": {"kind": "MachineClass", "name": class}}
        }));
        match result {
            Ok(machine) => match api.create(&PostParams::default(), &machine).await {
                Ok(_) => self.machines.push_back(name),
                Err(error) => self.fail(format!("create Machine {name}: {error}")),
            },
            Err(error) => self.fail(format!("building Machine {name}: {error}")),
        }
    }

    /// After the load: the classes in use carry the finalizer, and once every Machine is
    /// gone none does.
    async fn final_checks(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        let classes: Api<MachineClass> = Api::namespaced(self.client.clone(), MACHINE_NAMESPACE);
        let machines: Api<Machine> = Api::namespaced(self.client.clone(), MACHINE_NAMESPACE);
        let in_use: Vec<String> = match machines.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .map(|m| m.spec.class.name.clone())
                .collect(),
            Err(error) => return vec![format!("listing Machines: {error}")],
        };
        if !wait_for_finalizers(&classes, |name| in_use.iter().any(|c| c == name)).await {
            problems.push("the MachineClasses in use did not all get the finalizer".to_owned());
        }
        for name in std::mem::take(&mut self.machines) {
            if let Err(error) = machines.delete(&name, &DeleteParams::default()).await {
                problems.push(format!("delete Machine {name}: {error}"));
            }
        }
        if !wait_for_finalizers(&classes, |_| false).await {
            problems.push("finalizers stayed on MachineClasses no Machine uses".to_owned());
        }
        problems
    }
}

/// Until exactly the classes `wanted` says carry the finalizer (at most [`PATIENCE`]).
async fn wait_for_finalizers(classes: &Api<MachineClass>, wanted: impl Fn(&str) -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if let Ok(list) = classes.list(&ListParams::default()).await {
            let settled = list.items.iter().all(|class| {
                let name = class.metadata.name.as_deref().unwrap_or_default();
                let has = class
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == FINALIZER);
                has == wanted(name)
            });
            if settled {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// A small Pod; `node_name` pins it to a node.
fn pod(name: &str, labels: Value, node_name: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{
        "name": "app", "image": "registry.example/app:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
    }]});
    if let Some(node) = node_name {
        spec["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels}, "spec": spec
    }))
    .expect("a valid Pod")
}

/// Whether the webhook gave the Pod the required affinity to `edge` and the edge toleration.
fn placed_in_edge(pod: &Pod) -> bool {
    let Ok(value) = serde_json::to_value(pod) else {
        return false;
    };
    let terms = &value["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let affinity = terms[0]["matchExpressions"][0]
        == json!({"key": POOL_LABEL, "operator": "In", "values": ["edge"]});
    let tolerated = value["spec"]["tolerations"]
        .as_array()
        .is_some_and(|list| list.iter().any(|t| t["key"] == EDGE_TAINT));
    affinity && tolerated
}

/// One sample of the process and its metrics.
#[derive(Clone, Debug, Default)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: u64,
    admissions: u64,
    passes: u64,
    reconciliations: u64,
    writes: u64,
    conflicts: u64,
    write_errors: u64,
    failed_passes: u64,
    watch_failures: u64,
    bus_lagged: u64,
    created_pods: u64,
    load_failures: u64,
    machine_ops: u64,
}

async fn take_sample(at: Duration, pid: u32, admin: SocketAddr, load: &Load) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_default();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count() as u64)
        .unwrap_or_default();
    let metrics = match http_get(admin, "/metrics").await {
        Ok((200, body)) => body,
        _ => String::new(),
    };
    let sum = |prefix: &str| metric_sum(&metrics, prefix);
    Sample {
        at,
        rss_kib,
        fds,
        admissions: sum("poolkeeper_webhook_admissions_total{"),
        passes: sum("poolkeeper_executor_passes_total"),
        reconciliations: sum("poolkeeper_executor_reconciliations_total{"),
        writes: sum(r#"poolkeeper_executor_api_writes_total{result="ok"}"#),
        conflicts: sum(r#"poolkeeper_executor_api_writes_total{result="conflict"}"#),
        write_errors: sum(r#"poolkeeper_executor_api_writes_total{result="error"}"#),
        failed_passes: sum("poolkeeper_executor_failed_passes_total"),
        watch_failures: sum("poolkeeper_watch_failures_total{"),
        bus_lagged: sum("poolkeeper_bus_events_lagged_total{"),
        created_pods: load.created_pods,
        load_failures: load.failures.len() as u64,
        machine_ops: load.machine_ops,
    }
}

/// The sum of the samples whose line starts with `prefix`.
fn metric_sum(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

fn every(per_second: f64) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second.max(0.01)));
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

/// The sampling interval: a minute, or a quarter of a shorter soak.
fn sample_interval(duration: Duration) -> Duration {
    Duration::from_secs(60).min(duration / 4)
}

/// The load for the whole duration, sampling at the start and every interval.
async fn drive(
    args: &Args,
    load: &mut Load,
    controller: &Controller,
    admin: SocketAddr,
) -> Result<Vec<Sample>, BoxError> {
    let started = Instant::now();
    let first = take_sample(Duration::ZERO, controller.pid, admin, load).await;
    println!("{}\n{}", header(), row(&first, None));
    let mut samples = vec![first];
    let mut pods = every(args.pods_per_second);
    let mut machines = every(args.machines_per_second);
    let mut sampling = tokio::time::interval_at(
        tokio::time::Instant::now() + sample_interval(args.duration),
        sample_interval(args.duration),
    );
    let end = tokio::time::sleep(args.duration);
    tokio::pin!(end);
    loop {
        tokio::select! {
            () = &mut end => break,
            _ = pods.tick() => load.admit_one().await,
            _ = machines.tick() => load.churn_one().await,
            _ = sampling.tick() => {
                let sample = take_sample(started.elapsed(), controller.pid, admin, load).await;
                println!("{}", row(&sample, samples.last()));
                samples.push(sample);
            }
        }
    }
    let last = take_sample(started.elapsed(), controller.pid, admin, load).await;
    println!("{}", row(&last, samples.last()));
    samples.push(last);
    Ok(samples)
}

fn header() -> String {
    format!(
        "{:>6} {:>8} {:>5} {:>11} {:>7} {:>8} {:>7} {:>6} {:>6} {:>7} {:>7} {:>6} {:>8} {:>9} {:>9}",
        "min",
        "RSS MiB",
        "fds",
        "admissions",
        "passes",
        "reconc.",
        "writes",
        "confl.",
        "w.err",
        "f.pass",
        "watch.f",
        "lagged",
        "pods ok",
        "machines",
        "failures"
    )
}

/// A table row: totals for the process, per-interval counts for the rest.
fn row(sample: &Sample, previous: Option<&Sample>) -> String {
    let base = previous.cloned().unwrap_or_default();
    format!(
        "{:>6.1} {:>8.1} {:>5} {:>11} {:>7} {:>8} {:>7} {:>6} {:>6} {:>7} {:>7} {:>6} {:>8} {:>9} {:>9}",
        sample.at.as_secs_f64() / 60.0,
        sample.rss_kib as f64 / 1024.0,
        sample.fds,
        sample.admissions - base.admissions.min(sample.admissions),
        sample.passes - base.passes.min(sample.passes),
        sample.reconciliations - base.reconciliations.min(sample.reconciliations),
        sample.writes - base.writes.min(sample.writes),
        sample.conflicts,
        sample.write_errors,
        sample.failed_passes,
        sample.watch_failures,
        sample.bus_lagged,
        sample.created_pods - base.created_pods.min(sample.created_pods),
        sample.machine_ops - base.machine_ops.min(sample.machine_ops),
        sample.load_failures,
    )
}

fn print_table(samples: &[Sample], args: &Args) {
    println!(
        "\nsoak of {:?}: {} Pods/s, {} Machine operations/s (per-interval counts; RSS, fds, conflicts, errors, failed passes, watch failures, lagged events and failures are totals)",
        args.duration, args.pods_per_second, args.machines_per_second
    );
    println!("{}", header());
    let mut previous = None;
    for sample in samples {
        println!("{}", row(sample, previous));
        previous = Some(sample);
    }
}

/// The pass criteria.
fn judge(samples: &[Sample], load: &Load) -> Vec<String> {
    let mut problems = Vec::new();
    // The sample after the first interval: caches, connection pools and the index are warm.
    let (Some(baseline), Some(end)) = (samples.get(1), samples.last()) else {
        return vec!["too few samples".to_owned()];
    };
    println!(
        "\nbaseline after warm-up ({:.1} min): RSS {:.1} MiB, {} fds; end: RSS {:.1} MiB, {} fds",
        baseline.at.as_secs_f64() / 60.0,
        baseline.rss_kib as f64 / 1024.0,
        baseline.fds,
        end.rss_kib as f64 / 1024.0,
        end.fds
    );
    println!(
        "load: {} Pods admitted and placed, {} denied as expected, {} deleted, {} Machine operations, {} failures",
        load.created_pods,
        load.denied_as_expected,
        load.deleted_pods,
        load.machine_ops,
        load.failures.len()
    );
    if end.rss_kib == 0 || end.fds == 0 {
        problems.push("poolkeeper's /proc entries could not be read at the end".to_owned());
    }
    if end.rss_kib * 2 > baseline.rss_kib * 3 {
        problems.push(format!(
            "RSS grew from {} KiB to {} KiB (> 1.5x)",
            baseline.rss_kib, end.rss_kib
        ));
    }
    if end.fds * 2 > baseline.fds * 3 {
        problems.push(format!(
            "open fds grew from {} to {} (> 1.5x)",
            baseline.fds, end.fds
        ));
    }
    if end.write_errors > 0 {
        problems.push(format!("{} finalizer writes failed", end.write_errors));
    }
    if load.created_pods == 0 || load.machine_ops == 0 {
        problems.push("the load did nothing".to_owned());
    }
    problems.extend(load.failures.iter().take(20).cloned());
    problems
}

/// Counts the log's warnings and errors (a steady load should cause neither) and prints
/// the first 30 distinct messages once each; an error is a problem.
fn judge_log(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut counts: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let level = words.nth(1).unwrap_or_default();
        if level == "WARN" || level == "ERROR" {
            // The message without the timestamp: repeats of one message count together.
            let message = line.split_once(level).map_or(line, |(_, rest)| rest.trim());
            *counts.entry((level, message)).or_default() += 1;
        }
    }
    let total = |wanted: &str| -> u64 {
        counts
            .iter()
            .filter(|((level, _), _)| *level == wanted)
            .map(|(_, n)| n)
            .sum()
    };
    let (warnings, errors) = (total("WARN"), total("ERROR"));
    println!(
        "log: {} lines, {warnings} warnings, {errors} errors",
        text.lines().count()
    );
    for ((level, message), n) in counts.iter().take(30) {
        println!("  {n:>5} x {level} {message}");
    }
    if errors > 0 {
        return vec![format!("{errors} errors in the poolkeeper log")];
    }
    Vec::new()
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
