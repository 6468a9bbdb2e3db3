//! `cargo xtask bench-engines`: the two placement engines (`placement.engine: webhook`, then
//! `cel`) measured in one run against one control plane (etcd and kube-apiserver, no
//! scheduler). For each engine the poolkeeper binary starts with it; once its placement is in
//! effect, plain Pods (no node constraints of their own) are created in a bound namespace,
//! `--pod-concurrency` in flight, and the run reads creates/s, each create's round trip, the
//! CPU time kube-apiserver and poolkeeper spent (utime + stime from `/proc/<pid>/stat`, before
//! and after), and the calls the apiserver made to poolkeeper's webhooks
//! (`apiserver_admission_webhook_request_total`, before and after). Then the binding of the
//! namespace moves between two pools `--changes` times: the time from each ConfigMap write to
//! the first dry-run create placed by the new binding. `--engine-rounds` repeats the pair.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use poolkeeper_testenv::{Process, TestEnv};
use serde_json::json;

use crate::admission::{apiserver_metrics, create_pod, delete_pods, since};
use crate::error::{Result, ScaleError};
use crate::kwok::sample::{cpu_time, metric};
use crate::objects::{self, Sizes};
use crate::process::{Poolkeeper, load_average};
use crate::stats::{Histogram, histograms, percentile};
use crate::{
    Args, CONTROLLER_NAMESPACE, NAMESPACE, PLACEMENT_CONFIG_MAP, PLACEMENT_KEY, POD_POOL,
    READY_TIMEOUT, launch, register_webhooks,
};

pub const ENGINES: [&str; 2] = ["webhook", "cel"];
const WEBHOOK_CALLS: &str = "apiserver_admission_webhook_request_total";
/// The apiserver's time in each admission plugin, by plugin name.
const PLUGIN_TIME: &str = "apiserver_admission_controller_admission_duration_seconds";
/// The plugins the two engines differ in, in the order of the report's columns.
const PLUGINS: [&str; 4] = [
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
];
/// How long an engine may take from /readyz to placing Pods the way it should.
const IN_EFFECT_TIMEOUT: Duration = Duration::from_secs(90);
/// Consecutive dry-run creates, placed and (for `cel`) without a webhook call, that show an
/// engine in effect: the apiserver loads configurations and policies asynchronously.
const IN_EFFECT_STREAK: usize = 10;
const STALENESS_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between a binding change taking effect and the next change.
const CHANGE_GAP: Duration = Duration::from_millis(200);

/// One engine's figures.
#[derive(Clone, Debug)]
pub struct EngineFigures {
    pub engine: &'static str,
    /// 1 for the first webhook–cel pair, 2 for the next, ...
    pub round: usize,
    pub creates: usize,
    pub duration: Duration,
    pub round_trips: Vec<Duration>,
    pub apiserver_cpu: Duration,
    pub etcd_cpu: Duration,
    pub poolkeeper_cpu: Duration,
    pub webhook_calls: f64,
    /// The apiserver's time in each admission plugin over the creates.
    pub plugins: BTreeMap<String, Histogram>,
    /// Binding change → the next Pod placed by it, one per change.
    pub staleness: Vec<Duration>,
}

