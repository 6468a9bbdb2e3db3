//! The phases of the kwok run, in order.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::{Api, Client};
use poolkeeper_testenv::{Process, TestEnv};
use tokio::process::{Child, Command};

use super::report::{AuditFigures, Creation, KwokFigures, Steady};
use super::{pods, sample, stages};
use crate::admission::{APISERVER_METRIC, POOLKEEPER_METRIC, since};
use crate::changes::ClassWatch;
use crate::error::{Result, ScaleError};
use crate::objects;
use crate::process::{self, Launch, Poolkeeper};
use crate::startup::Startup;
use crate::stats::{Histogram, histograms};
use crate::{
    Args, CONTROLLER_NAMESPACE, FINALIZER, NAMESPACE, READY_TIMEOUT, launch, load_cluster,
    new_figures, record_load_average, register_webhooks, settle,
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
        .crd_files([&args.crds])
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
        figures.creation = Some(self.create_pods(poolkeeper).await?);
        record_load_average(&mut figures.base, "all Pods Running");
        println!("steady state with the Pods ({}s) ...", window.as_secs());
        figures.steady.push(
            self.steady(poolkeeper, "heartbeats, all Pods Running", window)
                .await?,
        );
        println!("audit round ...");
        figures.audit = Some(self.audit().await?);
        poolkeeper.check_running("the audit round")
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
        println!("churn ({}s) ...", churn.as_secs());
        figures.steady.push(
            self.steady(poolkeeper, "churn (heartbeats), after the restart", churn)
                .await?,
        );
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

    async fn create_pods(&self, poolkeeper: &mut Poolkeeper) -> Result<Creation> {
        let args = self.args;
        let before = Counters::read(self, poolkeeper).await?;
        let hist_before = self.admission_histograms().await?;
        let own_before = histograms(&poolkeeper.metrics().await?, POOLKEEPER_METRIC, "webhook");
        println!(
            "creating {} Pods through {} Deployments, {} clients ...",
            args.running_pods, args.pools, args.parallel
        );
        let started = Instant::now();
        pods::create(
            self.client,
            args.pools.max(1),
            args.running_pods,
            args.parallel,
        )
        .await?;
        let requests = started.elapsed();
        let timeout = Duration::from_secs(args.pod_timeout_seconds);
        let readings = pods::wait_ready(self.client, args.running_pods, timeout).await?;
        let wall = started.elapsed();
        let after = Counters::read(self, poolkeeper).await?;
        let hist_after = self.admission_histograms().await?;
        let own_after = histograms(&poolkeeper.metrics().await?, POOLKEEPER_METRIC, "webhook");
        let mut apiserver = since(hist_after, &hist_before);
        for (name, h) in since(own_after, &own_before) {
            apiserver.insert(format!("poolkeeper's own ({name})"), h);
        }
        Ok(Creation {
            pods: args.running_pods,
            deployments: args.pools.max(1),
            parallel: args.parallel,
            requests,
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

    /// `poolkeeper audit` as a separate process under GNU time (wall time, peak RSS), with the
    /// API server's CPU over it.
    async fn audit(&self) -> Result<AuditFigures> {
        let api_before = self.env.pid(Process::ApiServer).and_then(sample::cpu_time);
        let started = Instant::now();
        let output = Command::new("/usr/bin/time")
            .arg("-v")
            .arg(&self.launch.binary)
            .arg("audit")
            .arg("--kubeconfig")
            .arg(&self.launch.kubeconfig)
            .arg("--config")
            .arg(self.launch.dir.join("poolkeeper.yaml"))
            .args(["--output", "json"])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| ScaleError::io("running poolkeeper audit", e))?;
        let wall = started.elapsed();
        let api_after = self.env.pid(Process::ApiServer).and_then(sample::cpu_time);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let round: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
            ScaleError::json(format!("reading the audit's output (stderr: {stderr})"), e)
        })?;
        Ok(AuditFigures {
            wall,
            pods: round["pods"].as_u64().unwrap_or_default(),
            round_duration: round["duration"].as_str().unwrap_or_default().to_owned(),
            peak_rss_kib: gnu_time_field(&stderr, "Maximum resident set size (kbytes)")
                .unwrap_or_default(),
            apiserver_cpu: api_after.zip(api_before).map(|(a, b)| a.saturating_sub(b)),
            violations: round["counts"].as_array().map_or(0, Vec::len),
        })
    }
}

/// A field of `/usr/bin/time -v`'s report.
fn gnu_time_field(report: &str, name: &str) -> Option<u64> {
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
        }
    }
}

/// Waits until poolkeeper reports ready and says after how long.
async fn wait_ready(poolkeeper: &mut Poolkeeper) -> Result<Duration> {
    let ready = poolkeeper.wait_ready(READY_TIMEOUT).await?;
    println!("  ready after {:.2}s", ready.as_secs_f64());
    Ok(ready)
}
