//! Table tests of the public API: parsing, defaults and every kind of error.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use poolkeeper_config::{Config, ConfigError, ConfigErrors, LogFormat};

fn errors_of(yaml: &str) -> ConfigErrors {
    match Config::from_yaml_str(yaml) {
        Ok(config) => panic!("expected errors for {yaml:?}, got {config:?}"),
        Err(errors) => errors,
    }
}

fn paths(errors: &ConfigErrors) -> Vec<&str> {
    errors.errors().iter().map(ConfigError::path).collect()
}

#[test]
fn default_file_is_the_default_config() {
    assert_eq!(
        Config::from_yaml_str(&Config::default_yaml()),
        Ok(Config::default())
    );
}

#[test]
fn defaults_round_trip_through_yaml_and_json() {
    let defaults = Config::default();
    let yaml = serde_saphyr::to_string(&defaults).unwrap();
    assert_eq!(Config::from_yaml_str(&yaml), Ok(defaults.clone()), "{yaml}");
    let json = serde_json::to_string(&defaults).unwrap();
    assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), defaults);
}

#[test]
fn empty_documents_are_the_defaults() {
    for yaml in ["", "\n\n", "# nothing set\n", "~", "null", "---\n", "{}"] {
        assert_eq!(
            Config::from_yaml_str(yaml),
            Ok(Config::default()),
            "{yaml:?}"
        );
    }
}

#[test]
fn empty_sections_are_their_defaults() {
    let yaml = "reconciler:\nplacement:\n  policyConfigMap:\n  # poolLabel: x\n";
    assert_eq!(Config::from_yaml_str(yaml), Ok(Config::default()));
}

#[test]
fn partial_sections_keep_the_other_defaults() {
    let config =
        Config::from_yaml_str("reconciler: {maxDelay: 10s}\nexecutor:\n  concurrency: 8\n")
            .unwrap();
    assert_eq!(config.reconciler.max_delay, Duration::from_secs(10));
    assert_eq!(
        config.reconciler.debounce_interval,
        Duration::from_millis(500)
    );
    assert_eq!(config.executor.concurrency, 8);
    assert_eq!(config.executor.long_retry, Duration::from_secs(600));
    assert_eq!(config.namespace, "machine-system");
}

