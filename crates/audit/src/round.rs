//! One audit round: every Pod of the bound namespaces that is not on a
//! Node of its namespace's pools, and every Pod with the pool label, read a
//! page at a time and judged against the index as it is now by
//! [`poolkeeper_placement::audit`]. Nothing of a Pod is kept
//! beyond its page but the violations to report. Several LISTs run at once
//! (`audit.concurrency`), their results merged in the order of the LISTs.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use poolkeeper_bus::{AuditCount, AuditViolation, Event, REPORT_RESULTS_PER_NAMESPACE};
use poolkeeper_index::{Index, PlacementView};
use poolkeeper_placement::{
    Decision, PlacementPolicy, PodPlacement, PolicyCache, PoolSet, Workload, WorkloadKind, audit,
    validate_workload,
};
use tokio::time::Instant;

use crate::error::AuditError;
use crate::lister::{NOT_ON_NODE, PageStart, PodLister, PodQuery};
use crate::settings::AuditSettings;

/// What identifies a violation across rounds.
pub fn report_key(violation: &AuditViolation) -> ReportKey {
    ReportKey::new(
        &violation.uid,
        &violation.namespace,
        &violation.pod,
        violation.reason,
    )
}

/// A Pod (by UID, so a Pod recreated under the same name is another one)
/// and a violation reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReportKey {
    pod: String,
    reason: &'static str,
}

impl ReportKey {
    pub fn new(uid: &str, namespace: &str, name: &str, reason: &'static str) -> Self {
        let pod = if uid.is_empty() {
            format!("{namespace}/{name}")
        } else {
            uid.to_owned()
        };
        Self { pod, reason }
    }
}

/// What one round found.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    /// Pods read and judged (those a namespace's LIST leaves out are not).
    pub pods: usize,
    /// Workloads (their Pod templates) judged.
    pub workloads: usize,
    pub duration: Duration,
    /// Every violation, counted by namespace, pool and reason (sorted).
    pub counts: Vec<AuditCount>,
    /// The first `max_reported` violations, in LIST order.
    pub findings: Vec<AuditViolation>,
    /// With `audit.reports`: every violation by namespace (in namespace
    /// order), at most [`REPORT_RESULTS_PER_NAMESPACE`] of each.
    pub results: Vec<AuditViolation>,
    /// More violations were found than `findings` holds.
    pub truncated: bool,
    /// The keys of the previous round's reports that are still violations.
    pub still_reported: HashSet<ReportKey>,
}

impl Round {
    /// Every violation, detailed or only counted.
    pub fn violations(&self) -> usize {
        self.counts.iter().map(|count| count.pods).sum()
    }

    /// The bus event announcing this round.
    pub fn to_event(&self) -> Event {
        Event::AuditCompleted {
            pods: self.pods,
            duration: self.duration,
            counts: self.counts.clone(),
            violations: self.findings.clone(),
            truncated: self.truncated,
            results: Arc::from(self.results.as_slice()),
        }
    }
}

/// The object a violation is about.
struct Subject<'a> {
    kind: &'static str,
    api_version: &'static str,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    node: Option<&'a str>,
}

fn workload_api_version(kind: WorkloadKind) -> &'static str {
    match kind.group() {
        "apps" => "apps/v1",
        "batch" => "batch/v1",
        _ => "v1",
    }
}

/// Counts and findings as Pods and workloads are judged.
struct Tally<'r> {
    max_reported: usize,
    /// Keep `results` (`audit.reports`).
    reports: bool,
    results: BTreeMap<String, Vec<AuditViolation>>,
    previous: &'r HashSet<ReportKey>,
    pods: usize,
    workloads: usize,
    counts: BTreeMap<(String, String, &'static str), usize>,
    findings: Vec<AuditViolation>,
    truncated: bool,
    still_reported: HashSet<ReportKey>,
}

impl<'r> Tally<'r> {
    fn new(settings: &AuditSettings, previous: &'r HashSet<ReportKey>) -> Self {
        Self {
            max_reported: settings.max_reported,
            reports: settings.reports,
            results: BTreeMap::new(),
            previous,
            pods: 0,
            workloads: 0,
            counts: BTreeMap::new(),
            findings: Vec::new(),
            truncated: false,
            still_reported: HashSet::new(),
        }
    }

