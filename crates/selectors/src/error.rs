use std::time::Duration;

use poolkeeper_kube::Deposed;
use poolkeeper_supervisor::NotLeader;

use crate::settings::ConfigurationKind;

/// Why the selectors of a configuration could not be brought in step.
/// Logged and retried (or waited out), never fatal.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    /// The policy's own error, as the shared policy cache holds it.
    #[error("the placement policy is invalid, the webhook selectors are left as they are: {0}")]
    Policy(String),
    #[error("{} {name} does not exist", kind.as_str())]
    ConfigurationMissing {
        kind: ConfigurationKind,
        name: String,
    },
    #[error("{} {configuration} has no webhook entry named {entry:?}", kind.as_str())]
    EntryMissing {
        kind: ConfigurationKind,
        configuration: String,
        entry: String,
    },
    #[error("reading {} {name}: {source}", kind.as_str())]
    Read {
        kind: ConfigurationKind,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("patching the selectors of {} {name}: {source}", kind.as_str())]
    Patch {
        kind: ConfigurationKind,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{} {name}: no answer within {}", kind.as_str(), humantime::format_duration(*timeout))]
    Timeout {
        kind: ConfigurationKind,
        name: String,
        timeout: Duration,
    },
    /// The leader's term ran out: nothing was sent. The elector steps down
    /// at the same instant and stops this component.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The configuration carries a newer leader's epoch.
    #[error("{} {name}: {source}", kind.as_str())]
    Deposed {
        kind: ConfigurationKind,
        name: String,
        #[source]
        source: Deposed,
    },
}

impl SelectorError {
    /// Whether trying again later can help without anything else changing
    /// first. A missing configuration or entry and an invalid policy are
    /// fixed by a change that triggers the next update anyway (the watch on
    /// the configurations, the placement ConfigMap's `ResourceChanged`).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            SelectorError::Read { .. }
                | SelectorError::Patch { .. }
                | SelectorError::Timeout { .. }
                | SelectorError::NotLeader(_)
        )
    }

    /// A patch that lost a race with another writer (its `test` of the
    /// resourceVersion failed, 422, or the update conflicted, 409).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            SelectorError::Patch {
                source: kube::Error::Api(status),
                ..
            } if status.code == 409 || status.code == 422
        )
    }
}
