//! The pure core: a round's violations as OpenReports `Report` objects, one
//! per namespace, and the writes that bring the stored ones in step.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use poolkeeper_bus::{AuditCount, AuditViolation, Mode, REPORT_RESULTS_PER_NAMESPACE};
use serde_json::{Value, json};

/// Every Report poolkeeper writes has this name, in the namespace it is about.
pub const REPORT_NAME: &str = "poolkeeper-placement";
/// The `policy` of every result.
pub const POLICY: &str = "poolkeeper-placement";
/// The `source` of the reports and their results.
pub const SOURCE: &str = "poolkeeper";
/// What tells poolkeeper's reports from others' (a LIST at term start).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "poolkeeper");
/// The hash of a report's content, so that a new leader knows what is
/// stored without comparing whole objects.
pub const CONTENT_HASH: &str = "poolkeeper.io/content-hash";

/// One namespace's report as poolkeeper would write it.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub object: Value,
    pub hash: String,
}

/// A write that brings a namespace's stored report in step.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Apply { namespace: String, desired: Desired },
    Delete { namespace: String },
}

impl Write {
    pub fn namespace(&self) -> &str {
        match self {
            Write::Apply { namespace, .. } | Write::Delete { namespace } => namespace,
        }
    }
}

/// `fail` where the binding enforces, `warn` where it only warns or counts.
pub fn result_of(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "fail",
        Mode::Warn | Mode::Dryrun => "warn",
    }
}

/// The report of every namespace with violations. `counts` has every
/// violation, `results` those kept in detail (at most
/// [`REPORT_RESULTS_PER_NAMESPACE`] a namespace): the summary counts all of
/// them. A namespace without violations gets no report: the audit never
/// reads the Pods that pass (the API server leaves them out of its LISTs),
/// so it could not count them.
pub fn desired_reports(
    counts: &[AuditCount],
    results: &[AuditViolation],
) -> BTreeMap<String, Desired> {
    let mut by_namespace: BTreeMap<&str, Vec<&AuditViolation>> = BTreeMap::new();
    for violation in results {
        by_namespace
            .entry(violation.namespace.as_str())
            .or_default()
            .push(violation);
    }
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    for count in counts {
        *totals.entry(count.namespace.as_str()).or_default() += count.pods;
    }
    by_namespace
        .into_iter()
        .map(|(namespace, mut violations)| {
            violations.sort_by(|a, b| {
                (a.kind, &a.name, a.reason, &a.uid).cmp(&(b.kind, &b.name, b.reason, &b.uid))
            });
            let total = totals
                .get(namespace)
                .copied()
                .unwrap_or(violations.len())
                .max(violations.len());
            let desired = report(namespace, &violations, total);
            (namespace.to_owned(), desired)
        })
        .collect()
}

/// One namespace's report; every violation of a namespace has the mode of
/// its binding (or of `placement.defaultMode` where its Pods' labels bind
/// them), so the summary's `fail`/`warn` split follows the first one.
fn report(namespace: &str, violations: &[&AuditViolation], total: usize) -> Desired {
    let outcome = violations.first().map_or("fail", |v| result_of(v.mode));
    let mut summary = json!({"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0});
    summary[outcome] = json!(total);
    let results: Vec<Value> = violations.iter().map(|v| result(v)).collect();
    let content = json!({
        "source": SOURCE,
        "summary": summary,
        "configuration": {"limits": {"maxResults": REPORT_RESULTS_PER_NAMESPACE}},
        "results": results,
    });
    let hash = content_hash(&content);
    let mut object = json!({
        "apiVersion": "openreports.io/v1alpha1",
        "kind": "Report",
        "metadata": {
            "name": REPORT_NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": {CONTENT_HASH: hash},
        },
    });
    if let (Some(object), Value::Object(content)) = (object.as_object_mut(), content) {
        object.extend(content);
    }
    Desired { object, hash }
}

fn result(violation: &AuditViolation) -> Value {
    let mut properties = json!({"pool": violation.pool, "mode": violation.mode.as_str()});
    if let Some(node) = &violation.node {
        properties["node"] = json!(node);
    }
    json!({
        "policy": POLICY,
        "rule": violation.reason,
        "result": result_of(violation.mode),
        "message": violation.message,
        "source": SOURCE,
        "category": "placement",
        "properties": properties,
        "resources": [{
            "apiVersion": violation.api_version,
            "kind": violation.kind,
            "namespace": violation.namespace,
            "name": violation.name,
            "uid": violation.uid,
        }],
    })
}

/// FNV-1a of the content's JSON text: the same in every build, unlike
/// std's `DefaultHasher`.
fn content_hash(content: &Value) -> String {
    struct Fnv1a(u64);
    impl Hasher for Fnv1a {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for byte in bytes {
                self.0 ^= u64::from(*byte);
                self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    let mut hasher = Fnv1a(0xcbf2_9ce4_8422_2325);
    content.to_string().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// The writes from the stored reports (`stored`: namespace → content hash)
/// to `desired`: an apply where a report is missing or differs, a delete
/// where a namespace no longer has violations. Nothing when in step.
pub fn plan(stored: &BTreeMap<String, String>, desired: &BTreeMap<String, Desired>) -> Vec<Write> {
    let applies = desired
        .iter()
        .filter(|(namespace, report)| stored.get(*namespace) != Some(&report.hash))
        .map(|(namespace, report)| Write::Apply {
            namespace: namespace.clone(),
            desired: report.clone(),
        });
    let deletes = stored
        .keys()
        .filter(|namespace| !desired.contains_key(*namespace))
        .map(|namespace| Write::Delete {
            namespace: namespace.clone(),
        });
    applies.chain(deletes).collect()
}