pub async fn run(args: &Args) -> Result<String> {
    crate::process::prepare_dir(&args.out)?;
    let started_at = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string();
    let load_before = load_average();
    println!("starting etcd and kube-apiserver ...");
    let env = TestEnv::builder()
        .crd_files([&args.crds])
        .startup_timeout(Duration::from_secs(120))
        .start()
        .await?;
    let pid = |process, name: &str| {
        env.pid(process)
            .ok_or_else(|| ScaleError::Unexpected(format!("{name} has no pid")))
    };
    let (apiserver, etcd) = (
        pid(Process::ApiServer, "kube-apiserver")?,
        pid(Process::Etcd, "etcd")?,
    );
    let namespace = objects::tenant_namespace(POD_POOL);
    for name in [NAMESPACE, CONTROLLER_NAMESPACE, &namespace] {
        env.create_namespace(name).await?;
    }
    let client = env.client();
    let sizes = args.sizes();
    let target = crate::load::Target {
        client: client.clone(),
        namespace: NAMESPACE.to_owned(),
        placement_namespace: CONTROLLER_NAMESPACE.to_owned(),
        placement_name: PLACEMENT_CONFIG_MAP.to_owned(),
        placement_key: PLACEMENT_KEY.to_owned(),
        concurrency: args.concurrency,
    };
    crate::load::load(&target, &sizes).await?;
    let certs = tempfile::tempdir().map_err(|e| ScaleError::io("creating a directory", e))?;
    let mut launch = launch(args, &env, certs.path().to_owned())?;
    let webhooks = register_webhooks(&env, args, &launch, certs.path()).await?;
    let mut all = Vec::new();
    let rounds = (1..=args.engine_rounds.max(1)).flat_map(|round| ENGINES.map(|e| (round, e)));
    for (round, engine) in rounds {
        launch.engine = Some(engine.to_owned());
        println!("starting poolkeeper with placement.engine {engine} ...");
        let mut poolkeeper = Poolkeeper::start(&launch)?;
        let bench = Bench {
            args,
            client: &client,
            namespace: &namespace,
            sizes: &sizes,
            webhooks: &webhooks,
            apiserver,
            etcd,
            engine,
            round,
        };
        let measured = bench.measure(&mut poolkeeper).await;
        let stopped = poolkeeper.stop().await;
        all.push(measured?);
        stopped?;
    }
    let load_after = load_average();
    Ok(render(args, &started_at, [load_before, load_after], &all))
}

struct Bench<'a> {
    args: &'a Args,
    client: &'a Client,
    namespace: &'a str,
    sizes: &'a Sizes,
    webhooks: &'a [String],
    apiserver: u32,
    etcd: u32,
    engine: &'static str,
    round: usize,
}

