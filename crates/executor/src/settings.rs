use std::time::Duration;

use poolkeeper_bus::Requeue;
use poolkeeper_config::{Config, ExecutorConfig};

/// Requeue periods, as in machine-controller-manager (`executor.*Retry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retries {
    /// After an API failure, and while a class being deleted is still in use.
    pub short_retry: Duration,
    /// Periodic re-check of a settled class.
    pub long_retry: Duration,
    /// After a write lost a race with another writer (or the index was stale).
    pub conflict_retry: Duration,
}

impl Retries {
    /// How long `requeue` waits; zero for [`Requeue::Never`], which
    /// schedules nothing.
    pub fn period(&self, requeue: Requeue) -> Duration {
        match requeue {
            Requeue::Short => self.short_retry,
            Requeue::Long => self.long_retry,
            Requeue::Conflict => self.conflict_retry,
            Requeue::Never => Duration::ZERO,
        }
    }
}

impl From<&ExecutorConfig> for Retries {
    fn from(config: &ExecutorConfig) -> Self {
        Self {
            short_retry: config.short_retry,
            long_retry: config.long_retry,
            conflict_retry: config.conflict_retry,
        }
    }
}

/// Settings of the executor (`executor:` and `machineClasses.finalizer` in
/// the configuration file, which also holds their defaults and rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorSettings {
    /// The finalizer kept on MachineClasses in use.
    pub finalizer: String,
    /// Classes reconciled at the same time within a pass; at least 1.
    pub concurrency: usize,
    pub retries: Retries,
    /// Longest one API write may take before it counts as failed, so that a
    /// hung request cannot stall a pass.
    pub write_timeout: Duration,
    /// The finalizer kept on the Secrets MachineClasses reference
    /// (`machineClasses.secretFinalizer`); `None` when
    /// `machineClasses.protectSecrets` is off: Secrets are not reconciled.
    pub secret_finalizer: Option<String>,
}

impl From<&Config> for ExecutorSettings {
    fn from(config: &Config) -> Self {
        Self {
            finalizer: config.machine_classes.finalizer.clone(),
            concurrency: config.executor.concurrency,
            retries: Retries::from(&config.executor),
            write_timeout: config.executor.write_timeout,
            secret_finalizer: config
                .machine_classes
                .protect_secrets
                .then(|| config.machine_classes.secret_finalizer.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_comes_from_the_config() {
        let mut config = Config::default();
        config.machine_classes.finalizer = "example.com/protect".to_owned();
        config.machine_classes.secret_finalizer = "example.com/keep".to_owned();
        config.executor = ExecutorConfig {
            concurrency: 7,
            short_retry: Duration::from_secs(1),
            long_retry: Duration::from_secs(2),
            conflict_retry: Duration::from_secs(3),
            write_timeout: Duration::from_secs(4),
        };
        assert_eq!(
            ExecutorSettings::from(&config),
            ExecutorSettings {
                finalizer: "example.com/protect".to_owned(),
                concurrency: 7,
                retries: Retries {
                    short_retry: Duration::from_secs(1),
                    long_retry: Duration::from_secs(2),
                    conflict_retry: Duration::from_secs(3),
                },
                write_timeout: Duration::from_secs(4),
                secret_finalizer: Some("example.com/keep".to_owned()),
            }
        );
        config.machine_classes.protect_secrets = false;
        assert_eq!(ExecutorSettings::from(&config).secret_finalizer, None);
    }

    #[test]
    fn each_requeue_has_its_period() {
        let retries = Retries {
            short_retry: Duration::from_secs(1),
            long_retry: Duration::from_secs(2),
            conflict_retry: Duration::from_secs(3),
        };
        let cases = [
            (Requeue::Short, Duration::from_secs(1)),
            (Requeue::Long, Duration::from_secs(2)),
            (Requeue::Conflict, Duration::from_secs(3)),
            (Requeue::Never, Duration::ZERO),
        ];
        for (requeue, period) in cases {
            assert_eq!(retries.period(requeue), period, "{requeue}");
        }
    }
}
