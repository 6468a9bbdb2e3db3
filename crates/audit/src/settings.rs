//! The audit's settings, taken from the configuration.

use std::time::Duration;

use poolkeeper_config::Config;

/// `audit.*`. The placement policy is not a setting: the audit reads it
/// from the process's one `PolicyCache`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditSettings {
    /// Time between two rounds; zero turns the audit off.
    pub interval: Duration,
    /// Pods per page of each LIST.
    pub page_size: u32,
    /// LISTs of a round in flight at once (`audit.concurrency`); the pages
    /// of one LIST are read one after another.
    pub concurrency: usize,
    /// Violations kept in detail per round (`AuditCompleted.violations`,
    /// Warning Events); every one is counted.
    pub max_reported: usize,
    /// Keep every violation by namespace for the OpenReports writer
    /// (`audit.reports`).
    pub reports: bool,
}

impl From<&Config> for AuditSettings {
    fn from(config: &Config) -> Self {
        Self {
            interval: config.audit.interval,
            page_size: config.audit.page_size,
            concurrency: config.audit.concurrency,
            max_reported: config.audit.max_reported,
            reports: config.audit.reports,
        }
    }
}

impl AuditSettings {
    /// Whether rounds run at all (`audit.interval` is not `0s`).
    pub fn enabled(&self) -> bool {
        !self.interval.is_zero()
    }
}
