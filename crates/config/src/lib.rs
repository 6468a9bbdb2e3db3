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
//! let errors = Config::from_yaml_str("executor: {concurrency: 0}").unwrap_err();
//! assert_eq!(errors.to_string(), "executor.concurrency: must be at least 1, got 0");
//! ```

mod error;
mod formats;
mod parse;
mod schema;
mod validate;

use std::path::Path;

pub use error::{ConfigError, ConfigErrors, Location};
pub use schema::{
    BusConfig, Config, ExecutorConfig, HealthConfig, LeaderElectionConfig, LogFormat,
    LoggingConfig, MachineClassesConfig, PlacementConfig, PolicyConfigMapRef, ReconcilerConfig,
    ShutdownConfig, WatchersConfig, WebhookConfig,
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
        assert_eq!(Config::from_yaml_str(&Config::default_yaml()), Ok(Config::default()));
    }

    #[test]
    fn default_file_spells_out_every_field() {
        let schema = serde_json::to_value(Config::default()).unwrap();
        let document = KeyTree::parse(DEFAULT_YAML).expect("the default file is YAML");
        let all = leaves(&schema);
        assert!(all.len() >= 30, "schema walk found only {} leaves", all.len());
        let missing: Vec<String> =
            all.iter().filter(|leaf| !document.contains(leaf)).map(|leaf| leaf.join(".")).collect();
        assert!(missing.is_empty(), "config/poolkeeper.yaml lacks {missing:?}");
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
}