    fn judge(&mut self, pod: &PodPlacement, view: &PlacementView<'_>, policy: &PlacementPolicy) {
        self.pods += 1;
        let decision = audit(pod, view, policy);
        if decision.allowed {
            return;
        }
        let subject = Subject {
            kind: "Pod",
            api_version: "v1",
            namespace: &pod.namespace,
            name: &pod.name,
            uid: &pod.uid,
            node: pod.node_name(),
        };
        self.record(&subject, decision);
    }

    /// A workload whose template `validate` would deny (in any mode).
    fn judge_workload(
        &mut self,
        workload: &Workload,
        view: &PlacementView<'_>,
        policy: &PlacementPolicy,
    ) {
        self.workloads += 1;
        let mut decision = validate_workload(workload, &workload.namespace, view, policy);
        if decision.enforce_allows() {
            return;
        }
        decision.message = decision.message.take().or(decision.withheld_denial.take());
        let subject = Subject {
            kind: workload.kind.kind(),
            api_version: workload_api_version(workload.kind),
            namespace: &workload.namespace,
            name: &workload.name,
            uid: &workload.uid,
            node: None,
        };
        self.record(&subject, decision);
    }

    fn record(&mut self, subject: &Subject<'_>, decision: Decision) {
        let pool = decision.pool.unwrap_or_default();
        let reason = decision.reason.as_str();
        let namespace = subject.namespace.to_owned();
        *self
            .counts
            .entry((namespace.clone(), pool.clone(), reason))
            .or_default() += 1;
        let shown = if subject.kind == "Pod" {
            subject.name.to_owned()
        } else {
            format!("{}/{}", subject.kind, subject.name)
        };
        let key = ReportKey::new(subject.uid, &namespace, &shown, reason);
        if self.previous.contains(&key) {
            self.still_reported.insert(key);
        }
        let violation = AuditViolation {
            namespace,
            pod: shown,
            kind: subject.kind,
            api_version: subject.api_version,
            name: subject.name.to_owned(),
            uid: subject.uid.to_owned(),
            mode: decision.mode,
            first_found: false,
            pool,
            reason,
            node: subject.node.map(str::to_owned),
            message: decision.message.unwrap_or_default(),
        };
        if self.reports {
            let kept = self.results.entry(violation.namespace.clone()).or_default();
            if kept.len() < REPORT_RESULTS_PER_NAMESPACE {
                kept.push(violation.clone());
            }
        }
        if self.findings.len() >= self.max_reported {
            self.truncated = true;
        } else {
            self.findings.push(violation);
        }
    }

    /// Adds the tally of a later LIST: its violations follow this one's,
    /// so the findings stay the first `max_reported` in LIST order.
    fn absorb(&mut self, part: Tally<'_>) {
        self.pods += part.pods;
        self.workloads += part.workloads;
        for (key, pods) in part.counts {
            *self.counts.entry(key).or_default() += pods;
        }
        self.still_reported.extend(part.still_reported);
        let room = self.max_reported.saturating_sub(self.findings.len());
        self.truncated |= part.truncated || part.findings.len() > room;
        self.findings.extend(part.findings.into_iter().take(room));
        for (namespace, results) in part.results {
            let kept = self.results.entry(namespace).or_default();
            let room = REPORT_RESULTS_PER_NAMESPACE.saturating_sub(kept.len());
            kept.extend(results.into_iter().take(room));
        }
    }

    fn finish(self, duration: Duration) -> Round {
        Round {
            pods: self.pods,
            workloads: self.workloads,
            duration,
            counts: self
                .counts
                .into_iter()
                .map(|((namespace, pool, reason), pods)| AuditCount {
                    namespace,
                    pool,
                    reason,
                    pods,
                })
                .collect(),
            findings: self.findings,
            results: self.results.into_values().flatten().collect(),
            truncated: self.truncated,
            still_reported: self.still_reported,
        }
    }
}