#[test]
fn every_field_can_be_set() {
    let yaml = r#"
namespace: machines
leaderElection:
  enabled: false
  leaseName: pk.lease
  leaseNamespace: kube-system
  leaseDuration: 30s
  renewDeadline: 20s
  retryPeriod: 4s
watchers: {pageSize: 100, syncTimeout: 1m}
reconciler: {debounceInterval: 1s, maxDelay: 1m}
executor: {concurrency: 16, shortRetry: 1s, longRetry: 1h, conflictRetry: 50ms}
machineClasses: {enabled: false, finalizer: example.com/protect, protectSecrets: false, secretFinalizer: example.com/keep-secret}
placement:
  enabled: false
  poolLabel: example.com/pool
  policyConfigMap: {namespace: ops, name: placement-policy, key: policy.yaml}
webhook:
  enabled: false
  listen: "[::]:10250"
  certDir: ./certs
  mutatePath: /mutate
  validatePath: /validate
  maxBodyBytes: 1048576
health: {listen: 127.0.0.1:9090, stallTimeout: 30s, debugEvents: 1024}
bus: {capacity: 1024}
shutdown: {gracePeriod: 1m}
logging: {level: "debug,kube=warn", format: text}
"#;
    let config = Config::from_yaml_str(yaml).unwrap();
    let mut expected = Config {
        namespace: "machines".into(),
        ..Config::default()
    };
    let le = &mut expected.leader_election;
    le.enabled = false;
    le.lease_name = "pk.lease".into();
    le.lease_namespace = "kube-system".into();
    le.lease_duration = Duration::from_secs(30);
    le.renew_deadline = Duration::from_secs(20);
    le.retry_period = Duration::from_secs(4);
    expected.watchers.page_size = 100;
    expected.watchers.sync_timeout = Duration::from_secs(60);
    expected.reconciler.debounce_interval = Duration::from_secs(1);
    expected.reconciler.max_delay = Duration::from_secs(60);
    let ex = &mut expected.executor;
    ex.concurrency = 16;
    ex.short_retry = Duration::from_secs(1);
    ex.long_retry = Duration::from_secs(3600);
    ex.conflict_retry = Duration::from_millis(50);
    expected.machine_classes.enabled = false;
    expected.machine_classes.finalizer = "example.com/protect".into();
    expected.machine_classes.protect_secrets = false;
    expected.machine_classes.secret_finalizer = "example.com/keep-secret".into();
    expected.placement.enabled = false;
    expected.placement.pool_label = "example.com/pool".into();
    expected.placement.policy_config_map.namespace = "ops".into();
    expected.placement.policy_config_map.name = "placement-policy".into();
    expected.placement.policy_config_map.key = "policy.yaml".into();
    let wh = &mut expected.webhook;
    wh.enabled = false;
    wh.listen = "[::]:10250".parse::<SocketAddr>().unwrap();
    wh.cert_dir = PathBuf::from("./certs");
    wh.mutate_path = "/mutate".into();
    wh.validate_path = "/validate".into();
    wh.max_body_bytes = 1 << 20;
    // Left out, so it follows shutdown.gracePeriod: (1m - 5s) x 3/4.
    wh.shutdown_timeout = Duration::from_millis(41_250);
    expected.health.listen = "127.0.0.1:9090".parse().unwrap();
    expected.health.stall_timeout = Duration::from_secs(30);
    expected.health.debug_events = 1024;
    expected.bus.capacity = 1024;
    expected.shutdown.grace_period = Duration::from_secs(60);
    expected.logging.level = "debug,kube=warn".into();
    expected.logging.format = LogFormat::Text;
    assert_eq!(config, expected);
}

