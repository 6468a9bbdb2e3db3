//! The phases of the kwok run, in order.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use poolkeeper_testenv::{Process, TestEnv};
use tokio::process::{Child, Command};

use super::report::{AuditFigures, Creation, KwokFigures, ReportFigures, Steady};
use super::{pods, sample, stages};
use crate::admission::{APISERVER_METRIC, POOLKEEPER_METRIC, since};
use crate::changes::ClassWatch;
use crate::error::{Result, ScaleError};
use crate::objects;
use crate::process::{self, Launch, Memory, Poolkeeper};
use crate::startup::Startup;
use crate::stats::{Histogram, histograms};
use crate::{
    Args, CONTROLLER_NAMESPACE, FINALIZER, NAMESPACE, PLACEMENT_KEY, READY_TIMEOUT, launch,
    load_cluster, new_figures, record_load_average, register_webhooks, settle,
};

/// Where kwok takes Pod IPs from: room for a million Pods.
const POD_CIDR: &str = "10.64.0.0/10";
const LEASE_NAMESPACE: &str = "kube-node-lease";

pub async fn run(args: &Args, kwok: &Path) -> Result<KwokFigures> {
    let started = Instant::now();
    process::prepare_dir(&args.out)?;
    let mut figures = KwokFigures::new(new_figures(args), args);
    record_load_average(&mut figures.base, "start");
    println!("starting etcd, kube-apiserver, kube-scheduler and kube-controller-manager ...");
    let env = TestEnv::builder()
        .crd_files(std::iter::once(&args.crds).chain(&args.openreports_crds))
        .scheduler(true)
        .controller_manager(true)
        .client_qps(args.client_qps)
        .startup_timeout(Duration::from_secs(120))
        .start()
        .await?;
    let mut namespaces = vec![NAMESPACE.to_owned(), CONTROLLER_NAMESPACE.to_owned()];
    namespaces.extend((0..args.pools.max(1)).map(objects::tenant_namespace));
    for namespace in &namespaces {
        env.create_namespace(namespace).await?;
    }
    let client = env.client();
    load_cluster(args, &client, &mut figures.base).await?;
    println!("starting kwok ...");
    let mut kwok = start_kwok(kwok, &env, args)?;
    figures.leases_after = wait_leases(&client, args.nodes, &mut kwok).await?;
    let classes = ClassWatch::start(client.clone(), NAMESPACE, FINALIZER);
    classes.wait_listed(Duration::from_secs(60)).await?;
    let certs = tempfile::tempdir().map_err(|e| ScaleError::io("creating a directory", e))?;
    let launch = launch(args, &env, certs.path().to_owned())?;
    let webhooks = register_webhooks(&env, args, &launch, certs.path()).await?;
    let phases = Phases {
        args,
        env: &env,
        client: &client,
        classes: &classes,
        launch: &launch,
        webhooks: &webhooks,
        kwok: kwok.id(),
    };
    let result = phases.run_poolkeeper(&mut figures, false).await;
    let restarted = match result {
        Ok(()) => phases.run_poolkeeper(&mut figures, true).await,
        Err(error) => Err(error),
    };
    let _ = kwok.kill().await;
    record_load_average(&mut figures.base, "end");
    restarted?;
    figures.total = started.elapsed();
    Ok(figures)
}

