//! The kwok run's figures and their Markdown report, against the goals.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::pods::{self, Reading};
use super::run::Counters;
use super::sample::share;
use crate::Args;
use crate::process::Memory;
use crate::report::Figures;
use crate::startup::Startup;
use crate::stats::Histogram;

/// Goals: steady-state CPU under heartbeats, RSS with every Pod, audit round.
const CPU_GOAL: f64 = 0.05;
const RSS_GOAL_MIB: f64 = 120.0;
const AUDIT_GOAL: Duration = Duration::from_secs(10);

/// One window of poolkeeper under heartbeats.
#[derive(Clone, Debug)]
pub struct Steady {
    pub label: &'static str,
    pub wall: Duration,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    pub delta: Counters,
}

/// One way the Pods were created.
#[derive(Clone, Debug)]
pub struct Creation {
    /// How, in words: "through 500 Deployments", "bound to a Node of their pool".
    pub how: String,
    pub pods: usize,
    pub parallel: usize,
    /// The creates themselves (the Deployments', or every bound Pod's).
    pub requests: Duration,
    /// Creates refused once and taken on a later attempt.
    pub retries: usize,
    /// Until every Pod was ready (or the timeout).
    pub wall: Duration,
    pub readings: Vec<Reading>,
    pub apiserver: BTreeMap<String, Histogram>,
    pub delta: Counters,
    pub rss_kib: u64,
}

#[derive(Clone, Debug)]
pub struct AuditFigures {
    pub wall: Duration,
    pub pods: u64,
    /// The round as the audit reports it (the process's start and index load left out).
    pub round: Option<Duration>,
    pub peak_rss_kib: u64,
    /// The process's CPU (user and system), its start and index included.
    pub cpu: Option<Duration>,
    pub apiserver_cpu: Option<Duration>,
    /// Pages of Pods the API server answered during it (the bench's own progress LISTs
    /// are over by then).
    pub pod_lists: f64,
    pub violations: usize,
}

/// The OpenReports after a leader's audit round (`--openreports-crds`).
#[derive(Clone, Debug)]
pub struct ReportFigures {
    pub reports: usize,
    /// Results over every Report: one per violation.
    pub results: usize,
    /// Pods the run placed outside their pool (`--violating-percent`).
    pub outside: usize,
    /// poolkeeper's with the Reports written.
    pub memory: Memory,
}

