//! The oracle of leader safety, pure: the API server's audit log, read back. Every write by
//! poolkeeper's ServiceAccount is attributed to a replica through the Pod name a bound
//! ServiceAccount token carries (`user.extra["authentication.kubernetes.io/pod-name"]`), the
//! Lease's updates in the same log say which replica held it when, and every accepted write
//! outside its replica's term is reported with how far outside it was.
//!
//! A term of replica P begins with the Lease write that names P the holder and ends with the
//! next Lease write that names another holder or none (a takeover or P's release). A write by
//! P is inside when the API server received it within one of P's terms; a write received up to
//! `grace` after P's term ended is the in-flight write of the term's last pass. A write the
//! API server refused (4xx/5xx: a failed `test`, a conflict) changed nothing and is counted
//! apart: it is what fencing is for.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Microseconds since the Unix epoch: the audit log's timestamps are microsecond precise.
pub type Micros = i64;

const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
const WRITE_VERBS: [&str; 4] = ["create", "update", "patch", "delete"];

/// One audited request, as far as the oracle goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub received: Micros,
    pub verb: String,
    pub username: String,
    /// The Pod the token was bound to; `None` for other credentials.
    pub pod: Option<String>,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    /// For a Lease write logged at `Request` level: the holder it writes (`Some("")` when it
    /// releases the Lease).
    pub lease_holder: Option<String>,
}

impl Request {
    fn accepted(&self) -> bool {
        (200..300).contains(&self.code)
    }

    fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb.as_str())
    }

    fn object(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.resource, self.name)
        } else {
            format!("{}/{}/{}", self.resource, self.namespace, self.name)
        }
    }
}

/// One line of the audit log (JSON, `audit.k8s.io/v1` `Event`): `Ok(None)` for the stages
/// other than `ResponseComplete`, an error naming the field for a line that is not an event.
pub fn parse_line(line: &str) -> Result<Option<Request>, String> {
    let event: Value =
        serde_json::from_str(line).map_err(|e| format!("not a JSON audit event: {e}"))?;
    if event["stage"].as_str() != Some("ResponseComplete") {
        return Ok(None);
    }
    let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    let received = text("/requestReceivedTimestamp");
    let received =
        parse_time(received).map_err(|e| format!("requestReceivedTimestamp {received:?}: {e}"))?;
    let code = event
        .pointer("/responseStatus/code")
        .and_then(Value::as_u64)
        .and_then(|code| u16::try_from(code).ok())
        .ok_or("responseStatus.code is missing")?;
    let pod = event
        .pointer("/user/extra")
        .and_then(|extra| extra.get(POD_NAME))
        .and_then(|names| names.get(0))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let lease_holder = (text("/objectRef/resource") == "leases")
        .then(|| event.pointer("/requestObject/spec"))
        .flatten()
        .map(|spec| spec["holderIdentity"].as_str().unwrap_or("").to_owned());
    Ok(Some(Request {
        received,
        verb: text("/verb").to_owned(),
        username: text("/user/username").to_owned(),
        pod,
        resource: text("/objectRef/resource").to_owned(),
        namespace: text("/objectRef/namespace").to_owned(),
        name: text("/objectRef/name").to_owned(),
        code,
        lease_holder,
    }))
}

fn parse_time(text: &str) -> Result<Micros, String> {
    let at = OffsetDateTime::parse(text, &Rfc3339).map_err(|e| e.to_string())?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000).map_err(|e| e.to_string())
}

/// Which requests are poolkeeper's and which Lease is its election.
#[derive(Clone, Debug)]
pub struct Scope {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub username: String,
    pub lease_namespace: String,
    pub lease_name: String,
    /// How long after its term a replica's write still counts as the term's last in-flight
    /// write.
    pub grace: Micros,
}

/// One leadership term as the Lease's writes record it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub pod: String,
    pub start: Micros,
    /// `None`: still held at the end of the log.
    pub end: Option<Micros>,
}