/// The LISTs of one round: each bound namespace, then the labelled Pods
/// of every namespace. A namespace's LIST leaves out the Pods on the Nodes
/// of its pools (as `view` has them), as many Nodes as fit in
/// [`LEAVE_OUT_BYTES`]: such a Pod is in its pool, unless its pool label
/// narrows the binding or leaves it, and the labelled Pods have their own
/// LIST. So the API
/// server encodes and sends only the Pods that may be violations.
pub fn queries(policy: &PlacementPolicy, view: &PlacementView<'_>) -> Vec<PodQuery> {
    let pool_label = view.pool_label();
    policy
        .bindings()
        .map(|(namespace, binding)| PodQuery::Namespace {
            namespace: namespace.to_owned(),
            pool_label: pool_label.to_owned(),
            leave_out: pool_nodes(view, &binding.pools),
        })
        .chain([PodQuery::Labelled {
            pool_label: pool_label.to_owned(),
        }])
        .collect()
}

/// How much of a field selector the Nodes left out of a namespace's LIST
/// may take, so that its URL stays well under the 8 KiB that proxies in
/// front of API servers commonly accept. Pods on the Nodes beyond it are
/// read and judged as any other.
pub const LEAVE_OUT_BYTES: usize = 4096;

/// The Nodes of `pools`, by name, as many as fit in [`LEAVE_OUT_BYTES`].
fn pool_nodes(view: &PlacementView<'_>, pools: &PoolSet) -> Vec<String> {
    let mut names: Vec<&str> = pools
        .names()
        .iter()
        .flat_map(|pool| view.nodes_in_pool(pool))
        .map(|node| node.name.as_str())
        .collect();
    names.sort_unstable();
    let mut room = LEAVE_OUT_BYTES;
    names
        .into_iter()
        .map_while(|name| {
            room = room.checked_sub(NOT_ON_NODE.len() + name.len())?;
            Some(name.to_owned())
        })
        .collect()
}

/// One LIST of a round, read a page at a time: the Pods of a query, or one
/// workload kind across namespaces.
enum Job {
    Pods(PodQuery),
    Workloads(WorkloadKind),
}

/// What every LIST of a round reads and judges against.
#[derive(Clone, Copy)]
struct Scope<'r> {
    lister: &'r dyn PodLister,
    index: &'r Index,
    settings: &'r AuditSettings,
    policy: &'r PlacementPolicy,
    /// Namespaces whose Pods their own LIST judges.
    bound: &'r BTreeSet<&'r str>,
    previous: &'r HashSet<ReportKey>,
    /// The `resourceVersion` of the round's first answer: every LIST that
    /// starts after it reads Pods not older than it, from the API server's
    /// watch cache at once (`PageStart::NotOlderThan`).
    fresh: &'r OnceLock<String>,
}

/// Runs one round. `previous` holds the keys reported so far; the round
/// says which of them are still violations. A failed LIST or an invalid
/// policy fails the round.
///
/// `settings.concurrency` LISTs are in flight as long as any are left, each
/// reading its pages one after another into its own tally; the tallies are
/// merged in the order of the LISTs, so the round finds what a sequential
/// one would, in the same order, holding no more than one page per LIST in
/// flight.
pub async fn audit_round(
    lister: &dyn PodLister,
    index: &Index,
    policy: &PolicyCache,
    settings: &AuditSettings,
    previous: &HashSet<ReportKey>,
) -> Result<Round, AuditError> {
    let started = Instant::now();
    // The view is a lock guard: never held across a LIST.
    let (loaded, queries) = {
        let view = index.placement();
        let loaded = policy.get(&view);
        let queries = match loaded.as_ref() {
            Ok(policy) => queries(policy, &view),
            Err(_) => Vec::new(),
        };
        (loaded, queries)
    };
    let policy = loaded
        .as_ref()
        .as_ref()
        .map_err(|error| AuditError::Policy(error.to_string()))?;
    let bound: BTreeSet<&str> = policy.bindings().map(|(namespace, _)| namespace).collect();
    let fresh = OnceLock::new();
    let scope = Scope {
        lister,
        index,
        settings,
        policy,
        bound: &bound,
        previous,
        fresh: &fresh,
    };
    let jobs = queries
        .into_iter()
        .map(Job::Pods)
        .chain(WorkloadKind::ALL.into_iter().map(Job::Workloads));
    // Unordered, so that a slow LIST holds back no other: `buffered` counts
    // the finished LISTs that wait for an earlier one against the limit.
    let mut parts = futures::stream::iter(jobs.enumerate())
        .map(|(order, job)| async move { Ok::<_, AuditError>((order, run(scope, job).await?)) })
        .buffer_unordered(settings.concurrency.max(1));
    let mut merged = InOrder::new(Tally::new(settings, previous));
    while let Some(part) = parts.next().await {
        let (order, tally) = part?;
        merged.add(order, tally);
    }
    Ok(merged.tally.finish(started.elapsed()))
}