/// kwok against the test control plane, managing every Node, dying with this process.
fn start_kwok(binary: &Path, env: &TestEnv, args: &Args) -> Result<Child> {
    let config = args.out.join("kwok.yaml");
    let heartbeat = Duration::from_secs(args.heartbeat_seconds.max(1));
    std::fs::write(&config, stages::config(heartbeat, POD_CIDR))
        .map_err(|e| ScaleError::io(format!("writing {}", config.display()), e))?;
    let log_path = args.out.join("kwok.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| ScaleError::io(format!("creating {}", log_path.display()), e))?;
    let mut command = Command::new("setpriv");
    command
        .args(["--pdeathsig", "KILL", "--"])
        .arg(binary)
        .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
        .arg(format!("--config={}", config.display()))
        .args(["--manage-all-nodes=true", "--server-address=127.0.0.1:0"])
        .arg(format!("--cidr={POD_CIDR}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    command
        .spawn()
        .map_err(|e| ScaleError::io(format!("starting {}", binary.display()), e))
}

/// Until kwok holds a Lease for every Node: it manages them all.
async fn wait_leases(client: &Client, nodes: usize, kwok: &mut Child) -> Result<Duration> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let started = Instant::now();
    let timeout = Duration::from_secs(600);
    loop {
        if let Ok(Some(status)) = kwok.try_wait() {
            return Err(ScaleError::Unexpected(format!("kwok exited: {status}")));
        }
        let leases = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| ScaleError::kube("listing the Leases", e))?
            .items
            .len();
        if leases >= nodes {
            println!(
                "  {leases} Leases after {:.1}s",
                started.elapsed().as_secs_f64()
            );
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            return Err(ScaleError::timeout(
                format!("{nodes} Leases ({leases} so far)"),
                timeout,
            ));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// What the phases share.
struct Phases<'a> {
    args: &'a Args,
    env: &'a TestEnv,
    client: &'a Client,
    classes: &'a ClassWatch,
    launch: &'a Launch,
    webhooks: &'a [String],
    kwok: Option<u32>,
}

impl Phases<'_> {
    /// A poolkeeper process from start to stop: the first one is measured under load, the
    /// second (`restart`) at start and through the churn.
    async fn run_poolkeeper(&self, figures: &mut KwokFigures, restart: bool) -> Result<()> {
        println!("starting poolkeeper ...");
        let mut poolkeeper = Poolkeeper::start(self.launch)?;
        let result = if restart {
            self.after_restart(&mut poolkeeper, figures).await
        } else {
            self.under_load(&mut poolkeeper, figures).await
        };
        let stopped = poolkeeper.stop().await;
        result?;
        stopped.map(drop)
    }

    async fn under_load(
        &self,
        poolkeeper: &mut Poolkeeper,
        figures: &mut KwokFigures,
    ) -> Result<()> {
        let ready = wait_ready(poolkeeper).await?;
        settle(self.args, poolkeeper, self.classes, &mut figures.base).await?;
        figures.first_start = Startup::from_log(&poolkeeper.log(), ready);
        figures
            .memory
            .push(("first start, settled", poolkeeper.memory()?));
        let window = Duration::from_secs(self.args.steady_seconds);
        println!("steady state without Pods ({}s) ...", window.as_secs());
        figures.steady.push(
            self.steady(poolkeeper, "heartbeats, no Pods", window)
                .await?,
        );
        let scheduled = self.args.scheduled_pods.min(self.args.running_pods);
        if scheduled > 0 {
            figures
                .creations
                .push(self.create_pods(poolkeeper, scheduled).await?);
            record_load_average(&mut figures.base, "Deployments' Pods Running");
        }
        if scheduled < self.args.running_pods {
            let bound = scheduled..self.args.running_pods;
            figures
                .creations
                .push(self.create_bound(poolkeeper, bound).await?);
        }
        record_load_average(&mut figures.base, "all Pods Running");
        figures.cluster_memory = self.cluster_memory();
        println!("steady state with the Pods ({}s) ...", window.as_secs());
        figures.steady.push(
            self.steady(poolkeeper, "heartbeats, all Pods Running", window)
                .await?,
        );
        println!("audit round, once the leader's next round is over ...");
        after_leader_round(poolkeeper).await?;
        if self.args.openreports_crds.is_some() {
            figures.reports = Some(self.reports(poolkeeper).await?);
        }
        figures.audit = Some(self.audit(&self.launch.dir.join("poolkeeper.yaml")).await?);
        println!("audit round with every namespace bound to the next pool ...");
        let misplaced = self.misplaced_config().await?;
        figures.audit_misplaced = Some(self.audit(&misplaced).await?);
        poolkeeper.check_running("the audit rounds")
    }

    async fn after_restart(
        &self,
        poolkeeper: &mut Poolkeeper,
        figures: &mut KwokFigures,
    ) -> Result<()> {
        let ready = wait_ready(poolkeeper).await?;
        figures.restart = Startup::from_log(&poolkeeper.log(), ready);
        figures
            .memory
            .push(("after the restart, ready", poolkeeper.memory()?));
        let churn = Duration::from_secs(self.args.churn_seconds);
        let args = self.args;
        println!(
            "churn ({}s, {} bound Pods replaced per second) ...",
            churn.as_secs(),
            args.churn_pods_per_second
        );
        let sizes = args.sizes();
        let bound = args.scheduled_pods.min(args.running_pods)..args.running_pods;
        let replace = pods::churn_bound(
            self.client,
            &sizes,
            bound,
            (args.churn_pods_per_second, args.violating_percent),
            churn,
        );
        let label = "churn (heartbeats, Pods replaced), after the restart";
        let (steady, replaced) = tokio::join!(self.steady(poolkeeper, label, churn), replace);
        figures.steady.push(steady?);
        figures.churned_pods = replaced?;
        figures
            .memory
            .push(("after the churn", poolkeeper.memory()?));
        poolkeeper.check_running("the end of the run")
    }

    /// poolkeeper over `window` while kwok heart-beats: CPU, memory, what reached it.
    async fn steady(
        &self,
        poolkeeper: &mut Poolkeeper,
        label: &'static str,
        window: Duration,
    ) -> Result<Steady> {
        let profile = self.profile(poolkeeper.pid(), label, window);
        let before = Counters::read(self, poolkeeper).await?;
        let started = Instant::now();
        let deadline = started + window;
        let mut peak_rss = 0;
        while Instant::now() < deadline {
            poolkeeper.check_running(label)?;
            peak_rss = peak_rss.max(poolkeeper.memory()?.rss_kib);
            tokio::time::sleep(Duration::from_secs(5).min(deadline - Instant::now())).await;
        }
        let wall = started.elapsed();
        let after = Counters::read(self, poolkeeper).await?;
        if let Some(mut perf) = profile {
            let _ = perf.wait().await;
        }
        Ok(Steady {
            label,
            wall,
            rss_kib: poolkeeper.memory()?.rss_kib,
            peak_rss_kib: peak_rss,
            delta: after.minus(&before),
        })
    }

    /// The RSS of the control plane's processes and kwok, where they can be read.
    fn cluster_memory(&self) -> Vec<(&'static str, Memory)> {
        let processes = [
            ("etcd", self.env.pid(Process::Etcd)),
            ("kube-apiserver", self.env.pid(Process::ApiServer)),
            ("kube-scheduler", self.env.pid(Process::Scheduler)),
            (
                "kube-controller-manager",
                self.env.pid(Process::ControllerManager),
            ),
            ("kwok", self.kwok),
        ];
        processes
            .into_iter()
            .filter_map(|(name, pid)| Some((name, process::memory_of(pid?).ok()?)))
            .collect()
    }

    /// `perf record` of poolkeeper over a steady window, where perf is installed, into
    /// `<out>/<window>.perf.data` (read with `perf report -i`): where the CPU goes.
    fn profile(&self, pid: u32, label: &str, window: Duration) -> Option<Child> {
        let name: String = label
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { '-' })
            .collect();
        Command::new("perf")
            .args(["record", "-F", "997", "-g", "-p", &pid.to_string(), "-o"])
            .arg(self.args.out.join(format!("{name}.perf.data")))
            .args(["--", "sleep", &window.as_secs().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .ok()
    }

    /// `count` Pods through one Deployment per tenant namespace, until they are Running.
    async fn create_pods(&self, poolkeeper: &mut Poolkeeper, count: usize) -> Result<Creation> {
        let args = self.args;
        let deployments = args.pools.max(1);
        println!(
            "creating {count} Pods through {deployments} Deployments, {} clients ...",
            args.parallel
        );
        let how = format!("through {deployments} Deployments");
        let creation = self
            .measure_creation(poolkeeper, how, count, async {
                let started = Instant::now();
                pods::create(self.client, deployments, count, args.parallel).await?;
                let requests = started.elapsed();
                let timeout = Duration::from_secs(args.pod_timeout_seconds);
                let readings = pods::wait_ready(self.client, count, timeout).await?;
                Ok((requests, 0, readings))
            })
            .await?;
        Ok(creation)
    }

    /// The Pods `bound`, each created bound to a Node of its pool by `--parallel` clients,
    /// until kwok has moved them to Running.
    async fn create_bound(
        &self,
        poolkeeper: &mut Poolkeeper,
        bound: std::ops::Range<usize>,
    ) -> Result<Creation> {
        let args = self.args;
        let count = bound.len();
        println!(
            "creating {count} Pods bound to a Node of their pool, {} clients ...",
            args.parallel
        );
        let how = "bound to a Node of their pool at creation".to_owned();
        let creation = self
            .measure_creation(poolkeeper, how, count, async {
                let progress = BoundProgress::new(self.client);
                let sizes = args.sizes();
                let started = Instant::now();
                let creates = pods::create_bound(
                    self.client,
                    &sizes,
                    bound,
                    (args.parallel, args.violating_percent),
                    progress.created.clone(),
                );
                let (creates, mut readings) = progress.follow(creates, started).await;
                let creates = creates?;
                let requests = started.elapsed();
                let timeout = Duration::from_secs(args.pod_timeout_seconds);
                progress
                    .until_running(count, started, timeout, &mut readings)
                    .await?;
                Ok((requests, creates.retries, readings))
            })
            .await?;
        Ok(creation)
    }

    /// Counters and admission histograms around `create`, which returns how long its creates
    /// took, how many were retried and its progress readings.
    async fn measure_creation(
        &self,
        poolkeeper: &mut Poolkeeper,
        how: String,
        pods: usize,
        create: impl Future<Output = Result<(Duration, usize, Vec<pods::Reading>)>>,
    ) -> Result<Creation> {
        let before = Counters::read(self, poolkeeper).await?;
        let hist_before = self.admission_histograms().await?;
        let own_before = histograms(&poolkeeper.metrics().await?, POOLKEEPER_METRIC, "webhook");
        let started = Instant::now();
        let (requests, retries, readings) = create.await?;
        let wall = started.elapsed();
        let after = Counters::read(self, poolkeeper).await?;
        let hist_after = self.admission_histograms().await?;
        let own_after = histograms(&poolkeeper.metrics().await?, POOLKEEPER_METRIC, "webhook");
        let mut apiserver = since(hist_after, &hist_before);
        for (name, h) in since(own_after, &own_before) {
            apiserver.insert(format!("poolkeeper's own ({name})"), h);
        }
        Ok(Creation {
            how,
            pods,
            parallel: self.args.parallel,
            requests,
            retries,
            wall,
            readings,
            apiserver,
            delta: after.minus(&before),
            rss_kib: poolkeeper.memory()?.rss_kib,
        })
    }

    /// The API server's admission histogram per webhook of poolkeeper.
    async fn admission_histograms(&self) -> Result<BTreeMap<String, Histogram>> {
        let text = apiserver_metrics(self.client).await?;
        let mut all = histograms(&text, APISERVER_METRIC, "name");
        all.retain(|name, _| self.webhooks.contains(name));
        Ok(all)
    }

    /// A configuration whose placement policy binds each tenant namespace to the next pool, so
    /// that every Pod runs outside its pool: the audit then reads every Pod (a namespace's LIST
    /// leaves out only the Nodes of its own pools). The running controller keeps its policy.
    async fn misplaced_config(&self) -> Result<std::path::PathBuf> {
        const NAME: &str = "poolkeeper-placement-misplaced";
        let policy = objects::placement_policy(&self.args.sizes(), 1);
        let config_map: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": NAME, "namespace": CONTROLLER_NAMESPACE},
                "data": {(PLACEMENT_KEY): policy},
            }))
            .map_err(|e| ScaleError::json("the misplaced policy", e))?;
        Api::namespaced(self.client.clone(), CONTROLLER_NAMESPACE)
            .create(&kube::api::PostParams::default(), &config_map)
            .await
            .map_err(|e| ScaleError::kube("creating the misplaced policy", e))?;
        let path = self.launch.dir.join("poolkeeper-misplaced.yaml");
        let config = format!(
            "{}placement: {{policyConfigMap: {{namespace: {CONTROLLER_NAMESPACE}, name: {NAME}, key: {PLACEMENT_KEY}}}}}\n",
            process::config_yaml(self.launch)
        );
        std::fs::write(&path, config)
            .map_err(|e| ScaleError::io(format!("writing {}", path.display()), e))?;
        Ok(path)
    }

    /// `poolkeeper audit --config config` as a separate process under GNU time (wall time, peak
    /// RSS), with the API server's CPU over it.
    async fn audit(&self, config: &Path) -> Result<AuditFigures> {
        let lists_before = pod_lists(self.client).await?;
        let api_before = self.env.pid(Process::ApiServer).and_then(sample::cpu_time);
        let started = Instant::now();
        let output = Command::new("/usr/bin/time")
            .arg("-v")
            .arg(&self.launch.binary)
            .arg("audit")
            .arg("--kubeconfig")
            .arg(&self.launch.kubeconfig)
            .arg("--config")
            .arg(config)
            .args(["--output", "json"])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| ScaleError::io("running poolkeeper audit", e))?;
        let wall = started.elapsed();
        let api_after = self.env.pid(Process::ApiServer).and_then(sample::cpu_time);
        let pod_lists = pod_lists(self.client).await? - lists_before;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let round: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
            ScaleError::json(format!("reading the audit's output (stderr: {stderr})"), e)
        })?;
        Ok(AuditFigures {
            wall,
            pods: round["pods"].as_u64().unwrap_or_default(),
            round: round["duration"]
                .as_str()
                .and_then(|text| humantime::parse_duration(text).ok()),
            peak_rss_kib: gnu_time_field(&stderr, "Maximum resident set size (kbytes)")
                .map_or(0, |kib| kib as u64),
            cpu: gnu_time_field(&stderr, "User time (seconds)")
                .zip(gnu_time_field(&stderr, "System time (seconds)"))
                .map(|(user, system)| Duration::from_secs_f64(user + system)),
            apiserver_cpu: api_after.zip(api_before).map(|(a, b)| a.saturating_sub(b)),
            pod_lists,
            violations: round["counts"].as_array().map_or(0, Vec::len),
        })
    }
}