/// One mistake per document: the report holds exactly one error, at `path`,
/// whose reason contains `reason`.
#[test]
fn each_mistake_is_reported_at_its_path() {
    let cases: &[(&str, &str, &str)] = &[
        // unparsable values
        (
            "reconciler: {debounceInterval: 5 parsecs}",
            "reconciler.debounceInterval",
            r#"invalid duration "5 parsecs": unknown time unit "parsecs""#,
        ),
        (
            "reconciler: {maxDelay: 5}",
            "reconciler.maxDelay",
            "time unit needed",
        ),
        (
            "shutdown: {gracePeriod: -5s}",
            "shutdown.gracePeriod",
            "invalid duration",
        ),
        (
            "health: {listen: \"0.0.0.0:70000\"}",
            "health.listen",
            "port 70000 is out of range (0-65535)",
        ),
        (
            "webhook: {listen: localhost:9443}",
            "webhook.listen",
            "is not an IP address",
        ),
        (
            "webhook: {listen: 9443}",
            "webhook.listen",
            "expected IP:PORT",
        ),
        // unknown keys
        (
            "colour: blue",
            "colour",
            "unknown key \"colour\"; allowed keys: apiServer, audit, bus, events, executor, health",
        ),
        (
            "webhook: {mutatePaths: /x}",
            "webhook.mutatePaths",
            "did you mean \"mutatePath\"?",
        ),
        (
            "reconciler:\n  debounce_interval: 1s\n",
            "reconciler.debounce_interval",
            "did you mean \"debounceInterval\"?",
        ),
        (
            "placement: {policyConfigMap: {nme: x}}",
            "placement.policyConfigMap.nme",
            "allowed keys: key, name, namespace",
        ),
        // wrong types
        (
            "executor: {concurrency: many}",
            "executor.concurrency",
            "expected a non-negative integer, got \"many\"",
        ),
        (
            "executor: {concurrency: -1}",
            "executor.concurrency",
            "expected a non-negative integer, got \"-1\"",
        ),
        (
            "webhook: {enabled: maybe}",
            "webhook.enabled",
            "expected true or false, got \"maybe\"",
        ),
        ("reconciler: 5", "reconciler", "expected a mapping"),
        ("namespace: [a, b]", "namespace", "expected a single value"),
        ("namespace:", "namespace", "found nothing"),
        (
            "logging: {format: xml}",
            "logging.format",
            "unknown variant `xml`, expected one of json, text",
        ),
        (
            "watchers: {pageSize: 1.5}",
            "watchers.pageSize",
            "expected a non-negative integer",
        ),
        // semantic rules
        (
            "namespace: Machine_System",
            "namespace",
            "not a valid DNS-1123 label",
        ),
        (
            "leaderElection: {leaseName: Lease}",
            "leaderElection.leaseName",
            "DNS-1123 subdomain",
        ),
        (
            "leaderElection: {leaseNamespace: ''}",
            "leaderElection.leaseNamespace",
            "must not be empty",
        ),
        (
            "leaderElection: {renewDeadline: 15s}",
            "leaderElection.renewDeadline",
            "must be shorter than leaderElection.leaseDuration (15s), got 15s",
        ),
        (
            "leaderElection: {retryPeriod: 10s}",
            "leaderElection.retryPeriod",
            "must be shorter than leaderElection.renewDeadline (10s)",
        ),
        (
            "leaderElection: {leaseDuration: 15500ms}",
            "leaderElection.leaseDuration",
            "whole number of seconds",
        ),
        (
            "watchers: {pageSize: 0}",
            "watchers.pageSize",
            "must be at least 1",
        ),
        (
            "watchers: {syncTimeout: 0s}",
            "watchers.syncTimeout",
            "must be greater than 0",
        ),
        (
            "reconciler: {maxDelay: 100ms}",
            "reconciler.maxDelay",
            "must be at least reconciler.debounceInterval (500ms), got 100ms",
        ),
        (
            "reconciler: {debounceInterval: 0s}",
            "reconciler.debounceInterval",
            "must be greater than 0",
        ),
        (
            "executor: {concurrency: 0}",
            "executor.concurrency",
            "must be at least 1, got 0",
        ),
        (
            "audit: {concurrency: 0}",
            "audit.concurrency",
            "must be at least 1, got 0",
        ),
        (
            "audit: {concurrency: 33}",
            "audit.concurrency",
            "must be at most 32, got 33",
        ),
        (
            "executor: {concurrency: 5000}",
            "executor.concurrency",
            "must be at most 1024",
        ),
        (
            "executor: {shortRetry: 0s}",
            "executor.shortRetry",
            "must be greater than 0",
        ),
        (
            "executor: {conflictRetry: 0ms}",
            "executor.conflictRetry",
            "must be greater than 0",
        ),
        (
            "executor: {longRetry: 1s}",
            "executor.longRetry",
            "must be at least executor.shortRetry (5s)",
        ),
        (
            "machineClasses: {finalizer: protect}",
            "machineClasses.finalizer",
            "must be domain-qualified",
        ),
        (
            "machineClasses: {finalizer: 'Example.com/x'}",
            "machineClasses.finalizer",
            "invalid prefix",
        ),
        (
            "machineClasses: {secretFinalizer: machine-controller}",
            "machineClasses.secretFinalizer",
            "must be domain-qualified",
        ),
        (
            "machineClasses: {secretFinalizer: ''}",
            "machineClasses.secretFinalizer",
            "must not be empty",
        ),
        (
            "placement: {poolLabel: 'pool label'}",
            "placement.poolLabel",
            "not a valid qualified name",
        ),
        (
            "placement: {policyConfigMap: {namespace: Ops}}",
            "placement.policyConfigMap.namespace",
            "DNS-1123 label",
        ),
        (
            "placement: {policyConfigMap: {name: a_b}}",
            "placement.policyConfigMap.name",
            "DNS-1123 subdomain",
        ),
        (
            "placement: {policyConfigMap: {key: a/b}}",
            "placement.policyConfigMap.key",
            "not a valid ConfigMap key",
        ),
        (
            "webhook: {listen: 0.0.0.0:0}",
            "webhook.listen",
            "port must not be 0",
        ),
        (
            "webhook: {certDir: ''}",
            "webhook.certDir",
            "must not be empty",
        ),
        (
            "webhook: {mutatePath: mutate}",
            "webhook.mutatePath",
            "must start with '/'",
        ),
        (
            "webhook: {mutatePath: '/mutate:pods'}",
            "webhook.mutatePath",
            "must be a plain path of letters, digits",
        ),
        (
            "webhook: {shutdownTimeout: 30s}",
            "webhook.shutdownTimeout",
            "must be shorter than shutdown.gracePeriod (25s), got 30s",
        ),
        ("placement: {engine: kel}", "placement.engine", "auto"),
        (
            "placement: {defaultMode: enfroce}",
            "placement.defaultMode",
            "enforce",
        ),
        (
            "shutdown: {drainDelay: 20s}\nwebhook: {shutdownTimeout: 15s}",
            "shutdown.drainDelay",
            "20s plus webhook.shutdownTimeout (15s) exceeds shutdown.gracePeriod (25s)",
        ),
        (
            "executor: {writeTimeout: 0s}",
            "executor.writeTimeout",
            "must be greater than 0",
        ),
        (
            "apiServer: {startupTimeout: 0s}",
            "apiServer.startupTimeout",
            "must be greater than 0",
        ),
        (
            "webhook: {validatePath: /mutate-pods}",
            "webhook.validatePath",
            "must differ from webhook.mutatePath",
        ),
        (
            "webhook: {maxBodyBytes: 100}",
            "webhook.maxBodyBytes",
            "must be at least 1024, got 100",
        ),
        (
            "health: {listen: 0.0.0.0:9443}",
            "health.listen",
            "collides with webhook.listen 0.0.0.0:9443",
        ),
        (
            "health: {listen: 127.0.0.1:0}",
            "health.listen",
            "port must not be 0",
        ),
        (
            "health: {stallTimeout: 0s}",
            "health.stallTimeout",
            "must be greater than 0",
        ),
        (
            "health: {debugEvents: 0}",
            "health.debugEvents",
            "must be at least 1",
        ),
        (
            "bus: {capacity: 8}",
            "bus.capacity",
            "must be at least 16, got 8",
        ),
        (
            "bus: {capacity: 100000000}",
            "bus.capacity",
            "must be at most 1048576",
        ),
        (
            "shutdown: {gracePeriod: 0s}",
            "shutdown.gracePeriod",
            "must be greater than 0",
        ),
        (
            "logging: {level: verbose}",
            "logging.level",
            "\"verbose\" is not a log level",
        ),
    ];
    for (yaml, path, reason) in cases {
        let errors = errors_of(yaml);
        assert_eq!(paths(&errors), [*path], "{yaml:?}:\n{errors}");
        let error = &errors.errors()[0];
        assert!(
            error.reason().contains(reason),
            "{yaml:?}: {:?} lacks {reason:?}",
            error.reason()
        );
        let line = errors.to_string();
        assert!(line.starts_with(&format!("{path}: ")), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }
}

#[test]
fn errors_point_at_the_line_and_column() {
    let errors = errors_of("namespace: ok\nreconciler:\n  debounceInterval: 5 parsecs\n");
    let location = errors.errors()[0].location().expect("a location");
    assert_eq!((location.line, location.column), (3, 21));
    assert!(
        errors.to_string().ends_with("(at line 3, column 21)"),
        "{errors}"
    );

    // Rule violations point at the key.
    let errors = errors_of("executor:\n  concurrency: 0\n");
    let location = errors.errors()[0].location().expect("a location");
    assert_eq!((location.line, location.column), (2, 3));
    assert_eq!(
        errors.to_string(),
        "executor.concurrency: must be at least 1, got 0 (at line 2, column 3)"
    );
}

#[test]
fn malformed_yaml_reports_line_and_column() {
    let cases = [
        ("reconciler: {debounceInterval: 1s\n", 1),
        (
            "namespace: a\nreconciler:\n  maxDelay: 1s\n   debounceInterval: 1s\n",
            4,
        ),
        ("a: b: c\n", 1),
        ("namespace: 'unterminated\n", 1),
        ("namespace: a\nnamespace: b\n", 2),
        ("namespace: a\n---\nnamespace: b\n", 3),
    ];
    for (yaml, line) in cases {
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{yaml:?}:\n{errors}");
        let error = &errors.errors()[0];
        assert!(
            matches!(error, ConfigError::Syntax { .. }),
            "{yaml:?}: {error:?}"
        );
        assert_eq!(error.path(), "");
        assert_eq!(
            error.location().map(|l| l.line),
            Some(line),
            "{yaml:?}: {error}"
        );
        assert!(
            error
                .to_string()
                .starts_with(&format!("malformed YAML at line {line}, column ")),
            "{error}"
        );
    }
}

#[test]
fn a_document_that_is_not_a_mapping_is_one_error() {
    for yaml in ["- a\n- b\n", "just text", "42"] {
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{yaml:?}:\n{errors}");
        assert_eq!(errors.errors()[0].path(), "");
        assert!(
            errors.errors()[0].reason().contains("expected a mapping"),
            "{errors}"
        );
        assert!(errors.to_string().starts_with("(document): "), "{errors}");
    }
}

#[test]
fn several_errors_are_reported_together() {
    let yaml = r#"
colour: blue
reconciler:
  debounceInterval: 5 parsecs
  maxDelay: soon
executor:
  concurrency: 0
  bogus: true
webhook:
  enabled: maybe
  mutatePath: mutate
health:
  listen: "0.0.0.0:70000"
logging:
  level: verbose
"#;
    let errors = errors_of(yaml);
    let expected = [
        // parse errors, in document order
        "colour",
        "reconciler.debounceInterval",
        "reconciler.maxDelay",
        "executor.bogus",
        "webhook.enabled",
        "health.listen",
        // then the rules broken by the values that did parse
        "executor.concurrency",
        "webhook.mutatePath",
        "logging.level",
    ];
    assert_eq!(paths(&errors), expected, "\n{errors}");
    let display = errors.to_string();
    let lines: Vec<&str> = display.lines().collect();
    assert_eq!(lines.len(), expected.len());
    for (line, path) in lines.iter().zip(expected) {
        assert!(line.starts_with(&format!("{path}: ")), "{line}");
    }
}

#[test]
fn rules_involving_an_unparsable_field_are_not_reported() {
    // maxDelay (100ms) < debounceInterval would fail against the default
    // debounceInterval, but the user's value did not parse: only that is reported.
    let errors = errors_of("reconciler: {debounceInterval: bogus, maxDelay: 100ms}");
    assert_eq!(paths(&errors), ["reconciler.debounceInterval"], "{errors}");

    let errors = errors_of("webhook: {listen: nowhere}\nhealth: {listen: 0.0.0.0:9443}\n");
    assert_eq!(paths(&errors), ["webhook.listen"], "{errors}");
}

#[test]
fn a_disabled_webhook_may_share_the_health_port() {
    let yaml = "webhook: {enabled: false, listen: 0.0.0.0:8081}\n";
    assert!(Config::from_yaml_str(yaml).is_ok());
    let distinct_ips = "webhook: {listen: 10.0.0.1:8081}\nhealth: {listen: 127.0.0.1:8081}\n";
    assert!(Config::from_yaml_str(distinct_ips).is_ok());
}

#[test]
fn load_reads_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("poolkeeper.yaml");
    std::fs::write(&path, "executor: {concurrency: 2}\n").unwrap();
    assert_eq!(Config::load(&path).unwrap().executor.concurrency, 2);

    std::fs::write(&path, "executor: {concurrency: 0}\nfoo: 1\n").unwrap();
    let errors = Config::load(&path).unwrap_err();
    assert_eq!(paths(&errors), ["foo", "executor.concurrency"], "{errors}");
}