impl Bench<'_> {
    async fn measure(&self, poolkeeper: &mut Poolkeeper) -> Result<EngineFigures> {
        poolkeeper.wait_ready(READY_TIMEOUT).await?;
        self.wait_in_effect(poolkeeper).await?;
        println!(
            "  {} Pod creates, {} in flight ...",
            self.args.pods, self.args.pod_concurrency
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), self.namespace);
        let calls_before = self.webhook_calls().await?;
        let plugins_before =
            histograms(&apiserver_metrics(self.client).await?, PLUGIN_TIME, "name");
        let before = self.cpu_times(poolkeeper)?;
        let started = Instant::now();
        let round_trips: Vec<Duration> = futures::stream::iter(0..self.args.pods)
            .map(|index| create_pod(&api, index))
            .buffer_unordered(self.args.pod_concurrency.max(1))
            .try_collect()
            .await?;
        let duration = started.elapsed();
        let after = self.cpu_times(poolkeeper)?;
        let webhook_calls = self.webhook_calls().await? - calls_before;
        let plugins = since(
            histograms(&apiserver_metrics(self.client).await?, PLUGIN_TIME, "name"),
            &plugins_before,
        );
        delete_pods(&api).await?;
        println!(
            "  {:.0} creates/s, {webhook_calls} webhook calls; binding changes ...",
            self.args.pods as f64 / duration.as_secs_f64()
        );
        let staleness = self.staleness(poolkeeper).await?;
        poolkeeper.check_running("the end of the engine's run")?;
        Ok(EngineFigures {
            engine: self.engine,
            round: self.round,
            creates: self.args.pods,
            duration,
            round_trips,
            apiserver_cpu: after[0].saturating_sub(before[0]),
            etcd_cpu: after[1].saturating_sub(before[1]),
            poolkeeper_cpu: after[2].saturating_sub(before[2]),
            webhook_calls,
            plugins,
            staleness,
        })
    }

    /// CPU time so far of kube-apiserver, etcd and poolkeeper.
    fn cpu_times(&self, poolkeeper: &Poolkeeper) -> Result<[Duration; 3]> {
        let read = |pid: u32| {
            cpu_time(pid)
                .ok_or_else(|| ScaleError::Unexpected(format!("no CPU time in /proc/{pid}/stat")))
        };
        Ok([
            read(self.apiserver)?,
            read(self.etcd)?,
            read(poolkeeper.pid())?,
        ])
    }

    /// Calls the apiserver made to poolkeeper's webhooks so far.
    async fn webhook_calls(&self) -> Result<f64> {
        let text = apiserver_metrics(self.client).await?;
        Ok(self
            .webhooks
            .iter()
            .map(|name| metric(&text, WEBHOOK_CALLS, &[&format!("name=\"{name}\"")]))
            .sum())
    }

    /// Dry-run creates until [`IN_EFFECT_STREAK`] in a row are placed in the bound pool
    /// and, under `cel`, none of them called a webhook.
    async fn wait_in_effect(&self, poolkeeper: &mut Poolkeeper) -> Result<()> {
        let deadline = Instant::now() + IN_EFFECT_TIMEOUT;
        let pool = objects::pool_name(POD_POOL);
        let mut streak = 0;
        while streak < IN_EFFECT_STREAK {
            poolkeeper.check_running("the engine in effect")?;
            if Instant::now() > deadline {
                return Err(ScaleError::timeout(
                    format!("placement by the {} engine", self.engine),
                    IN_EFFECT_TIMEOUT,
                ));
            }
            let calls = self.webhook_calls().await?;
            let placed = self.dry_run_pool().await == Some(pool.clone());
            let quiet = self.engine != "cel" || self.webhook_calls().await? == calls;
            streak = if placed && quiet { streak + 1 } else { 0 };
            if streak == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The pool a dry-run create of a plain Pod is placed in, if any.
    async fn dry_run_pool(&self) -> Option<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), self.namespace);
        let pod: Pod = serde_json::from_value(objects::pod(99_999)).ok()?;
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let created = api.create(&params, &pod).await.ok()?;
        placed_pool(&created)
    }

    /// Moves the namespace's binding to the next pool and back, `--changes` times; each
    /// time, the time until a dry-run create is placed in the new pool.
    async fn staleness(&self, poolkeeper: &mut Poolkeeper) -> Result<Vec<Duration>> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), CONTROLLER_NAMESPACE);
        let mut samples = Vec::with_capacity(self.args.changes);
        // An even count leaves the binding where it started, for the next engine.
        let changes = self.args.changes.next_multiple_of(2);
        for change in 1..=changes {
            poolkeeper.check_running("a binding change")?;
            let shift = change % 2;
            let expected = objects::pool_name((POD_POOL + shift) % self.sizes.pools);
            let data =
                json!({"data": {PLACEMENT_KEY: objects::placement_policy(self.sizes, shift)}});
            api.patch(
                PLACEMENT_CONFIG_MAP,
                &PatchParams::default(),
                &Patch::Merge(&data),
            )
            .await
            .map_err(|e| ScaleError::kube("changing the placement binding", e))?;
            let written = Instant::now();
            while self.dry_run_pool().await != Some(expected.clone()) {
                if written.elapsed() > STALENESS_TIMEOUT {
                    return Err(ScaleError::timeout(
                        format!("a Pod placed in {expected} after the binding change"),
                        STALENESS_TIMEOUT,
                    ));
                }
            }
            samples.push(written.elapsed());
            tokio::time::sleep(CHANGE_GAP).await;
        }
        Ok(samples)
    }
}

/// The pool named by the required node affinity's pool-label term.
fn placed_pool(pod: &Pod) -> Option<String> {
    let terms = pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    terms
        .node_selector_terms
        .iter()
        .flat_map(|term| term.match_expressions.iter().flatten())
        .find(|expression| expression.key == objects::POOL_LABEL)
        .and_then(|expression| expression.values.as_ref()?.first().cloned())
}

