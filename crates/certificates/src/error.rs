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
    #[error("the Secret has no ca.crt to publish")]
    NoCaCert,
    #[error("the Secret still changes after {0} writes in one pass")]
    Unsettled(usize),
}

impl CertificateError {
    /// A lost race (409 Conflict, 422 from a failed patch test): retried soon.
    pub fn is_conflict(&self) -> bool {
        matches!(self, CertificateError::Api { source: kube::Error::Api(status), .. } if status.code == 409 || status.code == 422)
    }
}
