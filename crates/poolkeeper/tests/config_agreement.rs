//! `poolkeeper check-config` and `poolkeeper run` agree on every config
//! file: both use the one set of rules in `poolkeeper-config`, and every
//! component constructor accepts whatever those rules accept.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};

use poolkeeper::controller::Controller;
use poolkeeper_config::Config;

/// Invalid values, each with the path its error must name. Every one of
/// them was accepted by one of the two commands and refused by the other,
/// or repeated a rule in a component, before the rules lived in one place.
const INVALID: &[(&str, &str)] = &[
    (
        "webhook: {certificate: {renewBefore: 200d}}",
        "webhook.certificate.renewBefore",
    ),
    (
        "webhook: {mutatePath: '/mutate:pods'}",
        "webhook.mutatePath",
    ),
    ("webhook: {validatePath: '/v/{id}'}", "webhook.validatePath"),
    (
        "webhook: {mutatePath: /same, validatePath: /same}",
        "webhook.validatePath",
    ),
    ("webhook: {maxBodyBytes: 10}", "webhook.maxBodyBytes"),
    (
        "webhook: {certReloadInterval: 0s}",
        "webhook.certReloadInterval",
    ),
    ("webhook: {shutdownTimeout: 1m}", "webhook.shutdownTimeout"),
    (
        "webhook: {tlsHandshakeTimeout: 0s}",
        "webhook.tlsHandshakeTimeout",
    ),
    (
        "webhook: {headerReadTimeout: 0s}",
        "webhook.headerReadTimeout",
    ),
    ("webhook: {bodyReadTimeout: 0s}", "webhook.bodyReadTimeout"),
    ("webhook: {idleTimeout: 0s}", "webhook.idleTimeout"),
    ("webhook: {maxConnections: 0}", "webhook.maxConnections"),
    (
        "reconciler: {debounceInterval: 2s, maxDelay: 1s}",
        "reconciler.maxDelay",
    ),
    ("executor: {concurrency: 0}", "executor.concurrency"),
    ("executor: {writeTimeout: 0s}", "executor.writeTimeout"),
    ("watchers: {pageSize: 0}", "watchers.pageSize"),
    (
        "leaderElection: {renewDeadline: 20s}",
        "leaderElection.renewDeadline",
    ),
    (
        "leaderElection: {retryPeriod: 10s}",
        "leaderElection.retryPeriod",
    ),
    (
        "apiServer: {startupTimeout: 0s}",
        "apiServer.startupTimeout",
    ),
    (
        "shutdown: {gracePeriod: 10s}\nwebhook: {shutdownTimeout: 15s}",
        "webhook.shutdownTimeout",
    ),
    (
        "shutdown: {drainDelay: 11s}\nwebhook: {shutdownTimeout: 15s}",
        "shutdown.drainDelay",
    ),
    ("shutdown: {drainDelay: 30s}", "shutdown.drainDelay"),
    ("placement: {defaultMode: audit}", "placement.defaultMode"),
    (
        "webhookSelectors: {retryInitial: 10s}",
        "webhookSelectors.retryInitial",
    ),
    ("events: {writeTimeout: 0s}", "events.writeTimeout"),
    ("audit: {pageSize: 0}", "audit.pageSize"),
];

/// Values at the edge of what the rules accept.
const VALID: &[&str] = &[
    "webhook: {mutatePath: /a.b_c~d-e/f, validatePath: /V1/validate}",
    "reconciler: {debounceInterval: 1ms, maxDelay: 1ms}",
    "executor: {concurrency: 1024, shortRetry: 1s, longRetry: 1s}",
    "leaderElection: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 1s}",
    "webhook: {maxBodyBytes: 1024, shutdownTimeout: 20s}",
    "webhook: {maxConnections: 1, tlsHandshakeTimeout: 1ms, headerReadTimeout: 1ms, bodyReadTimeout: 1ms, idleTimeout: 1ms}",
    "placement: {defaultMode: dryrun}\naudit: {interval: 0s}",
    "watchers: {pageSize: 1}",
    // Timings that depend on another follow the one that is set.
    "shutdown: {gracePeriod: 5s}",
    "shutdown: {drainDelay: 11s}",
    "leaderElection: {leaseDuration: 6s}",
    "machineClasses: {enabled: false}\nplacement: {enabled: false}\nwebhook: {enabled: false}",
];

fn poolkeeper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolkeeper"))
        .args(args)
        .output()
        .expect("the poolkeeper binary runs")
}

fn write_config(dir: &Path, yaml: &str) -> String {
    let path = dir.join("poolkeeper.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn both_commands_refuse_each_invalid_value_naming_its_field() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, path) in INVALID {
        let errors = Config::from_yaml_str(yaml).expect_err(yaml);
        let paths: Vec<&str> = errors.errors().iter().map(|e| e.path()).collect();
        assert!(
            paths.contains(path),
            "{yaml}: errors name {paths:?}, not {path}"
        );

        let file = write_config(dir.path(), yaml);
        let check = poolkeeper(&["check-config", &file]);
        let run = poolkeeper(&["run", "--config", &file, "--kubeconfig", "/nonexistent"]);
        let check_err = String::from_utf8_lossy(&check.stderr);
        let run_err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(
            check.status.code(),
            Some(2),
            "check-config {yaml}: {check_err}"
        );
        assert_eq!(run.status.code(), Some(2), "run {yaml}: {run_err}");
        assert!(
            check_err.contains(&format!("{path}: ")),
            "{yaml}: {check_err}"
        );
        assert_eq!(check_err, run_err, "{yaml}: the two commands report alike");
    }
}

#[tokio::test]
async fn every_component_accepts_what_the_rules_accept() {
    let dir = tempfile::tempdir().unwrap();
    for yaml in VALID {
        let file = write_config(dir.path(), yaml);
        let check = poolkeeper(&["check-config", &file]);
        assert!(check.status.success(), "check-config {yaml}: {check:?}");

        let mut config = Config::from_yaml_str(yaml).unwrap();
        // Ports chosen by the kernel, so that tests can run side by side.
        config.health.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.webhook.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let client = unreachable_client();
        let controller = Controller::build(&config, client).await;
        assert!(controller.is_ok(), "{yaml}: {:?}", controller.err());
    }
}

/// A client for an address nothing listens on: building the controller
/// makes no request.
fn unreachable_client() -> kube::Client {
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    kube::Client::try_from(config).unwrap()
}