/// Returns once the leader completes an audit round, so the measured round does not share the
/// API server with one of the leader's (a round is shorter than `audit.interval`).
async fn after_leader_round(poolkeeper: &Poolkeeper) -> Result<()> {
    const WAIT: Duration = Duration::from_secs(300);
    let rounds = |text: &str| sample::metric(text, "poolkeeper_audit_rounds_total", &[]);
    let before = rounds(&poolkeeper.metrics().await?);
    let started = Instant::now();
    while started.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if rounds(&poolkeeper.metrics().await?) > before {
            return Ok(());
        }
    }
    Err(ScaleError::timeout("the leader's next audit round", WAIT))
}

impl Phases<'_> {
    /// The OpenReports after the leader's round, against the Pods placed outside their pool,
    /// and poolkeeper's memory with them written.
    async fn reports(&self, poolkeeper: &Poolkeeper) -> Result<ReportFigures> {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "openreports.io",
            "v1alpha1",
            "Report",
        ));
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let reports = api
            .list(&ListParams::default())
            .await
            .map_err(|e| ScaleError::kube("listing the Reports", e))?;
        let results = reports
            .items
            .iter()
            .map(|report| report.data["results"].as_array().map_or(0, Vec::len))
            .sum();
        let args = self.args;
        let sizes = args.sizes();
        let outside = (0..args.running_pods)
            .filter(|&index| {
                index >= args.scheduled_pods.min(args.running_pods)
                    && pods::outside_node(index, &sizes, args.violating_percent).is_some()
            })
            .count();
        Ok(ReportFigures {
            reports: reports.items.len(),
            results,
            outside,
            memory: poolkeeper.memory()?,
        })
    }
}