/// Everything the kwok run measured.
pub struct KwokFigures {
    /// The cluster's load and LISTs, as the static run records them.
    pub base: Figures,
    pub heartbeat: Duration,
    pub leases_after: Duration,
    pub first_start: Startup,
    pub steady: Vec<Steady>,
    pub creations: Vec<Creation>,
    pub audit: Option<AuditFigures>,
    /// The same round with every namespace bound to another pool: every Pod read.
    pub audit_misplaced: Option<AuditFigures>,
    pub reports: Option<ReportFigures>,
    pub restart: Startup,
    /// Bound Pods replaced (deleted, and a new one created) during the churn window.
    pub churned_pods: usize,
    /// The cluster's processes once every Pod ran.
    pub cluster_memory: Vec<(&'static str, Memory)>,
    pub memory: Vec<(&'static str, Memory)>,
    pub total: Duration,
}

impl KwokFigures {
    pub fn new(base: Figures, args: &Args) -> Self {
        Self {
            base,
            heartbeat: Duration::from_secs(args.heartbeat_seconds),
            leases_after: Duration::ZERO,
            first_start: Startup::default(),
            steady: Vec::new(),
            creations: Vec::new(),
            audit: None,
            audit_misplaced: None,
            reports: None,
            restart: Startup::default(),
            churned_pods: 0,
            cluster_memory: Vec::new(),
            memory: Vec::new(),
            total: Duration::ZERO,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let b = &self.base;
        let _ = writeln!(
            out,
            "## Scale with kwok ({})\n\n`{}`; {}; {} Nodes in {} pools, {} MachineClasses, {} Machines; \
             kwok Node status heartbeat every {}s on average, Leases of {}s; load averages {:?}; \
             total {:.0}s.\n",
            b.started_at,
            b.command,
            b.machine,
            b.sizes.nodes,
            b.sizes.pools,
            b.sizes.classes,
            b.sizes.machines,
            self.heartbeat.as_secs(),
            super::stages::LEASE_SECONDS,
            b.load_averages,
            self.total.as_secs_f64()
        );
        for phase in &b.load {
            let _ = writeln!(
                out,
                "- loaded {} {} in {:.1}s",
                phase.objects,
                phase.what,
                phase.duration.as_secs_f64()
            );
        }
        let _ = writeln!(
            out,
            "- kwok held a Lease for every Node {:.1}s after it started\n",
            self.leases_after.as_secs_f64()
        );
        self.render_steady(&mut out);
        let _ = writeln!(
            out,
            "During the churn window {} bound Pods were replaced (deleted, a new one created).\n",
            self.churned_pods
        );
        // What the heartbeats alone cost, to take out of the CPU per admission.
        let idle = self
            .steady
            .first()
            .map(|s| share(s.delta.poolkeeper_cpu, s.wall));
        for creation in &self.creations {
            render_creation(creation, idle, &mut out);
        }
        let cluster: Vec<String> = self
            .cluster_memory
            .iter()
            .map(|(name, m)| format!("{name} {}", mib(m.rss_kib)))
            .collect();
        let _ = writeln!(
            out,
            "RSS of the cluster's processes with every Pod Running: {}.\n",
            cluster.join(", ")
        );
        self.render_audit(&mut out);
        self.render_starts(&mut out);
        out
    }

    fn render_steady(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "| window | wall | poolkeeper CPU (% of a core) | RSS / peak | Node writes | Node changes in the index | writes per change | Lease writes | Pod writes | all index changes | watch failures | lagged | audit rounds | API server CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for s in &self.steady {
            let d = &s.delta;
            let cpu = share(d.poolkeeper_cpu, s.wall);
            let _ = writeln!(
                out,
                "| {} | {:.0}s | {:.2} % {} | {} / {} | {:.0} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} % |",
                s.label,
                s.wall.as_secs_f64(),
                cpu * 100.0,
                goal(cpu < CPU_GOAL),
                mib(s.rss_kib),
                mib(s.peak_rss_kib),
                d.node_writes,
                d.node_changes,
                ratio(d.node_writes, d.node_changes),
                d.lease_writes,
                d.pod_writes,
                d.all_changes,
                d.watch_failures,
                d.lagged,
                d.audit_rounds,
                share(d.apiserver_cpu, s.wall) * 100.0
            );
        }
        out.push('\n');
    }

    fn render_audit(&self, out: &mut String) {
        let rounds = [
            (
                "Audit (`poolkeeper audit`, a process of its own)",
                &self.audit,
            ),
            (
                "The same with every namespace bound to the next pool (every Pod outside its pool, every Pod read)",
                &self.audit_misplaced,
            ),
        ];
        for (what, audit) in rounds {
            let Some(a) = audit else { continue };
            let api = a.apiserver_cpu.map_or("n/a".into(), |c| {
                format!(
                    "{:.1}s ({:.0} % of a core)",
                    c.as_secs_f64(),
                    share(c, a.wall) * 100.0
                )
            });
            let _ = writeln!(
                out,
                "{what}: {} Pods read, round {} (process {:.2}s wall) {}, \
                 {:.0} pages of Pods, peak RSS {}, CPU {}, {} violation groups; API server CPU during it {api}.\n",
                a.pods,
                a.round
                    .map_or("n/a".into(), |r| format!("{:.2}s", r.as_secs_f64())),
                a.wall.as_secs_f64(),
                goal(a.round.is_some_and(|r| r < AUDIT_GOAL)),
                a.pod_lists,
                mib(a.peak_rss_kib),
                a.cpu
                    .map_or("n/a".into(), |c| format!("{:.1}s", c.as_secs_f64())),
                a.violations
            );
        }
    }

    fn render_starts(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "| start | ready | LIST (watchers → index synchronized) | the rest |\n|---|---|---|---|"
        );
        for (label, s) in [
            ("first, no Pods", &self.first_start),
            ("restart, every Pod Running", &self.restart),
        ] {
            let list = s
                .watchers_started
                .zip(s.synchronized)
                .map(|(a, b)| b.saturating_sub(a));
            let _ = writeln!(
                out,
                "| {label} | {:.2}s | {} | {} |",
                s.ready.as_secs_f64(),
                list.map_or("n/a".into(), |d| format!("{:.2}s", d.as_secs_f64())),
                list.map_or("n/a".into(), |d| format!(
                    "{:.2}s",
                    s.ready.saturating_sub(d).as_secs_f64()
                ))
            );
        }
        out.push('\n');
        if let Some(r) = &self.reports {
            let rss = r.memory.rss_kib as f64 / 1024.0;
            let _ = writeln!(
                out,
                "- OpenReports after the leader's audit round: {} Reports with {} results for \
                 {} Pods placed outside their pool; RSS {rss:.1} MiB {} (peak {})",
                r.reports,
                r.results,
                r.outside,
                goal(rss < RSS_GOAL_MIB),
                mib(r.memory.peak_kib)
            );
        }
        for (when, m) in &self.memory {
            let rss = m.rss_kib as f64 / 1024.0;
            let _ = writeln!(
                out,
                "- RSS {when}: {rss:.1} MiB {} (peak {})",
                goal(rss < RSS_GOAL_MIB),
                mib(m.peak_kib)
            );
        }
    }
}

/// `idle`: poolkeeper's CPU share under heartbeats alone, taken out of the CPU per admission.
fn render_creation(c: &Creation, idle: Option<f64>, out: &mut String) {
    let (created, ready) = pods::reached(&c.readings, c.pods as i64);
    let last = c.readings.last().map(|r| r.progress).unwrap_or_default();
    let admissions = c.delta.admissions.max(1.0);
    let cpu_per_admission = c.delta.poolkeeper_cpu.as_secs_f64() / admissions;
    let net = idle.map_or("n/a".into(), |idle| {
        let heartbeats = idle * c.wall.as_secs_f64();
        let net = (c.delta.poolkeeper_cpu.as_secs_f64() - heartbeats) / admissions;
        if net > 0.0 {
            format!("{:.0} µs", net * 1e6)
        } else {
            "nothing measurable".to_owned()
        }
    });
    let _ = writeln!(
        out,
        "Pods: {} {} (creates by {} clients in {:.1}s, {} retried); all created after {}, all Running after {} \
         (last reading: {} created, {} Running); peak creation {} Pods/s over 30 s, mean {:.0}/s. \
         {:.0} admissions, poolkeeper CPU {:.1}s over the creation = {:.0} µs per admission \
         ({net} without what the heartbeats cost in the window); \
         API server CPU {:.0} % of a core; RSS after it {}; {:.0} watch failures, {:.0} lagged.\n",
        c.pods,
        c.how,
        c.parallel,
        c.requests.as_secs_f64(),
        c.retries,
        created.map_or("n/a".into(), |d| format!("{:.0}s", d.as_secs_f64())),
        ready.map_or("n/a".into(), |d| format!("{:.0}s", d.as_secs_f64())),
        last.created,
        last.ready,
        pods::peak_rate(&c.readings, Duration::from_secs(30))
            .map_or("n/a".into(), |r| format!("{r:.0}")),
        last.created as f64 / created.unwrap_or(c.wall).as_secs_f64().max(1e-9),
        c.delta.admissions,
        c.delta.poolkeeper_cpu.as_secs_f64(),
        cpu_per_admission * 1e6,
        share(c.delta.apiserver_cpu, c.wall) * 100.0,
        mib(c.rss_kib),
        c.delta.watch_failures,
        c.delta.lagged
    );
    let _ = writeln!(
        out,
        "| admission histogram | count | mean | p50 | p99 |\n|---|---|---|---|---|"
    );
    for (name, h) in &c.apiserver {
        let q = |q| {
            h.quantile(q)
                .map_or("n/a".into(), |v| format!("{:.2} ms", v * 1000.0))
        };
        let mean = h
            .mean()
            .map_or("n/a".into(), |m| format!("{:.2} ms", m * 1000.0));
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {mean} | {} | {} |",
            h.count,
            q(0.5),
            q(0.99)
        );
    }
    out.push('\n');
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn ratio(writes: f64, changes: f64) -> String {
    if changes > 0.0 {
        format!("{:.0}", writes / changes)
    } else {
        "∞ (no change)".to_owned()
    }
}

fn goal(met: bool) -> &'static str {
    if met { "(goal met)" } else { "(goal missed)" }
}
