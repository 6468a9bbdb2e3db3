//! The evaluation errors the API server counted for poolkeeper's own
//! admission objects, read from its `/metrics` text (pure).
//!
//! A MutatingAdmissionPolicy has no status, and neither kind of policy
//! reports an expression that fails while evaluating an object: the API
//! server only counts it (`k8s.io/apiserver`,
//! `pkg/admission/plugin/policy/{mutating,validating}/metrics`, and
//! `pkg/admission/metrics` for match conditions):
//!
//! - `apiserver_mutating_admission_policy_check_total{policy,policy_binding,error_type}`:
//!   incremented for every mutation evaluated; `error_type` is `no_error`
//!   unless the mutation failed (`compile_error`, `out_of_budget`,
//!   `invalid_error` for any other failure, a runtime error included).
//! - `apiserver_validating_admission_policy_check_total{policy,policy_binding,error_type,enforcement_action}`:
//!   incremented for every validation that did not admit. An ordinary
//!   denial, warning or audit is counted as `invalid_error` too (the API
//!   server calls every decision but an admit one an error), so for a
//!   validating policy only `compile_error` and `out_of_budget`, and any
//!   error admitted by `failurePolicy: Ignore` (`enforcement_action="allow"`),
//!   are errors for certain; a runtime error under `failurePolicy: Fail`
//!   cannot be told from a denial there.
//! - `apiserver_admission_match_condition_evaluation_errors_total{name,kind,type,operation}`:
//!   a match condition that failed to evaluate, of a policy
//!   (`kind="policy"`, `name` the policy) or of a webhook (`kind="webhook"`,
//!   `name` the webhook entry, `type` `admit` for mutating, `validate`
//!   for validating) — poolkeeper's webhooks' `poolkeeper.io/*` conditions included.

use std::collections::BTreeMap;

use crate::policies::MUTATING_POLICY;

const MUTATING_CHECKS: &str = "apiserver_mutating_admission_policy_check_total";
const VALIDATING_CHECKS: &str = "apiserver_validating_admission_policy_check_total";
const MATCH_CONDITION_ERRORS: &str = "apiserver_admission_match_condition_evaluation_errors_total";
/// Every entry of poolkeeper's webhook configurations is named `<what>.poolkeeper.io`.
const WEBHOOK_SUFFIX: &str = ".poolkeeper.io";
/// The `error_type` given to a match condition that failed to evaluate.
pub const MATCH_CONDITION_ERROR: &str = "match_condition_error";

/// The objects whose errors are read: poolkeeper's policies and the
/// webhook configurations.
#[derive(Clone, Debug)]
pub struct Watched {
    pub validating_policies: Vec<String>,
    /// The name of both webhook configurations.
    pub configuration: String,
}

/// An object and the kind of error the API server counted for it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorSource {
    /// `MutatingAdmissionPolicy`, `ValidatingAdmissionPolicy`,
    /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
    pub kind: &'static str,
    pub name: String,
    /// The API server's `error_type`, or [`MATCH_CONDITION_ERROR`].
    pub error_type: String,
}

/// The evaluation errors counted in `text` (the API server's `/metrics`)
/// for the `watched` objects, summed over bindings, actions and operations.
/// Lines that are not samples of the three counters are skipped.
pub fn evaluation_errors(text: &str, watched: &Watched) -> BTreeMap<ErrorSource, f64> {
    let mut errors = BTreeMap::new();
    for line in text.lines() {
        let Some(Sample {
            name,
            labels,
            value,
        }) = sample(line)
        else {
            continue;
        };
        let label = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| *k == key)
                .map_or("", |(_, v)| v.as_str())
        };
        let source = match name {
            MUTATING_CHECKS => policy_error(
                "MutatingAdmissionPolicy",
                label("policy"),
                label("error_type"),
                watched,
            ),
            VALIDATING_CHECKS => {
                let error_type = label("error_type");
                let certain = matches!(error_type, "compile_error" | "out_of_budget")
                    || (error_type != "no_error" && label("enforcement_action") == "allow");
                policy_error(
                    "ValidatingAdmissionPolicy",
                    label("policy"),
                    error_type,
                    watched,
                )
                .filter(|_| certain)
            }
            MATCH_CONDITION_ERRORS => match_condition_error(label, watched),
            _ => None,
        };
        if let Some(source) = source {
            *errors.entry(source).or_insert(0.0) += value;
        }
    }
    errors
}

