//! `poolkeeper-scale`: loads a local control plane (etcd + kube-apiserver of
//! `poolkeeper-testenv`) with a production-sized cluster, runs the poolkeeper binary against
//! it and reports startup, memory, change → finalizer and admission figures.
//! `cargo xtask bench-scale` builds and runs it.

mod admission;
mod changes;
mod engines;
mod error;
mod kwok;
mod lists;
mod load;
mod objects;
mod process;
mod report;
mod startup;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use kube::Client;
use poolkeeper_testenv::{TestEnv, WebhookCert, WebhookRegistration};

use crate::changes::ClassWatch;
use crate::error::{Result, ScaleError};
use crate::objects::Sizes;
use crate::process::{Launch, Memory, Poolkeeper, free_addr, load_average};
use crate::report::Figures;
use crate::startup::Startup;

const NAMESPACE: &str = "machine-system";
const CONTROLLER_NAMESPACE: &str = "poolkeeper-system";
const PLACEMENT_CONFIG_MAP: &str = "poolkeeper-placement";
const PLACEMENT_KEY: &str = "placement.yaml";
const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
/// Pool 0 is an edge site: its tenant's Pods get the affinity and the edge toleration.
const POD_POOL: usize = 0;
const READY_TIMEOUT: Duration = Duration::from_secs(300);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The executor's counters unchanged for this long: the initial reconciliation is over.
const QUIET: Duration = Duration::from_secs(3);

#[derive(Parser, Debug, Clone)]
#[command(
    name = "poolkeeper-scale",
    about = "Scale benchmark of poolkeeper against a real kube-apiserver"
)]
struct Args {
    /// The poolkeeper binary (a release build).
    #[arg(long, value_name = "FILE")]
    poolkeeper: PathBuf,
    /// CRD manifests (deploy/crds).
    #[arg(long, value_name = "DIR")]
    crds: PathBuf,
    /// Webhook configurations (deploy/webhooks), pointed at the local poolkeeper.
    #[arg(long, value_name = "DIR")]
    webhooks: PathBuf,
    /// Directory for the configuration, poolkeeper's log and the report.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    #[arg(long, default_value_t = 5_000)]
    nodes: usize,
    #[arg(long, default_value_t = 500)]
    pools: usize,
    #[arg(long, default_value_t = 2_000)]
    classes: usize,
    /// Classes no Machine references at first (single changes use them).
    #[arg(long, default_value_t = 200)]
    unused_classes: usize,
    #[arg(long, default_value_t = 20_000)]
    machines: usize,
    /// Requests in flight while loading.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// poolkeeper's watchers.pageSize, also the plain LIST's page size.
    #[arg(long, default_value_t = 500)]
    page_size: u32,
    /// poolkeeper's audit.concurrency (the configuration's default without it).
    #[arg(long)]
    audit_concurrency: Option<usize>,
    /// poolkeeper's reconciler.debounceInterval, in milliseconds.
    #[arg(long, default_value_t = 500)]
    debounce_ms: u64,
    /// Single changes measured (at most --unused-classes).
    #[arg(long, default_value_t = 100)]
    changes: usize,
    /// Pause after each single change, in milliseconds.
    #[arg(long, default_value_t = 200)]
    change_gap_ms: u64,
    #[arg(long, default_value_t = 1_000)]
    pods: usize,
    /// Pod creates in flight.
    #[arg(long, default_value_t = 4)]
    pod_concurrency: usize,
    /// Measure the two placement engines instead (`cargo xtask bench-engines`): `--pods`
    /// plain Pod creates, `--pod-concurrency` in flight, and `--changes` binding changes under
    /// `placement.engine: webhook`, then `cel`.
    #[arg(long)]
    engines: bool,
    /// `--engines`: how many times the pair (webhook, then cel) runs, each engine with a
    /// poolkeeper process of its own.
    #[arg(long, default_value_t = 1)]
    engine_rounds: usize,
    /// The command line to name in the report.
    #[arg(long, default_value = "cargo xtask bench-scale")]
    command: String,
    /// Run the living cluster instead (`cargo xtask bench-kwok`): kwok keeps the Nodes
    /// heart-beating and moves the Pods of Deployments to Running.
    #[arg(long, value_name = "FILE")]
    kwok: Option<PathBuf>,
    /// kwok: the mean interval of a Node's status heartbeat, in seconds.
    #[arg(long, default_value_t = 60)]
    heartbeat_seconds: u64,
    /// kwok: Pods created through the webhooks and moved to Running, in all.
    #[arg(long, default_value_t = 150_000)]
    running_pods: usize,
    /// kwok: how many of them come from Deployments (kube-controller-manager creates them,
    /// kube-scheduler binds them); the rest are created bound to a Node of their pool by
    /// `--parallel` clients, at the highest rate the API server takes.
    #[arg(long, default_value_t = 10_000)]
    scheduled_pods: usize,
    /// kwok: Deployment and Pod creates in flight.
    #[arg(long, default_value_t = 16)]
    parallel: usize,
    /// kwok: how long each steady-state window lasts, in seconds.
    #[arg(long, default_value_t = 120)]
    steady_seconds: u64,
    /// kwok: bound Pods replaced per second during the churn window (the oldest deleted, a
    /// new one created through the webhooks): Pods that finish and start.
    #[arg(long, default_value_t = 10)]
    churn_pods_per_second: u32,
    /// kwok: the churn window after the restart, in seconds.
    #[arg(long, default_value_t = 600)]
    churn_seconds: u64,
    /// kwok: how long the Pods may take to be Running, in seconds.
    #[arg(long, default_value_t = 3_600)]
    pod_timeout_seconds: u64,
    /// kwok: the request rate of kube-scheduler and kube-controller-manager.
    #[arg(long, default_value_t = 1_000)]
    client_qps: u32,
    /// kwok: percent of each namespace's bound Pods placed outside their pool by hand (bound
    /// past the scheduler and the webhooks), for the audit to find.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    violating_percent: u8,
    /// kwok: turn on `audit.reports` with the OpenReports CRDs from this directory
    /// (`cargo xtask bench-kwok --reports` fetches them).
    #[arg(long, value_name = "DIR")]
    openreports_crds: Option<PathBuf>,
}

