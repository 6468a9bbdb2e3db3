//! The figures of one run and their Markdown rendering (the shape of the "Scale against the
//! real apiserver" entry in docs/benchmarks-log.md).

use std::fmt::Write as _;
use std::time::Duration;

use crate::admission::AdmissionFigures;
use crate::lists::ListFigure;
use crate::load::LoadPhase;
use crate::objects::Sizes;
use crate::process::Memory;
use crate::startup::Startup;
use crate::stats::{Histogram, percentile};

/// The goals of the scale benchmark (BENCHMARKS.md).
pub const READY_AFTER_LISTS_GOAL: Duration = Duration::from_secs(3);
pub const RSS_GOAL_MIB: f64 = 80.0;
pub const LATENCY_MARGIN: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
pub struct Figures {
    pub started_at: String,
    pub machine: String,
    pub command: String,
    pub sizes: Sizes,
    pub concurrency: usize,
    pub page_size: u32,
    pub debounce: Duration,
    /// Load averages at named points of the run.
    pub load_averages: Vec<(&'static str, [f64; 3])>,
    pub control_plane_start: Duration,
    pub load: Vec<LoadPhase>,
    pub lists: Vec<ListFigure>,
    pub startup: Startup,
    /// `/readyz` 200 → every used class carries the finalizer (our watch).
    pub protected_after: Duration,
    /// `/readyz` 200 → the executor's counters stopped moving.
    pub settled_after: Duration,
    pub finalizer_writes: u64,
    /// Memory at `/readyz` 200, once settled, and at the end.
    pub memory: Vec<(&'static str, Memory)>,
    pub changes: Vec<Duration>,
    pub admission: Option<AdmissionFigures>,
    pub total: Duration,
}

fn secs(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}

fn millis(duration: Duration) -> String {
    format!("{:.0} ms", duration.as_secs_f64() * 1000.0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

fn optional(value: Option<Duration>) -> String {
    value.map(secs).unwrap_or_else(|| "n/a".to_owned())
}

impl Figures {
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_context(&mut out);
        self.render_goals(&mut out);
        self.render_load(&mut out);
        self.render_startup(&mut out);
        self.render_memory_and_changes(&mut out);
        self.render_admission(&mut out);
        out
    }

    fn render_context(&self, out: &mut String) {
        let s = &self.sizes;
        let _ = writeln!(
            out,
            "Run of {} (total {}).",
            self.started_at,
            secs(self.total)
        );
        let _ = writeln!(
            out,
            "Command: `{}`. Machine: {}.",
            self.command, self.machine
        );
        let averages: Vec<String> = self
            .load_averages
            .iter()
            .map(|(when, [one, five, fifteen])| {
                format!("{when} {one:.2} / {five:.2} / {fifteen:.2}")
            })
            .collect();
        let _ = writeln!(out, "Load average (1/5/15 min): {}.", averages.join("; "));
        let _ = writeln!(
            out,
            "Cluster: {} Nodes, {} NodePools, {} MachineClasses ({} unused), {} Machines, the placement \
             ConfigMap with {} bindings. poolkeeper: release build, leader election on, webhooks \
             registered, watchers.pageSize {}, reconciler.debounceInterval {}.\n",
            s.nodes,
            s.pools,
            s.classes,
            s.unused_classes,
            s.machines,
            s.pools,
            self.page_size,
            millis(self.debounce)
        );
    }

    fn render_goals(&self, out: &mut String) {
        let startup = &self.startup;
        let after = startup.after_lists();
        let settled = self.memory_at("settled");
        let p50 = percentile(&self.changes, 0.5);
        let p99 = percentile(&self.changes, 0.99);
        let latency_goal = self.debounce + LATENCY_MARGIN;
        let _ = writeln!(out, "| figure | measured | goal | |\n|---|---|---|---|");
        let _ = writeln!(
            out,
            "| process start → `/readyz` 200 | {} | | |",
            secs(startup.ready)
        );
        let _ = writeln!(
            out,
            "| of which LIST (watchers start → index synchronized) | {} | | |",
            optional(startup.list_phase())
        );
        let _ = writeln!(
            out,
            "| of which the rest | {} | | |",
            optional(startup.rest())
        );
        if let Some(after) = after {
            let _ = writeln!(
                out,
                "| lists complete → `/readyz` 200 | {} | < {} | {} |",
                secs(after),
                secs(READY_AFTER_LISTS_GOAL),
                verdict(after < READY_AFTER_LISTS_GOAL)
            );
        }
        if let Some(memory) = settled {
            let rss = mib(memory.rss_kib);
            let _ = writeln!(
                out,
                "| steady-state RSS (VmRSS, settled) | {rss:.1} MiB | < {RSS_GOAL_MIB:.0} MiB | {} |",
                verdict(rss < RSS_GOAL_MIB)
            );
            let _ = writeln!(
                out,
                "| peak RSS (VmHWM) | {:.1} MiB | | |",
                mib(memory.peak_kib)
            );
        }
        if let (Some(p50), Some(p99)) = (p50, p99) {
            let _ = writeln!(
                out,
                "| change → finalizer p50 ({} changes) | {} | ≤ {} (debounce + 100 ms) | {} |",
                self.changes.len(),
                millis(p50),
                millis(latency_goal),
                verdict(p50 <= latency_goal)
            );
            let _ = writeln!(out, "| change → finalizer p99 | {} | | |", millis(p99));
        }
        if let Some(admission) = &self.admission {
            for (name, histogram) in &admission.apiserver {
                let _ = writeln!(
                    out,
                    "| admission {name} p50 / p99 (apiserver histogram) | {} / {} | | |",
                    quantile_ms(histogram, 0.5),
                    quantile_ms(histogram, 0.99)
                );
            }
        }
        out.push('\n');
    }

    fn render_load(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "Loading ({} requests in flight; control plane started in {}):\n",
            self.concurrency,
            secs(self.control_plane_start)
        );
        let _ = writeln!(
            out,
            "| kind | objects | requests | time | requests/s |\n|---|---|---|---|---|"
        );
        let (mut objects, mut requests, mut time) = (0, 0, Duration::ZERO);
        for phase in &self.load {
            let rate = phase.requests as f64 / phase.duration.as_secs_f64().max(1e-9);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {rate:.0} |",
                phase.what,
                phase.objects,
                phase.requests,
                secs(phase.duration)
            );
            objects += phase.objects;
            requests += phase.requests;
            time += phase.duration;
        }
        let rate = requests as f64 / time.as_secs_f64().max(1e-9);
        let _ = writeln!(
            out,
            "| total | {objects} | {requests} | {} | {rate:.0} |\n",
            secs(time)
        );
    }

    fn render_startup(&self, out: &mut String) {
        let startup = &self.startup;
        let _ = writeln!(
            out,
            "Startup timeline (from poolkeeper's JSON log lines, stamped on arrival; 0 = process start):\n"
        );
        let _ = writeln!(out, "| event | at |\n|---|---|");
        let _ = writeln!(
            out,
            "| watchers stage started | {} |",
            optional(startup.watchers_started)
        );
        for (kind, objects, at) in &startup.lists {
            let _ = writeln!(
                out,
                "| initial list of {kind} applied ({objects} objects) | {} |",
                secs(*at)
            );
        }
        let _ = writeln!(
            out,
            "| index synchronized | {} |",
            optional(startup.synchronized)
        );
        let _ = writeln!(out, "| lease acquired | {} |", optional(startup.leader));
        let _ = writeln!(out, "| serve stage ready | {} |", optional(startup.serving));
        let _ = writeln!(out, "| `/readyz` 200 | {} |", secs(startup.ready));
        let _ = writeln!(
            out,
            "| every used class has the finalizer ({} writes) | +{} after ready |",
            self.finalizer_writes,
            secs(self.protected_after)
        );
        let _ = writeln!(
            out,
            "| executor quiet (settled) | +{} after ready |\n",
            secs(self.settled_after)
        );
        let _ = writeln!(
            out,
            "A plain paginated LIST of each kind by the benchmark (page size {}, deserialized into the same types), before poolkeeper started:\n",
            self.page_size
        );
        let _ = writeln!(
            out,
            "| kind | objects | pages | MiB | time |\n|---|---|---|---|---|"
        );
        for list in &self.lists {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {} |",
                list.kind,
                list.objects,
                list.pages,
                list.bytes as f64 / 1_048_576.0,
                secs(list.duration)
            );
        }
        out.push('\n');
    }

