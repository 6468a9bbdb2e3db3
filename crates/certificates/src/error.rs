/// Why a pass of the certificate component failed; every one is retried.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("{what}: {source}")]
    Api {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{0}: no answer within the request timeout")]
    Timeout(&'static str),
    #[error("{0} poolkeeper is missing: it is the installer's to create")]
    ConfigurationMissing(&'static str),
    #[error(transparent)]
    Issue(#[from] crate::issue::IssueError),
    #[error("the Secret still changes after {0} writes in one pass")]
    Unsettled(usize),
    #[error("not written: {0}")]
    NotLeader(#[from] poolkeeper_supervisor::NotLeader),
    /// The object carries a newer leader's epoch: nothing more is written.
    #[error("{what}: {source}")]
    Deposed {
        what: &'static str,
        #[source]
        source: poolkeeper_kube::Deposed,
    },
}

impl CertificateError {
    /// A lost race (409 Conflict, 422 from a failed patch test): retried
    /// soon, after reading the objects again (a newer leader's epoch on them
    /// then stops the writes).
    pub fn is_conflict(&self) -> bool {
        matches!(self, CertificateError::Api { source, .. } if poolkeeper_kube::refused(source))
    }
}
