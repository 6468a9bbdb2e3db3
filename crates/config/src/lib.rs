//! poolkeeper's configuration: the YAML schema, its documented defaults and
//! validation that reports every problem at once, each with the dotted path
//! of the offending key.
//!
//! ```
//! use poolkeeper_config::Config;
//!
//! let config = Config::from_yaml_str("reconciler: {debounceInterval: 1s}").unwrap();
//! assert_eq!(config.reconciler.debounce_interval, std::time::Duration::from_secs(1));
//!
//! let yaml = "executor: {concurrency: 0}\nreconciler: {maxDelay: 5 parsecs}\n";
//! let errors = Config::from_yaml_str(yaml).unwrap_err();
//! let paths: Vec<&str> = errors.errors().iter().map(|e| e.path()).collect();
//! assert_eq!(paths, ["reconciler.maxDelay", "executor.concurrency"]);
//! assert_eq!(
//!     errors.to_string().lines().last(),
//!     Some("executor.concurrency: must be at least 1, got 0 (at line 1, column 12)")
//! );
//! ```

mod derived;
mod error;
mod formats;
mod parse;
mod schema;
mod validate;

use std::path::Path;

pub use error::{ConfigError, ConfigErrors, Location};
pub use poolkeeper_bus::{Constraints, Mode};
pub use schema::{
    ApiServerConfig, AuditConfig, BusConfig, CertificateSource, Config, EventsConfig,
    ExecutorConfig, HealthConfig, LeaderElectionConfig, LogFormat, LoggingConfig,
    MachineClassesConfig, NamespaceLabels, PlacementConfig, PolicyConfigMapRef, ReconcilerConfig,
    ShutdownConfig, WatchersConfig, WebhookCertificateConfig, WebhookConfig,
    WebhookSelectorsConfig,
};

/// The documented default configuration file (`config/poolkeeper.yaml`).
const DEFAULT_YAML: &str = include_str!("../../../config/poolkeeper.yaml");