/// The LISTs of Pods the API server answered so far (each page is one).
async fn pod_lists(client: &Client) -> Result<f64> {
    let text = apiserver_metrics(client).await?;
    Ok(sample::metric(
        &text,
        "apiserver_request_total",
        &["resource=\"pods\"", "verb=\"LIST\""],
    ))
}

/// A number of `/usr/bin/time -v`'s report.
fn gnu_time_field(report: &str, name: &str) -> Option<f64> {
    report.lines().find_map(|line| {
        line.trim()
            .strip_prefix(name)?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()
    })
}

async fn apiserver_metrics(client: &Client) -> Result<String> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| {
            ScaleError::kube("building the /metrics request", kube::Error::HttpError(e))
        })?;
    client
        .request_text(request)
        .await
        .map_err(|e| ScaleError::kube("reading the apiserver's /metrics", e))
}

/// Counters read at the start and the end of a phase.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// CPU of poolkeeper, of the API server and of kwok's whole control plane.
    pub poolkeeper_cpu: Duration,
    pub apiserver_cpu: Duration,
    /// Node writes the API server answered (every one is a watch event for poolkeeper).
    pub node_writes: f64,
    pub lease_writes: f64,
    pub pod_writes: f64,
    /// What poolkeeper's index changed and published, Nodes and all kinds.
    pub node_changes: f64,
    pub all_changes: f64,
    pub admissions: f64,
    pub watch_failures: f64,
    pub lagged: f64,
    /// Audit rounds poolkeeper completed (the leader audits every `audit.interval`).
    pub audit_rounds: f64,
}

