//! One audit round: every Pod of the bound namespaces and every Pod with
//! the pool label, read a page at a time and judged against the index as
//! it is now by [`poolkeeper_placement::audit`]. Nothing of a Pod is kept
//! beyond its page but the violations to report.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use poolkeeper_bus::{AuditCount, AuditViolation, Event};
use poolkeeper_index::{Index, PlacementView};
use poolkeeper_placement::{Mode, PlacementPolicy, PodPlacement, Reason, audit};
use tokio::time::Instant;

use crate::error::AuditError;
use crate::lister::{PodLister, PodQuery};
use crate::settings::AuditSettings;

/// A violation with what its Warning Event needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub violation: AuditViolation,
    /// `metadata.uid`, so that `kubectl describe pod` finds the Event.
    pub uid: String,
    /// The binding's mode (violations count in every mode).
    pub mode: Mode,
}

impl Finding {
    /// What identifies this Pod and reason across rounds.
    pub fn key(&self) -> ReportKey {
        ReportKey::new(
            &self.uid,
            &self.violation.namespace,
            &self.violation.pod,
            self.violation.reason,
        )
    }
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
    /// Pods judged.
    pub pods: usize,
    pub duration: Duration,
    /// Every violation, counted by namespace, pool and reason (sorted).
    pub counts: Vec<AuditCount>,
    /// The first `max_reported` violations, in LIST order.
    pub findings: Vec<Finding>,
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
            violations: self
                .findings
                .iter()
                .map(|finding| finding.violation.clone())
                .collect(),
            truncated: self.truncated,
        }
    }
}

/// Counts and findings as Pods are judged.
struct Tally<'r> {
    max_reported: usize,
    previous: &'r HashSet<ReportKey>,
    pods: usize,
    counts: BTreeMap<(String, String, &'static str), usize>,
    findings: Vec<Finding>,
    truncated: bool,
    still_reported: HashSet<ReportKey>,
}

impl<'r> Tally<'r> {
    fn new(max_reported: usize, previous: &'r HashSet<ReportKey>) -> Self {
        Self {
            max_reported,
            previous,
            pods: 0,
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
        let pool = decision.pool.unwrap_or_default();
        let reason = decision.reason.as_str();
        *self
            .counts
            .entry((pod.namespace.clone(), pool.clone(), reason))
            .or_default() += 1;
        let key = ReportKey::new(&pod.uid, &pod.namespace, &pod.name, reason);
        if self.previous.contains(&key) {
            self.still_reported.insert(key);
        }
        if self.findings.len() >= self.max_reported {
            self.truncated = true;
            return;
        }
        self.findings.push(Finding {
            violation: AuditViolation {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                pool,
                reason,
                node: pod.node_name().map(str::to_owned),
                message: decision.message.unwrap_or_default(),
            },
            uid: pod.uid.clone(),
            mode: decision.mode,
        });
    }

    fn finish(self, duration: Duration) -> Round {
        Round {
            pods: self.pods,
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
            truncated: self.truncated,
            still_reported: self.still_reported,
        }
    }
}

/// The LISTs of one round: each bound namespace, then the labelled Pods
/// of every other namespace.
pub fn queries(policy: &PlacementPolicy, pool_label: &str) -> Vec<PodQuery> {
    policy
        .bindings()
        .map(|(namespace, _)| PodQuery::Namespace(namespace.to_owned()))
        .chain([PodQuery::Labelled {
            pool_label: pool_label.to_owned(),
        }])
        .collect()
}

/// Runs one round. `previous` holds the keys reported so far; the round
/// says which of them are still violations. A failed LIST or an invalid
/// policy fails the round.
pub async fn audit_round(
    lister: &dyn PodLister,
    index: &Index,
    settings: &AuditSettings,
    previous: &HashSet<ReportKey>,
) -> Result<Round, AuditError> {
    let started = Instant::now();
    let policy =
        PlacementPolicy::load(&index.placement(), &settings.policy).map_err(AuditError::Policy)?;
    let bound: BTreeSet<&str> = policy.bindings().map(|(namespace, _)| namespace).collect();
    let mut tally = Tally::new(settings.max_reported, previous);
    for query in queries(&policy, index.pool_label()) {
        let mut token: Option<String> = None;
        loop {
            let page = lister
                .page(&query, settings.page_size, token.as_deref())
                .await
                .map_err(|source| AuditError::ListPods {
                    query: query.to_string(),
                    source,
                })?;
            // Pods of bound namespaces were judged by their namespace's LIST.
            let labelled = matches!(query, PodQuery::Labelled { .. });
            let view = index.placement();
            for pod in &page.pods {
                if !(labelled && bound.contains(pod.namespace.as_str())) {
                    tally.judge(pod, &view, &policy);
                }
            }
            drop(view);
            token = page.continue_token;
            if token.is_none() {
                break;
            }
        }
    }
    Ok(tally.finish(started.elapsed()))
}

/// The Warning Event reason (PascalCase) of a violation reason.
pub fn event_reason(reason: &str) -> &'static str {
    match reason {
        r if r == Reason::OutsidePool.as_str() => "OutsidePool",
        r if r == Reason::NoMatchingNode.as_str() => "NoMatchingNode",
        r if r == Reason::MissingEdgeTolerations.as_str() => "MissingEdgeTolerations",
        _ => "PlacementViolation",
    }
}
