//! The chart's monitoring pack (PrometheusRule, Grafana dashboard) against what a running
//! poolkeeper exports. The metric names are written once, in the pack: every name the rules
//! and the dashboard read must be in a scrape of the replicas; `promtool check rules` accepts
//! the rules; `promtool test rules` fires each alert on series copied from the scrape (its
//! names and labels, plus the target labels Prometheus adds) and not on healthy values.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::chart::template;
use crate::support::{Cluster, NAMESPACE, root, run};

/// One sample's series: its name and labels.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
}

impl Series {
    /// `name{a="b",...}` as the exposition format and PromQL write it.
    fn parse(text: &str) -> Option<Series> {
        let (name, rest) = match text.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}')?),
            None => (text, ""),
        };
        let mut labels = BTreeMap::new();
        let mut rest = rest.trim_start_matches(',');
        while let Some((key, after)) = rest.split_once("=\"") {
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                match c {
                    '\\' => value.push(chars.next()?.1),
                    '"' => break i,
                    c => value.push(c),
                }
            };
            labels.insert(key.trim().to_owned(), value);
            rest = after[end + 1..].trim_start_matches(',');
        }
        Some(Series {
            name: name.trim().to_owned(),
            labels,
        })
    }

    fn matches(&self, selector: &Series) -> bool {
        self.name == selector.name
            && selector
                .labels
                .iter()
                .all(|(k, v)| self.labels.get(k) == Some(v))
    }

    fn promql(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }
}

/// What the replicas export: every sample's series, as Prometheus stores it (a scraped label
/// that clashes with a target label becomes `exported_<label>`), and every name a family
/// declares (a family without series yet, like the audit's violations, has only its
/// `# TYPE` line).
struct Scrape {
    series: Vec<Series>,
    names: BTreeSet<String>,
}

impl Scrape {
    fn of(cluster: &Cluster) -> Scrape {
        let pods = cluster.kubectl_ok(&[
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=poolkeeper",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}"#,
        ]);
        let mut scrape = Scrape {
            series: Vec::new(),
            names: BTreeSet::new(),
        };
        for line in pods.lines() {
            let (pod, ip) = line.split_once(' ').expect("name and IP");
            let text = cluster.curl(&format!("http://{ip}:8081/metrics"));
            scrape.add(pod, &text);
        }
        assert!(!scrape.series.is_empty(), "no replica exported a series");
        scrape
    }

    fn add(&mut self, pod: &str, text: &str) {
        let target = [
            ("namespace", NAMESPACE),
            ("pod", pod),
            ("job", "poolkeeper-metrics"),
        ];
        for line in text.lines() {
            if let Some(declaration) = line.strip_prefix("# TYPE ") {
                let mut parts = declaration.split_whitespace();
                let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                    continue;
                };
                let suffixes: &[&str] = match kind {
                    "counter" => &["_total"],
                    "histogram" => &["_bucket", "_sum", "_count"],
                    _ => &[""],
                };
                for suffix in suffixes {
                    self.names.insert(format!("{name}{suffix}"));
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, _value) = line.rsplit_once(' ').expect("a sample and its value");
            let mut series =
                Series::parse(series).unwrap_or_else(|| panic!("not a sample line: {line}"));
            for (key, value) in target {
                if let Some(clash) = series.labels.remove(key) {
                    series.labels.insert(format!("exported_{key}"), clash);
                }
                series.labels.insert(key.to_owned(), value.to_owned());
            }
            self.names.insert(series.name.clone());
            self.series.push(series);
        }
    }

    /// The scraped series `selector` picks (at least one).
    fn matching(&self, selector: &str) -> Vec<Series> {
        let selector = Series::parse(selector).expect("a selector");
        let found: Vec<Series> = self
            .series
            .iter()
            .filter(|s| s.matches(&selector))
            .cloned()
            .collect();
        assert!(
            !found.is_empty(),
            "poolkeeper exports no series {}",
            selector.promql()
        );
        found
    }
}

/// Every `poolkeeper_...` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("poolkeeper_") {
        let word: String = rest[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[start + word.len()..];
        names.insert(word);
    }
    names
}

/// The values a series takes in a test case (promtool's expanding notation, one sample per
/// 30 s for 90 minutes: longer than the longest `for`).
#[derive(Clone, Copy)]
enum Values {
    Constant(f64),
    /// A counter growing by this much per sample.
    Growing(f64),
    /// A histogram's buckets when every request takes this many seconds.
    Latency(f64),
}

impl Values {
    fn of(self, series: &Series) -> String {
        match self {
            Values::Constant(v) => format!("{v}x180"),
            Values::Growing(step) => format!("0+{step}x180"),
            Values::Latency(seconds) => {
                let le = series.labels.get("le").expect("a bucket's le");
                let bound: f64 = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("a bucket bound")
                };
                if bound >= seconds {
                    "0+60x180".to_owned()
                } else {
                    "0x180".to_owned()
                }
            }
        }
    }
}

