//! The benchmark's one error type.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    #[error(transparent)]
    TestEnv(#[from] poolkeeper_testenv::TestEnvError),
    #[error("{context}: {source}")]
    Kube {
        context: String,
        source: kube::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{context}: {source}")]
    Json {
        context: String,
        source: serde_json::Error,
    },
    #[error("{what}: not done within {}", humanize(*timeout))]
    Timeout { what: String, timeout: Duration },
    #[error("poolkeeper exited ({status}) before {what}; last lines of its log:\n{log_tail}")]
    PoolkeeperExited {
        what: String,
        status: std::process::ExitStatus,
        log_tail: String,
    },
    #[error("{0}")]
    Unexpected(String),
}

pub type Result<T, E = ScaleError> = std::result::Result<T, E>;

impl ScaleError {
    pub fn kube(context: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            context: context.into(),
            source,
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    pub fn json(context: impl Into<String>, source: serde_json::Error) -> Self {
        Self::Json {
            context: context.into(),
            source,
        }
    }

    pub fn timeout(what: impl Into<String>, timeout: Duration) -> Self {
        Self::Timeout {
            what: what.into(),
            timeout,
        }
    }
}

fn humanize(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