/// The tallies of a round's LISTs merged in the order of the LISTs, each one
/// as soon as every earlier one is in; those that finished early wait here.
struct InOrder<'r> {
    tally: Tally<'r>,
    next: usize,
    early: BTreeMap<usize, Tally<'r>>,
}

impl<'r> InOrder<'r> {
    fn new(tally: Tally<'r>) -> Self {
        Self {
            tally,
            next: 0,
            early: BTreeMap::new(),
        }
    }

    fn add(&mut self, order: usize, part: Tally<'r>) {
        self.early.insert(order, part);
        while let Some(part) = self.early.remove(&self.next) {
            self.tally.absorb(part);
            self.next += 1;
        }
    }
}

/// One LIST, every page of it, judged into a tally of its own.
async fn run<'r>(scope: Scope<'r>, job: Job) -> Result<Tally<'r>, AuditError> {
    let mut tally = Tally::new(scope.settings, scope.previous);
    match job {
        Job::Pods(query) => audit_pods(scope, &query, &mut tally).await?,
        Job::Workloads(kind) => audit_workloads(scope, kind, &mut tally).await?,
    }
    Ok(tally)
}

/// The Pods `query` selects, a page at a time.
async fn audit_pods(
    scope: Scope<'_>,
    query: &PodQuery,
    tally: &mut Tally<'_>,
) -> Result<(), AuditError> {
    let mut token: Option<String> = None;
    loop {
        let start = PageStart::of(token.as_deref(), scope.fresh.get().map(String::as_str));
        let page = scope
            .lister
            .page(query, scope.settings.page_size, start)
            .await
            .map_err(|source| AuditError::ListPods {
                query: query.to_string(),
                source,
            })?;
        if let Some(version) = page.resource_version.clone() {
            // The first answer of the round sets it; later ones are no older.
            let _ = scope.fresh.set(version);
        }
        // The view is a lock guard: taken per page, never held across a LIST.
        let view = scope.index.placement();
        for pod in &page.pods {
            tally.judge(pod, &view, scope.policy);
        }
        drop(view);
        token = page.continue_token;
        if token.is_none() {
            return Ok(());
        }
    }
}

/// The workloads of `kind` in the bound namespaces, and those whose template
/// carries the pool label: LISTed once across namespaces, a page at a time.
async fn audit_workloads(
    scope: Scope<'_>,
    kind: WorkloadKind,
    tally: &mut Tally<'_>,
) -> Result<(), AuditError> {
    let pool_label = scope.index.pool_label();
    let mut token: Option<String> = None;
    loop {
        let page = scope
            .lister
            .workloads(kind, scope.settings.page_size, token.as_deref())
            .await
            .map_err(|source| AuditError::ListPods {
                query: format!("the {kind}s of every namespace"),
                source,
            })?;
        let view = scope.index.placement();
        for workload in &page.workloads {
            let placed = scope.bound.contains(workload.namespace.as_str())
                || workload.template.labels.contains_key(pool_label);
            if placed {
                tally.judge_workload(workload, &view, scope.policy);
            }
        }
        drop(view);
        token = page.continue_token;
        if token.is_none() {
            return Ok(());
        }
    }
}