/// An accepted write outside its replica's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outside {
    pub pod: String,
    pub verb: String,
    pub object: String,
    pub received: Micros,
    /// How long after the replica's last term ended (or before its next began) it came.
    pub overlap: Micros,
}

/// What the oracle found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub terms: Vec<Term>,
    /// Accepted writes by a replica, Lease writes not counted.
    pub writes: usize,
    /// Writes the API server refused.
    pub refused: usize,
    /// Accepted writes within `grace` after their replica's term.
    pub in_flight: usize,
    pub outside: Vec<Outside>,
    /// Writes by poolkeeper's ServiceAccount that name no Pod: they cannot be attributed.
    pub unattributed: usize,
}

impl Report {
    /// The largest distance of an accepted write from its replica's term.
    pub fn largest_overlap(&self) -> Micros {
        self.outside.iter().map(|o| o.overlap).max().unwrap_or(0)
    }

    pub fn passed(&self) -> bool {
        self.outside.is_empty() && self.unattributed == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} terms, {} accepted writes ({} in flight at a term's end), {} refused, {} outside \
             their replica's term (largest overlap {:.3} s), {} unattributed",
            self.terms.len(),
            self.writes,
            self.in_flight,
            self.refused,
            self.outside.len(),
            self.largest_overlap() as f64 / 1e6,
            self.unattributed
        )?;
        for outside in &self.outside {
            write!(
                f,
                "\n  {} {} {} by {}, {:.3} s outside its term",
                outside.received,
                outside.verb,
                outside.object,
                outside.pod,
                outside.overlap as f64 / 1e6
            )?;
        }
        Ok(())
    }
}

/// The Pod a Lease holder identity names: the binary appends `_<suffix>` to the Pod name.
fn holder_pod(identity: &str) -> &str {
    identity.rsplit_once('_').map_or(identity, |(pod, _)| pod)
}

/// The terms the Lease's accepted writes record, in the order of the log.
pub fn terms(requests: &[Request], scope: &Scope) -> Vec<Term> {
    let mut terms: Vec<Term> = Vec::new();
    for request in requests.iter().filter(|r| {
        r.resource == "leases"
            && r.namespace == scope.lease_namespace
            && r.name == scope.lease_name
            && r.is_write()
            && r.accepted()
    }) {
        let holder = request
            .lease_holder
            .as_deref()
            .map(holder_pod)
            .filter(|pod| !pod.is_empty());
        let current = terms
            .last()
            .filter(|t| t.end.is_none())
            .map(|t| t.pod.clone());
        if current.as_deref() == holder {
            continue;
        }
        if let Some(open) = terms.last_mut().filter(|t| t.end.is_none()) {
            open.end = Some(request.received);
        }
        if let Some(pod) = holder {
            terms.push(Term {
                pod: pod.to_owned(),
                start: request.received,
                end: None,
            });
        }
    }
    terms
}

/// Checks every write of poolkeeper's ServiceAccount against the terms in `requests` (the
/// audit log in order).
pub fn check(requests: &[Request], scope: &Scope) -> Report {
    let terms = terms(requests, scope);
    let mut by_pod: BTreeMap<&str, Vec<&Term>> = BTreeMap::new();
    for term in &terms {
        by_pod.entry(term.pod.as_str()).or_default().push(term);
    }
    let mut report = Report::default();
    for request in requests
        .iter()
        .filter(|r| r.username == scope.username && r.is_write() && r.resource != "leases")
    {
        let Some(pod) = request.pod.as_deref() else {
            report.unattributed += 1;
            continue;
        };
        if !request.accepted() {
            report.refused += 1;
            continue;
        }
        report.writes += 1;
        let own = by_pod.get(pod).map(Vec::as_slice).unwrap_or_default();
        match distance(own, request.received) {
            0 => {}
            late if late <= scope.grace && ended_before(own, request.received) => {
                report.in_flight += 1;
            }
            overlap => report.outside.push(Outside {
                pod: pod.to_owned(),
                verb: request.verb.clone(),
                object: request.object(),
                received: request.received,
                overlap,
            }),
        }
    }
    report.terms = terms;
    report
}