fn policy_error(
    kind: &'static str,
    policy: &str,
    error_type: &str,
    watched: &Watched,
) -> Option<ErrorSource> {
    let ours = if kind == "MutatingAdmissionPolicy" {
        policy == MUTATING_POLICY
    } else {
        watched
            .validating_policies
            .iter()
            .any(|name| name == policy)
    };
    (ours && !error_type.is_empty() && error_type != "no_error").then(|| ErrorSource {
        kind,
        name: policy.to_owned(),
        error_type: error_type.to_owned(),
    })
}

fn match_condition_error<'a>(
    label: impl Fn(&str) -> &'a str,
    watched: &Watched,
) -> Option<ErrorSource> {
    let name = label("name");
    let (kind, name) = match label("kind") {
        "policy" if name == MUTATING_POLICY => ("MutatingAdmissionPolicy", name.to_owned()),
        "policy" if watched.validating_policies.iter().any(|p| p == name) => {
            ("ValidatingAdmissionPolicy", name.to_owned())
        }
        "webhook" if name.ends_with(WEBHOOK_SUFFIX) => {
            let kind = match label("type") {
                "admit" => "MutatingWebhookConfiguration",
                "validate" => "ValidatingWebhookConfiguration",
                _ => return None,
            };
            (kind, watched.configuration.clone())
        }
        _ => return None,
    };
    Some(ErrorSource {
        kind,
        name,
        error_type: MATCH_CONDITION_ERROR.to_owned(),
    })
}

/// One sample line of the Prometheus text format.
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    /// Values unescaped.
    labels: Vec<(&'a str, String)>,
    value: f64,
}

/// The sample `line` holds; `None` for comments, blank lines and anything
/// malformed.
fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(inner)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    value.is_finite().then_some(Sample {
        name,
        labels,
        value,
    })
}

/// The labels up to the closing `}`, and what follows it.
fn label_set(mut text: &str) -> Option<(Vec<(&str, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = text.split_once('=')?;
        let mut chars = after.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim(), value));
        text = &after[1 + end + 1..];
    }
}

/// How many reads in a row must see no new error before a reported one
/// clears (with reads every 30 s: five minutes).
pub const QUIET_READS: u32 = 10;
/// How many API server processes' counters are kept (several API servers,
/// and each restart is a new process).
const MAX_SERVERS: usize = 8;

/// The API server process that wrote `text`: its `process_start_time_seconds`
/// (every API server, and every restart of one, counts on its own).
pub fn server_of(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let sample = sample(line)?;
        (sample.name == "process_start_time_seconds").then(|| sample.value.to_string())
    })
}

/// Compares each read of the counters with the last read of the same API
/// server process. The first read of a process is its baseline: what it
/// counted before (under an earlier leader, or before this term's policies
/// were written) is not this term's to report, nor are the errors a
/// restarted process counted before its first read.
#[derive(Debug, Default)]
pub struct ErrorTracker {
    /// By server process: the read number it was last seen at, its counters.
    last: BTreeMap<String, (u64, BTreeMap<ErrorSource, f64>)>,
    reads: u64,
    problem: Option<String>,
    quiet_reads: u32,
}