impl Counters {
    async fn read(phases: &Phases<'_>, poolkeeper: &Poolkeeper) -> Result<Self> {
        let api = apiserver_metrics(phases.client).await?;
        let own = poolkeeper.metrics().await?;
        let writes = |resource: &str| {
            ["PATCH", "PUT", "POST", "APPLY"]
                .iter()
                .map(|verb| {
                    sample::metric(
                        &api,
                        "apiserver_request_total",
                        &[
                            &format!("resource=\"{resource}\""),
                            &format!("verb=\"{verb}\""),
                        ],
                    )
                })
                .sum::<f64>()
        };
        Ok(Self {
            poolkeeper_cpu: sample::cpu_time(poolkeeper.pid()).unwrap_or_default(),
            apiserver_cpu: phases
                .env
                .pid(Process::ApiServer)
                .and_then(sample::cpu_time)
                .unwrap_or_default(),
            node_writes: writes("nodes"),
            lease_writes: writes("leases"),
            pod_writes: writes("pods"),
            node_changes: sample::metric(
                &own,
                "poolkeeper_watch_changes_total",
                &["kind=\"Node\""],
            ),
            all_changes: sample::metric(&own, "poolkeeper_watch_changes_total", &[]),
            admissions: sample::metric(&own, "poolkeeper_webhook_admissions_total", &[]),
            watch_failures: sample::metric(&own, "poolkeeper_watch_failures_total", &[]),
            lagged: sample::metric(&own, "poolkeeper_bus_events_lagged_total", &[]),
            audit_rounds: sample::metric(&own, "poolkeeper_audit_rounds_total", &[]),
        })
    }