/// 0 when `at` lies within one of `terms`, else how far it is from the nearest (`Micros::MAX`
/// without any term).
fn distance(terms: &[&Term], at: Micros) -> Micros {
    terms
        .iter()
        .map(|term| {
            if at < term.start {
                term.start - at
            } else {
                term.end.map_or(0, |end| at.saturating_sub(end).max(0))
            }
        })
        .min()
        .unwrap_or(Micros::MAX)
}

/// Whether the nearest term to `at` ended before it (a late write, not an early one).
fn ended_before(terms: &[&Term], at: Micros) -> bool {
    terms
        .iter()
        .filter_map(|term| term.end)
        .any(|end| end <= at)
}

/// The audit log's lines, parsed; a line that is not an event is an error naming its number.
pub fn parse_log(text: &str) -> Result<Vec<Request>, String> {
    let mut requests = Vec::new();
    for (number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        if let Some(request) =
            parse_line(line).map_err(|e| format!("audit log line {}: {e}", number + 1))?
        {
            requests.push(request);
        }
    }
    requests.sort_by_key(|r| r.received);
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SA: &str = "system:serviceaccount:poolkeeper-system:poolkeeper";

    fn scope(grace: Micros) -> Scope {
        Scope {
            username: SA.to_owned(),
            lease_namespace: "poolkeeper-system".to_owned(),
            lease_name: "poolkeeper".to_owned(),
            grace,
        }
    }

    /// A Lease write by `pod` at second `at` that names `holder` ("" releases it).
    fn lease(at: i64, pod: &str, holder: &str, code: u16) -> Request {
        Request {
            received: at * 1_000_000,
            verb: "update".to_owned(),
            username: SA.to_owned(),
            pod: Some(pod.to_owned()),
            resource: "leases".to_owned(),
            namespace: "poolkeeper-system".to_owned(),
            name: "poolkeeper".to_owned(),
            code,
            lease_holder: Some(if holder.is_empty() {
                String::new()
            } else {
                format!("{holder}_0a1b2c3d")
            }),
        }
    }

    /// A finalizer patch by `pod` at millisecond `at_ms`.
    fn write(at_ms: i64, pod: &str, code: u16) -> Request {
        Request {
            received: at_ms * 1_000,
            verb: "patch".to_owned(),
            username: SA.to_owned(),
            pod: Some(pod.to_owned()),
            resource: "machineclasses".to_owned(),
            namespace: "machine-system".to_owned(),
            name: "small".to_owned(),
            code,
            lease_holder: None,
        }
    }

    #[test]
    fn terms_follow_the_holder() {
        let log = [
            lease(0, "a", "a", 200),
            lease(2, "a", "a", 200),
            lease(3, "b", "b", 409),
            lease(20, "b", "b", 200),
            lease(22, "b", "", 200),
            lease(23, "a", "a", 201),
        ];
        assert_eq!(
            terms(&log, &scope(0)),
            [
                Term {
                    pod: "a".into(),
                    start: 0,
                    end: Some(20_000_000)
                },
                Term {
                    pod: "b".into(),
                    start: 20_000_000,
                    end: Some(22_000_000)
                },
                Term {
                    pod: "a".into(),
                    start: 23_000_000,
                    end: None
                },
            ]
        );
    }

    /// (name, extra requests after the terms a [0, 20 s), b [20 s, ...), grace, outside
    /// overlaps in ms, in flight, refused).
    #[test]
    fn writes_are_checked_against_their_replicas_terms() {
        type Case = (&'static str, Vec<Request>, Micros, Vec<i64>, usize, usize);
        let cases: Vec<Case> = vec![
            (
                "inside the term",
                vec![write(5_000, "a", 200), write(21_000, "b", 200)],
                0,
                vec![],
                0,
                0,
            ),
            (
                "a deposed leader's late write",
                vec![write(30_000, "a", 200)],
                0,
                vec![10_000],
                0,
                0,
            ),
            (
                "the same, refused by its fence",
                vec![write(30_000, "a", 422)],
                0,
                vec![],
                0,
                1,
            ),
            (
                "a last pass's in-flight write",
                vec![write(20_300, "a", 200)],
                500_000,
                vec![],
                1,
                0,
            ),
            (
                "beyond the grace",
                vec![write(20_800, "a", 200)],
                500_000,
                vec![800],
                0,
                0,
            ),
            (
                "a follower before its term",
                vec![write(15_000, "b", 200)],
                500_000,
                vec![5_000],
                0,
                0,
            ),
            (
                "a replica that never led",
                vec![write(5_000, "c", 200)],
                0,
                vec![i64::MAX / 1_000],
                0,
                0,
            ),
        ];
        for (name, writes, grace, overlaps, in_flight, refused) in cases {
            let mut log = vec![lease(0, "a", "a", 200), lease(20, "b", "b", 200)];
            log.extend(writes);
            log.sort_by_key(|r| r.received);
            let report = check(&log, &scope(grace));
            let got: Vec<i64> = report.outside.iter().map(|o| o.overlap / 1_000).collect();
            assert_eq!(got, overlaps, "{name}: {report}");
            assert_eq!(report.in_flight, in_flight, "{name}");
            assert_eq!(report.refused, refused, "{name}");
            assert_eq!(report.passed(), overlaps.is_empty(), "{name}");
        }
    }

    #[test]
    fn the_report_names_the_largest_overlap() {
        let log = vec![
            lease(0, "a", "a", 200),
            lease(20, "b", "b", 200),
            write(21_000, "a", 200),
            write(24_500, "a", 200),
        ];
        let report = check(&log, &scope(0));
        assert_eq!(report.largest_overlap(), 4_500_000);
        let text = report.to_string();
        assert!(text.contains("largest overlap 4.500 s"), "{text}");
        assert!(
            text.contains("machineclasses/machine-system/small by a"),
            "{text}"
        );
    }

    #[test]
    fn writes_without_a_pod_are_unattributed() {
        let mut anonymous = write(5_000, "a", 200);
        anonymous.pod = None;
        let report = check(&[lease(0, "a", "a", 200), anonymous], &scope(0));
        assert_eq!(report.unattributed, 1);
        assert!(!report.passed());
    }

    #[test]
    fn audit_lines_parse() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"x","stage":"ResponseComplete","requestURI":"/apis/coordination.k8s.io/v1/namespaces/poolkeeper-system/leases/poolkeeper","verb":"update","user":{"username":"system:serviceaccount:poolkeeper-system:poolkeeper","extra":{"authentication.kubernetes.io/pod-name":["poolkeeper-7d9-abc"]}},"objectRef":{"resource":"leases","namespace":"poolkeeper-system","name":"poolkeeper","apiGroup":"coordination.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestObject":{"spec":{"holderIdentity":"poolkeeper-7d9-abc_0a1b2c3d","leaseTransitions":4}},"requestReceivedTimestamp":"2026-12-06T09:51:14.123456Z","stageTimestamp":"2026-12-06T09:51:14.130000Z"}"#;
        let request = parse_line(line).unwrap().unwrap();
        assert_eq!(request.pod.as_deref(), Some("poolkeeper-7d9-abc"));
        assert_eq!(request.code, 200);
        assert_eq!(request.received % 1_000_000, 123_456);
        assert_eq!(
            request.lease_holder.as_deref(),
            Some("poolkeeper-7d9-abc_0a1b2c3d")
        );
        assert_eq!(
            holder_pod("poolkeeper-7d9-abc_0a1b2c3d"),
            "poolkeeper-7d9-abc"
        );

        let started = line.replace("ResponseComplete", "RequestReceived");
        assert_eq!(parse_line(&started), Ok(None));
        let broken = line.replace("\"code\":200", "\"status\":200");
        assert_eq!(
            parse_line(&broken),
            Err("responseStatus.code is missing".to_owned())
        );
        assert!(
            parse_log("{}\nnot json")
                .unwrap_err()
                .starts_with("audit log line 2:")
        );
    }
}