/// An alert's test: the series it reads (selectors of scraped series, or a family without
/// series yet given labels of its own), their values when something is wrong and when all is
/// well, and the labels it fires with.
struct AlertCase {
    alert: &'static str,
    series: &'static [(&'static str, Values, Values)],
    labels: &'static [&'static str],
}

/// The audit's violations have series only once a round found a Pod outside its pool: the
/// test gives the family one, labelled as the audit labels them.
const VIOLATION: &str =
    r#"poolkeeper_audit_violations{namespace="shop",pool="edge",reason="node_outside_pool"}"#;

const ALERTS: [AlertCase; 8] = [
    AlertCase {
        alert: "PoolkeeperWebhookErrors",
        series: &[(
            r#"poolkeeper_webhook_admissions_total{webhook="validate",result="invalid"}"#,
            Values::Growing(30.0),
            Values::Constant(0.0),
        )],
        labels: &["namespace"],
    },
    AlertCase {
        alert: "PoolkeeperWebhookSlow",
        series: &[(
            r#"poolkeeper_webhook_admission_duration_seconds_bucket{webhook="mutate"}"#,
            Values::Latency(4.0),
            Values::Latency(0.005),
        )],
        labels: &["namespace", "webhook"],
    },
    AlertCase {
        alert: "PoolkeeperNoLeader",
        series: &[(
            "poolkeeper_leader_election_leading",
            Values::Constant(0.0),
            Values::Constant(1.0),
        )],
        labels: &["namespace"],
    },
    AlertCase {
        alert: "PoolkeeperComponentStalled",
        series: &[(
            "poolkeeper_component_stalled",
            Values::Constant(1.0),
            Values::Constant(0.0),
        )],
        labels: &["namespace", "pod", "component"],
    },
    AlertCase {
        alert: "PoolkeeperWatchFailing",
        series: &[(
            "poolkeeper_watch_failing",
            Values::Constant(1.0),
            Values::Constant(0.0),
        )],
        labels: &["namespace", "pod", "kind"],
    },
    AlertCase {
        alert: "PoolkeeperCertificateExpiringSoon",
        // promtool's clock starts at 0: an expiry 5 days after it, then one years after it.
        series: &[(
            r#"poolkeeper_certificate_expiry_timestamp_seconds{certificate="leaf"}"#,
            Values::Constant(432_000.0),
            Values::Constant(31_536_000.0),
        )],
        labels: &["namespace", "pod", "certificate"],
    },
    AlertCase {
        alert: "PoolkeeperFinalizerWritesFailing",
        series: &[(
            r#"poolkeeper_executor_api_writes_total{result="error"}"#,
            Values::Growing(1.0),
            Values::Constant(0.0),
        )],
        labels: &["namespace"],
    },
    AlertCase {
        alert: "PoolkeeperAuditViolations",
        series: &[(VIOLATION, Values::Constant(2.0), Values::Constant(0.0))],
        labels: &["namespace", "exported_namespace", "pool", "reason"],
    },
];

/// The series of one case: copies of the scraped ones, or the family's own for a family
/// without series yet (with the target labels of the first replica).
fn case_series(scrape: &Scrape, selector: &str) -> Vec<Series> {
    if selector != VIOLATION {
        return scrape.matching(selector);
    }
    let mut series = Series::parse(selector).unwrap();
    assert!(
        scrape.names.contains(&series.name),
        "poolkeeper declares no {}",
        series.name
    );
    let first = &scrape.series[0].labels;
    let clash = series.labels.remove("namespace").unwrap();
    series.labels.insert("exported_namespace".to_owned(), clash);
    for key in ["namespace", "pod", "job"] {
        series.labels.insert(key.to_owned(), first[key].clone());
    }
    vec![series]
}

fn yaml_string(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// promtool's test file: per alert, one test where it fires (after its `for`) and one where
/// it does not; and one where no replica exports the leader metric at all.
fn promtool_tests(scrape: &Scrape) -> String {
    let mut out = String::from("rule_files: [rules.yaml]\nevaluation_interval: 30s\ntests:\n");
    let mut test = |inputs: &[(Series, String)], alert: &str, fires: Option<String>| {
        out.push_str("  - interval: 30s\n");
        if inputs.is_empty() {
            out.push_str("    input_series: []\n");
        } else {
            out.push_str("    input_series:\n");
        }
        for (series, values) in inputs {
            out.push_str(&format!(
                "      - series: {}\n        values: {}\n",
                yaml_string(&series.promql()),
                yaml_string(values)
            ));
        }
        out.push_str(&format!(
            "    alert_rule_test:\n      - eval_time: 85m\n        alertname: {alert}\n"
        ));
        match fires {
            Some(labels) => out.push_str(&format!(
                "        exp_alerts:\n          - exp_labels: {labels}\n"
            )),
            None => out.push_str("        exp_alerts: []\n"),
        }
    };
    for case in &ALERTS {
        let mut bad = Vec::new();
        let mut good = Vec::new();
        for (selector, when_wrong, when_well) in case.series {
            let mut matched = case_series(scrape, selector);
            // An alert by Pod (and component, kind...) fires once per series: one series.
            if case.labels.contains(&"pod") {
                matched.truncate(1);
            }
            for series in matched {
                bad.push((series.clone(), when_wrong.of(&series)));
                good.push((series.clone(), when_well.of(&series)));
            }
        }
        let first = &bad[0].0;
        let mut labels: Vec<String> = case
            .labels
            .iter()
            .map(|key| {
                let value = first
                    .labels
                    .get(*key)
                    .unwrap_or_else(|| panic!("{}: the series has no label {key}", case.alert));
                format!("{key}: {}", yaml_string(value))
            })
            .collect();
        labels.push("severity: ".to_owned() + severity(case.alert));
        let labels = format!("{{{}}}", labels.join(", "));
        test(&bad, case.alert, Some(labels.clone()));
        test(&good, case.alert, None);
        if case.alert == "PoolkeeperNoLeader" {
            // Every replica gone: the series are absent, not 0.
            test(&[], case.alert, Some(labels));
        }
    }
    out
}

fn severity(alert: &str) -> &'static str {
    if alert == "PoolkeeperNoLeader" {
        "critical"
    } else {
        "warning"
    }
}