#[test]
fn load_reports_an_unreadable_file_with_its_path() {
    let missing = Path::new("/nonexistent/poolkeeper.yaml");
    let errors = Config::load(missing).unwrap_err();
    assert_eq!(errors.len(), 1);
    let error = &errors.errors()[0];
    assert!(
        matches!(error, ConfigError::Io { file, .. } if file == missing),
        "{error:?}"
    );
    let display = errors.to_string();
    assert!(
        display.starts_with("/nonexistent/poolkeeper.yaml: cannot read configuration file: "),
        "{display}"
    );

    let dir = tempfile::tempdir().unwrap();
    let errors = Config::load(dir.path()).unwrap_err();
    assert!(
        matches!(errors.errors()[0], ConfigError::Io { .. }),
        "{errors}"
    );
}

#[test]
fn errors_can_be_consumed() {
    let errors = errors_of("executor: {concurrency: 0}\nbus: {capacity: 1}\n");
    assert!(!errors.is_empty());
    let reasons: Vec<String> = (&errors)
        .into_iter()
        .map(|e| e.reason().to_owned())
        .collect();
    assert_eq!(
        reasons,
        ["must be at least 1, got 0", "must be at least 16, got 1"]
    );
    assert_eq!(errors.into_errors().len(), 2);
}