fn render(
    args: &Args,
    started_at: &str,
    load: [Option<[f64; 3]>; 2],
    all: &[EngineFigures],
) -> String {
    let mut out = format!(
        "# Placement engines\n\n`{}`, {started_at}, {}; load average {} at the start, {} at \
         the end. {} nodes in {} pools; {} round(s) of webhook then cel; per engine and round \
         {} plain Pod creates, {} in flight, and {} binding changes. CPU from \
         /proc/<pid>/stat in 10 ms ticks.\n\n",
        args.command,
        crate::machine(),
        show_load(load[0]),
        show_load(load[1]),
        args.nodes,
        args.pools,
        args.engine_rounds.max(1),
        args.pods,
        args.pod_concurrency,
        args.changes.next_multiple_of(2),
    );
    out.push_str(
        "| round | engine | creates/s | p50 / p99 | kube-apiserver CPU per create | etcd CPU \
         per create | poolkeeper CPU per create | webhook calls per create | binding change → \
         placed, p50 / p99 |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for figures in all {
        let creates = figures.creates.max(1) as f64;
        let per_create = |cpu: Duration| format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / creates);
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} / {} ms | {} | {} | {} | {:.2} | {} / {} ms |",
            figures.round,
            figures.engine,
            creates / figures.duration.as_secs_f64(),
            millis(percentile(&figures.round_trips, 0.5)),
            millis(percentile(&figures.round_trips, 0.99)),
            per_create(figures.apiserver_cpu),
            per_create(figures.etcd_cpu),
            per_create(figures.poolkeeper_cpu),
            figures.webhook_calls / creates,
            millis(percentile(&figures.staleness, 0.5)),
            millis(percentile(&figures.staleness, 0.99)),
        );
    }
    out.push_str(&render_plugins(all));
    let _ = writeln!(out);
    for pair in all.chunks(2) {
        if let [webhook, cel] = pair {
            let _ = writeln!(
                out,
                "Round {}, cel / webhook: creates/s {:.2}x, kube-apiserver CPU per create \
                 {:.2}x, p99 {:.2}x.",
                cel.round,
                webhook.duration.as_secs_f64() / cel.duration.as_secs_f64(),
                cel.apiserver_cpu.as_secs_f64() / webhook.apiserver_cpu.as_secs_f64(),
                ratio(
                    percentile(&cel.round_trips, 0.99),
                    percentile(&webhook.round_trips, 0.99)
                ),
            );
        }
    }
    out.push_str(&render_staleness(all));
    out
}

/// Binding change → placed, over every round of each engine.
fn render_staleness(all: &[EngineFigures]) -> String {
    let mut out = String::new();
    for engine in ENGINES {
        let changes: Vec<Duration> = all
            .iter()
            .filter(|f| f.engine == engine)
            .flat_map(|f| f.staleness.iter().copied())
            .collect();
        let _ = writeln!(
            out,
            "Binding change → placed, {engine}, all rounds: {} changes, p50 {} ms, p99 {} ms, \
             max {} ms.",
            changes.len(),
            millis(percentile(&changes, 0.5)),
            millis(percentile(&changes, 0.99)),
            millis(changes.iter().max().copied()),
        );
    }
    out
}

/// The apiserver's time in each admission plugin, per create.
fn render_plugins(all: &[EngineFigures]) -> String {
    let mut out = format!(
        "\nThe apiserver's time per create in each admission plugin (`{PLUGIN_TIME}`, its sum \
         over the creates / the creates):\n\n| round | engine | {} |\n|---|---|{}\n",
        PLUGINS.join(" | "),
        "---:|".repeat(PLUGINS.len()),
    );
    for figures in all {
        let creates = figures.creates.max(1) as f64;
        let cells: Vec<String> = PLUGINS
            .iter()
            .map(|plugin| {
                let sum = figures.plugins.get(*plugin).map_or(0.0, |h| h.sum);
                format!("{:.2} ms", sum * 1e3 / creates)
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            figures.round,
            figures.engine,
            cells.join(" | ")
        );
    }
    out
}

fn ratio(a: Option<Duration>, b: Option<Duration>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) if !b.is_zero() => a.as_secs_f64() / b.as_secs_f64(),
        _ => f64::NAN,
    }
}

fn millis(duration: Option<Duration>) -> String {
    duration.map_or_else(
        || "–".to_owned(),
        |d| format!("{:.1}", d.as_secs_f64() * 1e3),
    )
}

fn show_load(load: Option<[f64; 3]>) -> String {
    load.map_or_else(|| "unknown".to_owned(), |[one, ..]| format!("{one:.1}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placed_pool_is_read_from_the_pool_term() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "disk", "operator": "In", "values": ["ssd"]},
                        {"key": objects::POOL_LABEL, "operator": "In", "values": ["pool-001"]},
                    ]},
                ]}}}},
        }))
        .unwrap();
        assert_eq!(placed_pool(&pod).as_deref(), Some("pool-001"));
        let plain: Pod = serde_json::from_value(objects::pod(1)).unwrap();
        assert_eq!(placed_pool(&plain), None);
    }
}