impl ErrorTracker {
    /// The errors `server` (see [`server_of`]) counted since it was last
    /// read, by source. A counter that went down without a restart (its
    /// `/metrics` reset by hand) starts again from there.
    pub fn observe(
        &mut self,
        server: Option<String>,
        counts: BTreeMap<ErrorSource, f64>,
    ) -> Vec<(ErrorSource, u64)> {
        self.reads += 1;
        let server = server.unwrap_or_default();
        let new: Vec<(ErrorSource, u64)> = match self.last.get(&server) {
            None => Vec::new(),
            Some((_, last)) => counts
                .iter()
                .filter_map(|(source, &now)| {
                    let before = last.get(source).copied().unwrap_or(0.0);
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let increase = (now - before).max(0.0).round() as u64;
                    (increase > 0).then(|| (source.clone(), increase))
                })
                .collect(),
        };
        self.last.insert(server, (self.reads, counts));
        if self.last.len() > MAX_SERVERS
            && let Some(oldest) = self
                .last
                .iter()
                .min_by_key(|(_, (seen, _))| *seen)
                .map(|(server, _)| server.clone())
        {
            self.last.remove(&oldest);
        }
        if new.is_empty() {
            self.quiet_reads = self.quiet_reads.saturating_add(1);
            if self.quiet_reads >= QUIET_READS {
                self.problem = None;
            }
        } else {
            self.quiet_reads = 0;
            self.problem = Some(
                new.iter()
                    .map(|(source, count)| describe(source, *count))
                    .collect::<Vec<_>>()
                    .join("; "),
            );
        }
        new
    }

    /// The errors of the last read that found any, until [`QUIET_READS`]
    /// reads in a row found none.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }
}