    fn minus(&self, before: &Self) -> Self {
        Self {
            poolkeeper_cpu: self.poolkeeper_cpu.saturating_sub(before.poolkeeper_cpu),
            apiserver_cpu: self.apiserver_cpu.saturating_sub(before.apiserver_cpu),
            node_writes: self.node_writes - before.node_writes,
            lease_writes: self.lease_writes - before.lease_writes,
            pod_writes: self.pod_writes - before.pod_writes,
            node_changes: self.node_changes - before.node_changes,
            all_changes: self.all_changes - before.all_changes,
            admissions: self.admissions - before.admissions,
            watch_failures: self.watch_failures - before.watch_failures,
            lagged: self.lagged - before.lagged,
            audit_rounds: self.audit_rounds - before.audit_rounds,
        }
    }
}

/// Progress of the bound Pods: creates counted as they return, Running as those created less
/// those a LIST selects as not Running (the API server filters them out of its watch cache;
/// the LIST returns only the few not Running yet).
struct BoundProgress<'a> {
    client: &'a Client,
    created: Arc<AtomicUsize>,
}

impl<'a> BoundProgress<'a> {
    fn new(client: &'a Client) -> Self {
        Self {
            client,
            created: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A Pod created while the LIST runs counts as not Running: the reading errs low.
    async fn reading(&self, started: Instant) -> Result<pods::Reading> {
        let created = self.created.load(Ordering::Relaxed);
        let not_running = pods::bound_not_running(self.client).await?;
        Ok(pods::Reading {
            at: started.elapsed(),
            progress: pods::Progress {
                created: created as i64,
                ready: created.saturating_sub(not_running) as i64,
            },
        })
    }

    /// Readings every few seconds while `creates` runs; its result and the readings.
    async fn follow<T>(
        &self,
        creates: impl Future<Output = T>,
        started: Instant,
    ) -> (T, Vec<pods::Reading>) {
        let mut readings = Vec::new();
        let mut creates = std::pin::pin!(creates);
        let mut last_print = Instant::now();
        loop {
            tokio::select! {
                result = &mut creates => return (result, readings),
                () = tokio::time::sleep(pods::POLL) => {}
            }
            if let Ok(reading) = self.reading(started).await {
                if last_print.elapsed() >= Duration::from_secs(30) {
                    pods::print(&reading);
                    last_print = Instant::now();
                }
                readings.push(reading);
            }
        }
    }

    /// Readings until `count` are Running, or `timeout` after `started`.
    async fn until_running(
        &self,
        count: usize,
        started: Instant,
        timeout: Duration,
        readings: &mut Vec<pods::Reading>,
    ) -> Result<()> {
        loop {
            let reading = self.reading(started).await?;
            readings.push(reading);
            if reading.progress.ready >= count as i64 {
                return Ok(());
            }
            if started.elapsed() > timeout {
                println!(
                    "  not all Running within {timeout:?}: {:?}",
                    reading.progress
                );
                return Ok(());
            }
            tokio::time::sleep(pods::POLL).await;
        }
    }
}

/// Waits until poolkeeper reports ready and says after how long.
async fn wait_ready(poolkeeper: &mut Poolkeeper) -> Result<Duration> {
    let ready = poolkeeper.wait_ready(READY_TIMEOUT).await?;
    println!("  ready after {:.2}s", ready.as_secs_f64());
    Ok(ready)
}