    fn render_memory_and_changes(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "| memory | VmRSS | VmHWM (peak so far) |\n|---|---|---|"
        );
        for (when, memory) in &self.memory {
            let _ = writeln!(
                out,
                "| {when} | {:.1} MiB | {:.1} MiB |",
                mib(memory.rss_kib),
                mib(memory.peak_kib)
            );
        }
        out.push('\n');
        if !self.changes.is_empty() {
            let point = |q| percentile(&self.changes, q).map(millis).unwrap_or_default();
            let _ = writeln!(
                out,
                "Change → finalizer ({} single changes: a Machine created for a class no Machine used; until our watch sees the finalizer): \
                 min {}, p50 {}, p90 {}, p99 {}, max {}; debounce {}.\n",
                self.changes.len(),
                point(0.0),
                point(0.5),
                point(0.9),
                point(0.99),
                point(1.0),
                millis(self.debounce)
            );
        }
    }

    fn render_admission(&self, out: &mut String) {
        let Some(admission) = &self.admission else {
            return;
        };
        let rate = admission.pods as f64 / admission.duration.as_secs_f64().max(1e-9);
        let p = |q| {
            percentile(&admission.round_trips, q)
                .map(millis)
                .unwrap_or_default()
        };
        let _ = writeln!(
            out,
            "Admission: {} Pod creates in a bound namespace, {} in flight, {} ({rate:.0}/s); create round trip p50 {}, p99 {}.\n",
            admission.pods,
            admission.concurrency,
            secs(admission.duration),
            p(0.5),
            p(0.99)
        );
        let _ = writeln!(
            out,
            "| histogram | webhook | count | mean | p50 | p99 | p99 bucket |\n|---|---|---|---|---|---|---|"
        );
        for (source, all) in [
            ("apiserver", &admission.apiserver),
            ("poolkeeper", &admission.poolkeeper),
        ] {
            for (name, histogram) in all {
                let mean = histogram
                    .mean()
                    .map(|m| format!("{:.2} ms", m * 1000.0))
                    .unwrap_or_default();
                let bound = histogram
                    .bucket_bound(0.99)
                    .map(|b| format!("≤ {:.1} ms", b * 1000.0))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "| {source} | {name} | {:.0} | {mean} | {} | {} | {bound} |",
                    histogram.count,
                    quantile_ms(histogram, 0.5),
                    quantile_ms(histogram, 0.99)
                );
            }
        }
        out.push('\n');
    }

    fn memory_at(&self, when: &str) -> Option<Memory> {
        self.memory
            .iter()
            .find(|(w, _)| *w == when)
            .map(|(_, m)| *m)
    }
}

fn quantile_ms(histogram: &Histogram, q: f64) -> String {
    histogram
        .quantile(q)
        .map(|v| format!("{:.2} ms", v * 1000.0))
        .unwrap_or_else(|| "n/a".to_owned())
}
