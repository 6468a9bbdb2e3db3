use std::time::Duration;

/// machine-controller-manager's finalizer, kept on every MachineClass in use.
pub const DEFAULT_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

/// Requeue periods, as in machine-controller-manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retries {
    /// After an API failure, and while a class being deleted is still in use.
    pub short_retry: Duration,
    /// Periodic re-check of a settled class.
    pub long_retry: Duration,
    /// After a write lost a race with another writer (or the index was stale).
    pub conflict_retry: Duration,
}

impl Default for Retries {
    fn default() -> Self {
        Self {
            short_retry: Duration::from_secs(5),
            long_retry: Duration::from_secs(600),
            conflict_retry: Duration::from_millis(200),
        }
    }
}

impl Retries {
    pub fn period(&self, retry: Retry) -> Duration {
        match retry {
            Retry::Short => self.short_retry,
            Retry::Long => self.long_retry,
            Retry::Conflict => self.conflict_retry,
        }
    }
}

/// Which of the [`Retries`] periods a reconciliation asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Retry {
    Short,
    Long,
    Conflict,
}

impl Retry {
    pub fn as_str(self) -> &'static str {
        match self {
            Retry::Short => "short_retry",
            Retry::Long => "long_retry",
            Retry::Conflict => "conflict_retry",
        }
    }
}

/// Settings of the executor (`executor:` and `machineClasses.finalizer` in
/// the configuration file).
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
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        Self {
            finalizer: DEFAULT_FINALIZER.to_owned(),
            concurrency: 4,
            retries: Retries::default(),
            write_timeout: Duration::from_secs(30),
        }
    }
}
