//! A local Kubernetes control plane (etcd, kube-apiserver, and optionally kube-scheduler and
//! kube-controller-manager) for
//! end-to-end tests and for `cargo xtask dev`.
//!
//! ```no_run
//! # async fn example() -> Result<(), poolkeeper_testenv::TestEnvError> {
//! use poolkeeper_testenv::TestEnv;
//!
//! let env = TestEnv::builder().scheduler(true).start().await?;
//! env.create_namespace("e2e").await?;
//! let client = env.client();
//! # let _ = client;
//! # Ok(())
//! # }
//! ```
//!
//! Every [`TestEnv`] owns its processes, ports and temporary directory and releases them on
//! drop, including when a test panics.

mod binaries;
mod certs;
mod env;
mod etcd;
mod kubeconfig;
mod manifests;
mod process;
mod proxy;

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

pub use binaries::{
    Binaries, default_binaries_dir, deploy_dir, kubernetes_version, openreports_crds,
};
pub use certs::WebhookCert;
pub use env::{Process, START_ATTEMPTS, TestEnv, TestEnvBuilder, eventually};
pub use manifests::{WebhookRegistration, parse_yaml_documents, yaml_files};
pub use process::free_port;
pub use proxy::ApiProxy;

/// Field manager of every server-side apply done by this crate.
pub const FIELD_MANAGER: &str = "poolkeeper-testenv";

#[derive(thiserror::Error)]
pub enum TestEnvError {
    #[error(
        "control-plane binaries not found in {} ({source_of_dir}): missing {}. \
         Run `cargo xtask control-plane` to build them, or set KUBEBUILDER_ASSETS to a directory \
         holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl",
        dir.display(),
        missing.join(", ")
    )]
    BinariesNotFound {
        dir: PathBuf,
        source_of_dir: String,
        missing: Vec<String>,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("generating certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("starting {process} ({}): {source}", program.display())]
    Spawn {
        process: &'static str,
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{process} exited during startup ({status}); last lines of its log:\n{log_tail}")]
    Exited {
        process: &'static str,
        status: ExitStatus,
        log_tail: String,
    },
    #[error("{what}: not done within {timeout:?}{details}")]
    Timeout {
        what: String,
        timeout: Duration,
        details: String,
    },
    #[error("{context}: {source}")]
    Kube {
        context: String,
        source: kube::Error,
    },
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("{origin}: {message}")]
    InvalidManifest { origin: String, message: String },
    /// A process was asked to start or stop in a state that does not allow it.
    #[error("{process} is {state}")]
    ProcessState {
        process: &'static str,
        state: &'static str,
    },
    /// etcd's HTTP gateway (`/v3/...`) answered with an error or something unreadable.
    #[error("etcd {request}: {message}")]
    Etcd {
        request: &'static str,
        message: String,
    },
}

/// Tests mostly `unwrap()` these errors, which prints `Debug`: the readable message (with its
/// multi-line log excerpts) serves better there than the derived structure.
impl std::fmt::Debug for TestEnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)?;
        // Each message already shows its direct source; deeper causes follow on their own lines.
        let mut source = std::error::Error::source(self).and_then(std::error::Error::source);
        while let Some(cause) = source {
            write!(f, "\ncaused by: {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl TestEnvError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn kube(context: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn manifest(origin: impl Into<String>, message: impl ToString) -> Self {
        Self::InvalidManifest {
            origin: origin.into(),
            message: message.to_string(),
        }
    }

    /// A child lost the race for a port that was free when it was picked.
    pub(crate) fn is_port_conflict(&self) -> bool {
        matches!(self, Self::Exited { log_tail, .. } if log_tail.contains("address already in use"))
    }
}