impl Args {
    fn sizes(&self) -> Sizes {
        Sizes {
            nodes: self.nodes,
            pools: self.pools.max(1),
            classes: self.classes,
            unused_classes: self.unused_classes.min(self.classes.saturating_sub(1)),
            machines: self.machines,
        }
    }
}

// Two workers for the benchmark's own work; the main thread forks poolkeeper (see
// `Poolkeeper::start`).
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.engines {
        return report(&args, engines::run(&args).await);
    }
    if let Some(kwok) = args.kwok.clone() {
        return report(&args, kwok::run(&args, &kwok).await.map(|f| f.render()));
    }
    report(&args, run(&args).await.map(|f| f.render()))
}

/// Prints the report and writes it to `report.md`.
fn report(args: &Args, rendered: Result<String>) -> ExitCode {
    match rendered {
        Ok(text) => {
            println!("\n{text}");
            let path = args.out.join("report.md");
            match std::fs::write(&path, &text) {
                Ok(()) => println!("report written to {}", path.display()),
                Err(e) => eprintln!("poolkeeper-scale: writing {}: {e}", path.display()),
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("poolkeeper-scale: error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<Figures> {
    let started = Instant::now();
    process::prepare_dir(&args.out)?;
    let mut figures = new_figures(args);
    record_load_average(&mut figures, "start");
    println!("starting etcd and kube-apiserver ...");
    let env = TestEnv::builder()
        .crd_files([&args.crds])
        .startup_timeout(Duration::from_secs(120))
        .start()
        .await?;
    figures.control_plane_start = env.startup_duration();
    for namespace in [
        NAMESPACE.to_owned(),
        CONTROLLER_NAMESPACE.to_owned(),
        objects::tenant_namespace(POD_POOL),
    ] {
        env.create_namespace(&namespace).await?;
    }
    let client = env.client();
    load_cluster(args, &client, &mut figures).await?;
    record_load_average(&mut figures, "before poolkeeper");
    let classes = ClassWatch::start(client.clone(), NAMESPACE, FINALIZER);
    classes.wait_listed(Duration::from_secs(60)).await?;

    let certs = tempfile::tempdir().map_err(|e| ScaleError::io("creating a directory", e))?;
    let launch = launch(args, &env, certs.path().to_owned())?;
    let webhooks = register_webhooks(&env, args, &launch, certs.path()).await?;
    println!("starting poolkeeper ...");
    let mut poolkeeper = Poolkeeper::start(&launch)?;
    println!("  pid {}", poolkeeper.pid());
    let result = measure(
        args,
        &client,
        &mut poolkeeper,
        &classes,
        &webhooks,
        &mut figures,
    )
    .await;
    record_load_average(&mut figures, "end");
    let stopped = poolkeeper.stop().await;
    result?;
    let (status, took) = stopped?;
    println!(
        "poolkeeper stopped ({status}) {:.1}s after SIGTERM",
        took.as_secs_f64()
    );
    figures.total = started.elapsed();
    Ok(figures)
}

async fn load_cluster(args: &Args, client: &Client, figures: &mut Figures) -> Result<()> {
    let sizes = args.sizes();
    println!(
        "loading {} objects, {} in flight ...",
        sizes.nodes + sizes.pools + sizes.classes + sizes.machines + 1,
        args.concurrency
    );
    let target = load::Target {
        client: client.clone(),
        namespace: NAMESPACE.to_owned(),
        placement_namespace: CONTROLLER_NAMESPACE.to_owned(),
        placement_name: PLACEMENT_CONFIG_MAP.to_owned(),
        placement_key: PLACEMENT_KEY.to_owned(),
        concurrency: args.concurrency,
    };
    figures.load = load::load(&target, &sizes).await?;
    println!("plain paginated LISTs ...");
    let scope = lists::ListScope {
        client: client.clone(),
        namespace: NAMESPACE.to_owned(),
        placement_namespace: CONTROLLER_NAMESPACE.to_owned(),
        page_size: args.page_size,
    };
    figures.lists = lists::measure(&scope).await?;
    Ok(())
}

fn launch(args: &Args, env: &TestEnv, cert_dir: PathBuf) -> Result<Launch> {
    Ok(Launch {
        binary: args.poolkeeper.clone(),
        kubeconfig: env.kubeconfig_path().to_owned(),
        namespace: NAMESPACE.to_owned(),
        lease_namespace: CONTROLLER_NAMESPACE.to_owned(),
        page_size: args.page_size,
        debounce: Duration::from_millis(args.debounce_ms),
        audit_concurrency: args.audit_concurrency,
        engine: None,
        audit_reports: args.openreports_crds.is_some(),
        cert_dir,
        admin: free_addr()?,
        webhook: free_addr()?,
        dir: args.out.clone(),
    })
}

/// A serving certificate in poolkeeper's certDir, and `deploy/webhooks` registered against
/// its port, before it starts (as a Deployment's would be). Returns the webhook names.
async fn register_webhooks(
    env: &TestEnv,
    args: &Args,
    launch: &Launch,
    cert_dir: &std::path::Path,
) -> Result<Vec<String>> {
    let cert = WebhookCert::generate()?;
    cert.write_to_dir(cert_dir)?;
    let registration = WebhookRegistration::new(launch.webhook.port(), cert.ca_pem.clone())
        .with_files([&args.webhooks])?;
    let mut names: Vec<String> = registration
        .mutating
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten().map(|w| w.name.clone()))
        .collect();
    names.extend(
        registration
            .validating
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten().map(|w| w.name.clone())),
    );
    env.register_webhooks(registration).await?;
    Ok(names)
}

async fn measure(
    args: &Args,
    client: &Client,
    poolkeeper: &mut Poolkeeper,
    classes: &ClassWatch,
    webhooks: &[String],
    figures: &mut Figures,
) -> Result<()> {
    let ready = poolkeeper.wait_ready(READY_TIMEOUT).await?;
    figures
        .memory
        .push(("at /readyz 200", poolkeeper.memory()?));
    println!("  ready after {:.2}s", ready.as_secs_f64());
    settle(args, poolkeeper, classes, figures).await?;
    figures.startup = Startup::from_log(&poolkeeper.log(), ready);
    println!("single changes ...");
    let sizes = args.sizes();
    let gap = Duration::from_millis(args.change_gap_ms);
    figures.changes =
        changes::measure(client, NAMESPACE, &sizes, args.changes, gap, classes).await?;
    figures
        .memory
        .push(("after the changes", poolkeeper.memory()?));
    println!("Pod creates ...");
    let namespace = objects::tenant_namespace(POD_POOL);
    let run = admission::PodRun {
        client,
        namespace: &namespace,
        pods: args.pods,
        concurrency: args.pod_concurrency,
        webhooks,
    };
    figures.admission = Some(admission::measure(&run, poolkeeper).await?);
    figures
        .memory
        .push(("after the Pod creates", poolkeeper.memory()?));
    poolkeeper.check_running("the end of the run")
}

/// The initial reconciliation: every used class gets the finalizer, then the executor goes
/// quiet; the steady-state memory is read after that.
async fn settle(
    args: &Args,
    poolkeeper: &mut Poolkeeper,
    classes: &ClassWatch,
    figures: &mut Figures,
) -> Result<()> {
    let ready_at = Instant::now();
    classes
        .wait_protected_count(args.sizes().used_classes(), SETTLE_TIMEOUT)
        .await?;
    figures.protected_after = ready_at.elapsed();
    println!(
        "  every used class protected {:.2}s after ready",
        figures.protected_after.as_secs_f64()
    );
    let mut last = executor_activity(poolkeeper).await?;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < QUIET {
        poolkeeper.check_running("the initial reconciliation settled")?;
        if ready_at.elapsed() > SETTLE_TIMEOUT {
            return Err(ScaleError::timeout(
                "the executor going quiet",
                SETTLE_TIMEOUT,
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = executor_activity(poolkeeper).await?;
        if now != last {
            (last, quiet_since) = (now, Instant::now());
        }
    }
    figures.settled_after = quiet_since.duration_since(ready_at);
    let metrics = poolkeeper.metrics().await?;
    figures.finalizer_writes = metric_sum(
        &metrics,
        "poolkeeper_executor_api_writes_total{result=\"ok\"",
    );
    figures.memory.push(("settled", poolkeeper.memory()?));
    Ok(())
}

/// Passes and reconciliations so far.
async fn executor_activity(poolkeeper: &Poolkeeper) -> Result<u64> {
    let metrics = poolkeeper.metrics().await?;
    Ok(metric_sum(&metrics, "poolkeeper_executor_passes_total")
        + metric_sum(&metrics, "poolkeeper_executor_reconciliations_total"))
}

/// The sum of the samples whose line starts with `prefix`.
fn metric_sum(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

fn new_figures(args: &Args) -> Figures {
    Figures {
        started_at: k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%d %H:%M UTC")
            .to_string(),
        machine: machine(),
        command: args.command.clone(),
        sizes: args.sizes(),
        concurrency: args.concurrency,
        page_size: args.page_size,
        debounce: Duration::from_millis(args.debounce_ms),
        load_averages: Vec::new(),
        control_plane_start: Duration::ZERO,
        load: Vec::new(),
        lists: Vec::new(),
        startup: Startup::default(),
        protected_after: Duration::ZERO,
        settled_after: Duration::ZERO,
        finalizer_writes: 0,
        memory: Vec::<(&'static str, Memory)>::new(),
        changes: Vec::new(),
        admission: None,
        total: Duration::ZERO,
    }
}

fn record_load_average(figures: &mut Figures, when: &'static str) {
    if let Some(average) = load_average() {
        figures.load_averages.push((when, average));
    }
}

/// `2 × AMD EPYC 7B13, 24 GiB` from /proc.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            })
        })
        .map_or_else(String::new, |kib| format!(", {:.0} GiB", kib / 1_048_576.0));
    format!("{cpus} × {model}{memory}")
}
