use thiserror::Error;

/// Why an audit round, or reading the cluster for one, failed.
#[derive(Debug, Error)]
pub enum AuditError {
    /// A LIST of Pods failed (the round is abandoned; the next one retries).
    #[error("listing {query} failed: {source}")]
    ListPods {
        query: String,
        #[source]
        source: kube::Error,
    },
    /// The placement policy does not parse: nothing can be judged.
    /// The policy's own error, as the shared policy cache holds it.
    #[error("the placement policy is invalid: {0}")]
    Policy(String),
    /// Reading Nodes, NodePools or the placement ConfigMap for a one-off
    /// audit or explanation failed.
    #[error("reading {what} failed: {source}")]
    ReadCluster {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}
