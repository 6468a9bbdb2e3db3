use std::time::Duration;

/// Why one Event was not written. Events are best-effort: these are logged,
/// never fatal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("writing the Event: {0}")]
    Write(#[source] kube::Error),
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// The leader's term ran out: the Event was dropped unsent.
    #[error(transparent)]
    NotLeader(#[from] poolkeeper_supervisor::NotLeader),
}