impl Config {
    /// Parses and validates a configuration document.
    ///
    /// Missing keys take their defaults; an empty document is the default
    /// configuration. On failure every problem found is returned, not just
    /// the first.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigErrors> {
        parse::parse(text).map_err(ConfigErrors::new)
    }

    /// Reads, parses and validates the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Io {
            file: path.to_path_buf(),
            reason: err.to_string(),
        })?;
        Self::from_yaml_str(&text)
    }

    /// The default configuration as a commented YAML document: every field
    /// with its default value and what it does.
    pub fn default_yaml() -> String {
        DEFAULT_YAML.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{KeyTree, leaves};

    #[test]
    fn default_file_parses_to_the_defaults() {
        assert_eq!(
            Config::from_yaml_str(&Config::default_yaml()),
            Ok(Config::default())
        );
    }

    #[test]
    fn default_file_spells_out_every_field() {
        let schema = serde_json::to_value(Config::default()).unwrap();
        let document = KeyTree::parse(DEFAULT_YAML).expect("the default file is YAML");
        let all = leaves(&schema);
        assert!(
            all.len() >= 30,
            "schema walk found only {} leaves",
            all.len()
        );
        let missing: Vec<String> = all
            .iter()
            .filter(|leaf| !document.contains(leaf))
            .map(|leaf| leaf.join("."))
            .collect();
        assert!(
            missing.is_empty(),
            "config/poolkeeper.yaml lacks {missing:?}"
        );
    }

    #[test]
    fn default_file_comments_every_key() {
        let mut previous = "";
        for (number, line) in DEFAULT_YAML.lines().enumerate() {
            let trimmed = line.trim();
            if !trimmed.is_empty() && !trimmed.starts_with('#') {
                assert!(
                    previous.starts_with('#'),
                    "config/poolkeeper.yaml line {}: {trimmed:?} has no comment line above it",
                    number + 1
                );
            }
            previous = trimmed;
        }
    }

    #[test]
    fn defaults_are_valid() {
        assert!(validate::validate(&Config::default()).is_empty());
    }

    #[test]
    fn rules_name_real_fields() {
        use std::time::Duration;

        let mut config = Config {
            namespace: "Bad_Namespace".into(),
            ..Config::default()
        };
        let le = &mut config.leader_election;
        le.lease_name = String::new();
        le.lease_namespace = String::new();
        le.lease_duration = Duration::from_millis(1500);
        le.renew_deadline = Duration::from_secs(3);
        le.retry_period = Duration::from_secs(4);
        config.watchers.page_size = 0;
        config.watchers.sync_timeout = Duration::ZERO;
        config.reconciler.debounce_interval = Duration::from_secs(2);
        config.reconciler.max_delay = Duration::from_secs(1);
        config.executor.concurrency = 0;
        config.executor.short_retry = Duration::from_secs(10);
        config.executor.long_retry = Duration::from_secs(1);
        config.executor.conflict_retry = Duration::ZERO;
        config.executor.write_timeout = Duration::ZERO;
        config.api_server.startup_timeout = Duration::ZERO;
        config.machine_classes.finalizer = "x".into();
        config.machine_classes.secret_finalizer = "y".into();
        config.placement.pool_label = "/".into();
        config.placement.excluded_namespaces = vec!["Kube_System".into()];
        config.placement.namespace_labels.pool = "a/b/c".into();
        config.placement.namespace_labels.mode = "-".into();
        config.placement.namespace_labels.constraints = String::new();
        config.webhook_selectors.configuration_name = "Pool_Keeper".into();
        config.webhook_selectors.request_timeout = Duration::ZERO;
        config.webhook_selectors.retry_initial = Duration::from_secs(10);
        config.webhook_selectors.retry_max = Duration::ZERO;
        config.events.write_timeout = Duration::ZERO;
        let policy = &mut config.placement.policy_config_map;
        policy.namespace = "-".into();
        policy.name = "-".into();
        policy.key = "..".into();
        let webhook = &mut config.webhook;
        webhook.listen = "0.0.0.0:0".parse().unwrap();
        webhook.cert_dir = std::path::PathBuf::new();
        webhook.mutate_path = "x".into();
        webhook.validate_path = "x".into();
        webhook.max_body_bytes = 0;
        webhook.cert_reload_interval = Duration::ZERO;
        webhook.certificate_timeout = Duration::ZERO;
        webhook.shutdown_timeout = Duration::ZERO;
        webhook.tls_handshake_timeout = Duration::ZERO;
        webhook.header_read_timeout = Duration::ZERO;
        webhook.body_read_timeout = Duration::ZERO;
        webhook.idle_timeout = Duration::ZERO;
        webhook.max_connections = 0;
        let certificate = &mut webhook.certificate;
        certificate.secret_name = "Bad_Secret".into();
        certificate.service_name = "a.b".into();
        certificate.ca_validity = Duration::from_secs(1);
        certificate.leaf_validity = Duration::from_secs(2);
        certificate.renew_before = Duration::from_secs(1);
        config.audit.page_size = 0;
        config.audit.concurrency = 0;
        config.audit.max_reported = 0;
        config.shutdown.drain_delay = Duration::from_secs(100);
        config.health.listen = "0.0.0.0:0".parse().unwrap();
        config.health.stall_timeout = Duration::ZERO;
        config.health.debug_events = 0;
        config.bus.capacity = 0;
        config.shutdown.grace_period = Duration::ZERO;
        config.logging.level = "loud".into();

        let schema = serde_json::to_value(Config::default()).unwrap();
        let known: Vec<String> = leaves(&schema).iter().map(|leaf| leaf.join(".")).collect();
        let violations = validate::validate(&config);
        let mut flagged: Vec<&str> = violations.iter().flat_map(|v| v.paths()).collect();
        for violation in &violations {
            for path in violation.paths() {
                assert!(
                    known.iter().any(|k| k == path),
                    "rule names unknown field {path}"
                );
            }
        }
        flagged.sort_unstable();
        flagged.dedup();
        let unflagged: Vec<&String> = known
            .iter()
            .filter(|k| !flagged.contains(&k.as_str()))
            .filter(|k| {
                !k.ends_with(".enabled")
                    && !k.ends_with(".format")
                    && k.as_str() != "machineClasses.protectSecrets"
                    && k.as_str() != "placement.defaultMode"
                    && k.as_str() != "placement.defaultConstraints"
                    && k.as_str() != "audit.interval"
                    && k.as_str() != "webhook.certificate.source"
                    // Compared against gracePeriod, which this config breaks on its own.
                    && k.as_str() != "shutdown.drainDelay"
            })
            .collect();
        assert!(unflagged.is_empty(), "no rule fired for {unflagged:?}");
    }
}

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