/// The rendered PrometheusRule's `spec`, as a rules file (`groups:` at the top).
fn rules_file(rendered: &str) -> String {
    let spec = rendered
        .split_once("\nspec:\n")
        .expect("the PrometheusRule's spec")
        .1;
    spec.lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The rules file without annotations: promtool compares an alert's annotations too, and
/// the test is about when each alert fires (`promtool check rules` checks their templates).
fn without_annotations(rules: &str) -> String {
    let mut kept = Vec::new();
    let mut skipping: Option<usize> = None;
    for line in rules.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(depth) = skipping {
            if indent > depth {
                continue;
            }
            skipping = None;
        }
        if line.trim() == "annotations:" {
            skipping = Some(indent);
            continue;
        }
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

fn promtool(args: &[&str], dir: &std::path::Path) {
    let promtool = std::env::var("POOLKEEPER_PROMTOOL").unwrap_or_else(|_| {
        panic!("POOLKEEPER_PROMTOOL is not set: `cargo xtask cluster test` builds promtool")
    });
    let out = run(Command::new(promtool).current_dir(dir).args(args));
    assert!(
        out.status.success(),
        "promtool {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pack checked against the running installation's replicas.
pub fn the_pack_reads_what_poolkeeper_exports(cluster: &Cluster) {
    let scrape = Scrape::of(cluster);
    let rendered = template(&[
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
    ]);
    let rules = rules_file(
        rendered
            .split("\n---\n")
            .find(|o| o.contains("kind: PrometheusRule"))
            .expect("a PrometheusRule"),
    );
    let dashboard =
        std::fs::read_to_string(root().join("deploy/chart/dashboards/poolkeeper.json")).unwrap();
    assert!(
        rendered.contains("\"title\": \"poolkeeper\""),
        "the dashboard's ConfigMap"
    );
    for (what, text) in [("the rules", &rules), ("the dashboard", &dashboard)] {
        let unknown: Vec<String> = metric_names(text)
            .difference(&scrape.names)
            .cloned()
            .collect();
        assert!(
            unknown.is_empty(),
            "{what} read metrics poolkeeper does not export: {unknown:?}"
        );
    }
    let alerts: BTreeSet<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    let tested: BTreeSet<&str> = ALERTS.iter().map(|c| c.alert).collect();
    assert_eq!(alerts, tested, "every alert has a test case");

    let dir = std::env::temp_dir().join(format!("monitoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("shipped.yaml"), &rules).unwrap();
    std::fs::write(dir.join("rules.yaml"), without_annotations(&rules)).unwrap();
    std::fs::write(dir.join("tests.yaml"), promtool_tests(&scrape)).unwrap();
    promtool(&["check", "rules", "shipped.yaml"], &dir);
    promtool(&["test", "rules", "tests.yaml"], &dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn series_and_selectors_parse() {
    let series =
        Series::parse(r#"poolkeeper_watch_failing{kind="node",note="a \"b\", c"}"#).unwrap();
    assert_eq!(series.name, "poolkeeper_watch_failing");
    assert_eq!(series.labels["kind"], "node");
    assert_eq!(series.labels["note"], r#"a "b", c"#);
    assert!(series.matches(&Series::parse(r#"poolkeeper_watch_failing{kind="node"}"#).unwrap()));
    assert!(!series.matches(&Series::parse(r#"poolkeeper_watch_failing{kind="pod"}"#).unwrap()));
    assert_eq!(
        Series::parse("poolkeeper_leader_election_leading").unwrap(),
        Series {
            name: "poolkeeper_leader_election_leading".to_owned(),
            labels: BTreeMap::new()
        }
    );
    assert_eq!(
        metric_names("rate(poolkeeper_a_total{x=\"y\"}[5m]) / poolkeeper_b"),
        ["poolkeeper_a_total", "poolkeeper_b"]
            .map(str::to_owned)
            .into()
    );
}