#[test]
fn the_deployed_configuration_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/poolkeeper.yaml");
    if let Err(errors) = Config::load(&path) {
        panic!("{}:\n{errors}", path.display());
    }
}

/// Timings that depend on another follow it when left out; written ones are judged as written.
#[test]
fn dependent_defaults_follow_what_is_set() {
    let config = Config::from_yaml_str("shutdown: {gracePeriod: 5s}").unwrap();
    assert_eq!(config.shutdown.drain_delay, Duration::from_secs(1));
    assert_eq!(config.webhook.shutdown_timeout, Duration::from_secs(3));

    let config = Config::from_yaml_str("shutdown: {drainDelay: 10s}").unwrap();
    assert_eq!(
        config.webhook.shutdown_timeout,
        Duration::from_millis(11_250)
    );

    let config = Config::from_yaml_str("leaderElection: {leaseDuration: 6s}").unwrap();
    assert_eq!(
        config.leader_election.renew_deadline,
        Duration::from_secs(4)
    );
    assert_eq!(
        config.leader_election.retry_period,
        Duration::from_millis(800)
    );

    let errors = errors_of("shutdown: {drainDelay: 30s}");
    assert_eq!(
        errors.to_string(),
        "shutdown.drainDelay: must be shorter than shutdown.gracePeriod (25s), got 30s (at line 1, column 12)"
    );
    let errors = errors_of("shutdown: {gracePeriod: 5s}\nwebhook: {shutdownTimeout: 15s}");
    assert_eq!(paths(&errors), ["webhook.shutdownTimeout"], "{errors}");
    assert!(
        errors
            .to_string()
            .contains("must be shorter than shutdown.gracePeriod (5s), got 15s"),
        "{errors}"
    );
}

/// `auto` follows the API server; `cel` and `webhook` are what they say
/// whatever it serves.
#[test]
fn the_placement_engine_resolves_from_the_choice_and_what_the_api_server_serves() {
    use poolkeeper_config::{Engine, EngineChoice};
    assert_eq!(Config::default().placement.engine, EngineChoice::Auto);
    for (yaml, serves, engine) in [
        ("placement: {engine: auto}", true, Engine::Cel),
        ("placement: {engine: auto}", false, Engine::Webhook),
        ("placement: {engine: cel}", false, Engine::Cel),
        ("placement: {engine: cel}", true, Engine::Cel),
        ("placement: {engine: webhook}", true, Engine::Webhook),
        ("placement: {engine: webhook}", false, Engine::Webhook),
    ] {
        let config = Config::from_yaml_str(yaml).unwrap();
        assert_eq!(
            config.placement.engine.resolve(serves),
            engine,
            "{yaml}, serves MutatingAdmissionPolicies: {serves}"
        );
    }
}