/// The text of `count` new errors of `source`, for the report and the Event.
pub fn describe(source: &ErrorSource, count: u64) -> String {
    let errors = if count == 1 { "error" } else { "errors" };
    format!(
        "{} {}: {count} evaluation {errors} ({}) counted by the API server",
        source.kind, source.name, source.error_type
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched() -> Watched {
        Watched {
            validating_policies: vec![
                "poolkeeper-placement-enforce".to_owned(),
                "poolkeeper-placement-warnings".to_owned(),
            ],
            configuration: "poolkeeper".to_owned(),
        }
    }

    fn source(kind: &'static str, name: &str, error_type: &str) -> ErrorSource {
        ErrorSource {
            kind,
            name: name.to_owned(),
            error_type: error_type.to_owned(),
        }
    }

    /// As kube-apiserver 1.36 writes them (labels sorted, HELP and TYPE lines).
    const EXPOSITION: &str = r#"# HELP apiserver_mutating_admission_policy_check_total [ALPHA] Mutation admission policy check total, labeled by policy and further identified by binding.
# TYPE apiserver_mutating_admission_policy_check_total counter
apiserver_mutating_admission_policy_check_total{error_type="invalid_error",policy="poolkeeper-placement",policy_binding="poolkeeper-placement"} 3
apiserver_mutating_admission_policy_check_total{error_type="no_error",policy="poolkeeper-placement",policy_binding="poolkeeper-placement"} 41
apiserver_mutating_admission_policy_check_total{error_type="invalid_error",policy="someone-else",policy_binding="someone-else"} 7
# HELP apiserver_mutating_admission_policy_check_duration_seconds [ALPHA] Mutation admission latency.
# TYPE apiserver_mutating_admission_policy_check_duration_seconds histogram
apiserver_mutating_admission_policy_check_duration_seconds_bucket{error_type="invalid_error",policy="poolkeeper-placement",policy_binding="poolkeeper-placement",le="0.001"} 3
apiserver_mutating_admission_policy_check_duration_seconds_count{error_type="invalid_error",policy="poolkeeper-placement",policy_binding="poolkeeper-placement"} 3
# TYPE apiserver_validating_admission_policy_check_total counter
apiserver_validating_admission_policy_check_total{enforcement_action="deny",error_type="invalid_error",policy="poolkeeper-placement-enforce",policy_binding="poolkeeper-placement-enforce"} 12
apiserver_validating_admission_policy_check_total{enforcement_action="deny",error_type="out_of_budget",policy="poolkeeper-placement-enforce",policy_binding="poolkeeper-placement-enforce"} 1
apiserver_validating_admission_policy_check_total{enforcement_action="allow",error_type="invalid_error",policy="poolkeeper-placement-warnings",policy_binding="poolkeeper-placement-warnings"} 2
apiserver_validating_admission_policy_check_total{enforcement_action="warn",error_type="invalid_error",policy="poolkeeper-placement-warnings",policy_binding="poolkeeper-placement-warnings"} 5
apiserver_validating_admission_policy_check_total{enforcement_action="audit",error_type="compile_error",policy="poolkeeper-placement-warnings",policy_binding="poolkeeper-placement-warnings"} 4
apiserver_validating_admission_policy_check_total{enforcement_action="warn",error_type="compile_error",policy="poolkeeper-placement-warnings",policy_binding="poolkeeper-placement-warnings"} 4
# TYPE apiserver_admission_match_condition_evaluation_errors_total counter
apiserver_admission_match_condition_evaluation_errors_total{kind="webhook",name="mutate-pods.poolkeeper.io",operation="CREATE",type="admit"} 2
apiserver_admission_match_condition_evaluation_errors_total{kind="webhook",name="mutate-labelled-pods.poolkeeper.io",operation="UPDATE",type="admit"} 1
apiserver_admission_match_condition_evaluation_errors_total{kind="webhook",name="validate-pods.poolkeeper.io",operation="CREATE",type="validate"} 6
apiserver_admission_match_condition_evaluation_errors_total{kind="webhook",name="other.example.com",operation="CREATE",type="admit"} 9
apiserver_admission_match_condition_evaluation_errors_total{kind="policy",name="poolkeeper-placement",operation="CREATE",type="validate"} 1
apiserver_admission_match_condition_evaluation_errors_total{kind="policy",name="someone-else",operation="CREATE",type="validate"} 1
apiserver_admission_webhook_request_total{code="200",name="mutate-pods.poolkeeper.io",operation="CREATE",rejected="false",type="admit"} 100
"#;

    #[test]
    fn only_the_errors_of_poolkeepers_objects_are_read() {
        let errors = evaluation_errors(EXPOSITION, &watched());
        let expected: BTreeMap<ErrorSource, f64> = [
            (
                source(
                    "MutatingAdmissionPolicy",
                    "poolkeeper-placement",
                    "invalid_error",
                ),
                3.0,
            ),
            (
                source(
                    "MutatingAdmissionPolicy",
                    "poolkeeper-placement",
                    MATCH_CONDITION_ERROR,
                ),
                1.0,
            ),
            // A denial is `invalid_error` too: only the certain errors.
            (
                source(
                    "ValidatingAdmissionPolicy",
                    "poolkeeper-placement-enforce",
                    "out_of_budget",
                ),
                1.0,
            ),
            (
                source(
                    "ValidatingAdmissionPolicy",
                    "poolkeeper-placement-warnings",
                    "invalid_error",
                ),
                2.0,
            ),
            (
                source(
                    "ValidatingAdmissionPolicy",
                    "poolkeeper-placement-warnings",
                    "compile_error",
                ),
                8.0,
            ),
            (
                source(
                    "MutatingWebhookConfiguration",
                    "poolkeeper",
                    MATCH_CONDITION_ERROR,
                ),
                3.0,
            ),
            (
                source(
                    "ValidatingWebhookConfiguration",
                    "poolkeeper",
                    MATCH_CONDITION_ERROR,
                ),
                6.0,
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(errors, expected);
    }

    #[test]
    fn samples_are_parsed_or_skipped() {
        let parsed = |name, labels: &[(&'static str, &str)], value| {
            Some(Sample {
                name,
                labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
                value,
            })
        };
        let cases = [
            ("", None),
            ("# TYPE x counter", None),
            ("up 1", parsed("up", &[], 1.0)),
            (
                "x{a=\"1\",b=\"two\"} 2.5 1700000000000",
                parsed("x", &[("a", "1"), ("b", "two")], 2.5),
            ),
            (
                r#"x{a="q\"uote\\d",b="line\nbreak"} 1e+06"#,
                parsed("x", &[("a", "q\"uote\\d"), ("b", "line\nbreak")], 1e6),
            ),
            (
                r#"x{a="with } and , inside",} 3"#,
                parsed("x", &[("a", "with } and , inside")], 3.0),
            ),
            ("x{a=\"unterminated} 1", None),
            ("x{a=1} 1", None),
            ("x{a=\"1\"} NaN", None),
            ("x{a=\"1\"} many", None),
        ];
        for (line, expected) in cases {
            assert_eq!(sample(line), expected, "{line:?}");
        }
    }

    #[test]
    fn the_server_is_its_process_start_time() {
        let text = "# TYPE process_start_time_seconds gauge\n\
                    process_start_time_seconds 1.76502893812e+09\n\
                    process_cpu_seconds_total 12.5\n";
        assert_eq!(server_of(text).as_deref(), Some("1765028938.12"));
        assert_eq!(server_of(EXPOSITION), None);
    }

    #[test]
    fn increases_since_the_same_servers_last_read_are_reported_until_the_quiet_reads_pass() {
        let mutating = source(
            "MutatingAdmissionPolicy",
            "poolkeeper-placement",
            "invalid_error",
        );
        let counts = |n: f64| -> BTreeMap<ErrorSource, f64> {
            [(mutating.clone(), n)].into_iter().collect()
        };
        let a = || Some("1765028938.12".to_owned());
        let b = || Some("1765029000.5".to_owned());
        let mut tracker = ErrorTracker::default();
        // The baseline: errors counted before the term are not reported.
        assert_eq!(tracker.observe(a(), counts(5.0)), []);
        assert_eq!(tracker.problem(), None);
        assert_eq!(tracker.observe(a(), counts(5.0)), []);
        assert_eq!(tracker.observe(a(), counts(7.0)), [(mutating.clone(), 2)]);
        let problem = tracker.problem().unwrap().to_owned();
        assert_eq!(
            problem,
            "MutatingAdmissionPolicy poolkeeper-placement: 2 evaluation errors (invalid_error) \
             counted by the API server"
        );
        for _ in 1..QUIET_READS {
            assert_eq!(tracker.observe(a(), counts(7.0)), []);
            assert_eq!(tracker.problem(), Some(problem.as_str()));
        }
        assert_eq!(tracker.observe(a(), counts(7.0)), []);
        assert_eq!(tracker.problem(), None);
        // Another API server (or a restarted one): its own baseline, then
        // reads alternating between the two compare each with its own.
        assert_eq!(tracker.observe(b(), counts(1.0)), []);
        assert_eq!(tracker.observe(a(), counts(7.0)), []);
        assert_eq!(tracker.observe(b(), counts(2.0)), [(mutating.clone(), 1)]);
        assert_eq!(tracker.observe(a(), counts(7.0)), []);
        // Reset by hand: nothing new until it counts past where it was.
        assert_eq!(tracker.observe(a(), counts(0.0)), []);
        assert_eq!(tracker.observe(a(), counts(1.0)), [(mutating.clone(), 1)]);
        // A source seen for the first time after the baseline is all new.
        let mut grown = counts(1.0);
        let webhook = source(
            "ValidatingWebhookConfiguration",
            "poolkeeper",
            MATCH_CONDITION_ERROR,
        );
        grown.insert(webhook.clone(), 1.0);
        assert_eq!(tracker.observe(a(), grown), [(webhook, 1)]);
        assert!(
            tracker
                .problem()
                .unwrap()
                .starts_with("ValidatingWebhookConfiguration poolkeeper: 1 evaluation error ")
        );
    }

    #[test]
    fn only_the_servers_seen_last_are_kept() {
        let mut tracker = ErrorTracker::default();
        for server in 0..MAX_SERVERS + 3 {
            tracker.observe(Some(server.to_string()), BTreeMap::new());
        }
        assert_eq!(tracker.last.len(), MAX_SERVERS);
        assert!(!tracker.last.contains_key("0"));
        assert!(tracker.last.contains_key(&(MAX_SERVERS + 2).to_string()));
    }
}
