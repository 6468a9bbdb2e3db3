use std::time::Duration;

use crate::component::BoxError;
use crate::watchdog::format_duration;

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// A stage did not become ready in time; `waiting` are the components
    /// that were not ready, each with what it was waiting for.
    #[error(
        "stage \"{stage}\" was not ready within {}: still waiting for {}",
        format_duration(*timeout),
        waiting_list(waiting)
    )]
    StartupTimeout {
        stage: String,
        timeout: Duration,
        waiting: Vec<(String, String)>,
    },

    /// A component returned an error, returned before it was asked to stop,
    /// or panicked.
    #[error("component \"{name}\" failed: {error}")]
    ComponentFailed { name: String, error: BoxError },

    /// `components` were still running when the grace period ran out and
    /// were aborted.
    #[error(
        "components did not stop within the grace period of {} and were aborted: {}",
        format_duration(*grace_period),
        quoted(components)
    )]
    ShutdownTimeout {
        grace_period: Duration,
        components: Vec<String>,
    },

    /// Liveness checks and error messages are keyed by component name.
    #[error("component name \"{name}\" is used more than once")]
    DuplicateComponent { name: String },

    #[error("leader election ended unexpectedly: {0}")]
    ElectionEnded(BoxError),
}

fn waiting_list(waiting: &[(String, String)]) -> String {
    waiting
        .iter()
        .map(|(name, reason)| format!("\"{name}\" ({reason})"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `error: cause: cause`, so that "connection refused" is not hidden behind
/// a generic "client error". A cause whose text the chain already holds is
/// not repeated.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
