use thiserror::Error;

/// Everything that can go wrong in this crate: reading the placement policy
/// and reading an objects file for offline evaluation. Placement decisions
/// themselves never fail — they allow or deny.
///
/// Parse errors are kept typed but shown in the message rather than as a
/// source: the message is what an admission response or a command line
/// prints, on one line (YAML errors without their source snippet).
#[derive(Debug, Error)]
pub enum PlacementError {
    /// The policy is not YAML of the expected shape (syntax error, unknown
    /// field, wrong type); the message carries the line and column.
    #[error("{origin}: {}", yaml_error_message(.error))]
    PolicySyntax {
        origin: String,
        error: Box<serde_saphyr::Error>,
    },

    /// The policy parsed but breaks a rule; each problem is `path: reason`.
    #[error("{origin} is invalid: {}", .problems.join("; "))]
    PolicyInvalid {
        origin: String,
        problems: Vec<String>,
    },

    /// An objects file is not valid multi-document YAML.
    #[error("objects file: {}", yaml_error_message(.error))]
    ObjectsSyntax { error: Box<serde_saphyr::Error> },

    /// A document of an objects file is not a mapping.
    #[error("objects file, document {document}: not a Kubernetes object (expected a mapping)")]
    NotAnObject { document: usize },

    /// A `List` document whose `items` is not a sequence.
    #[error("objects file, document {document}: List items must be a sequence")]
    ListItems { document: usize },

    /// An object of a kind the objects file reads does not parse as one.
    #[error("objects file, document {document}: invalid {kind} {name:?}: {error}")]
    InvalidObject {
        document: usize,
        kind: &'static str,
        name: String,
        error: serde_json::Error,
    },

    /// An object without `metadata.name`.
    #[error("objects file, document {document}: {kind} without metadata.name")]
    Unnamed { document: usize, kind: &'static str },

    /// A Pod manifest is not YAML.
    #[error("pod manifest: {}", yaml_error_message(.error))]
    PodSyntax { error: Box<serde_saphyr::Error> },

    /// A Pod manifest holds no Pod (or more than one document).
    #[error(
        "pod manifest: expected one Pod (kind: Pod, apiVersion: v1) or workload (Deployment, \
         ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, ReplicationController), found {found}"
    )]
    NotAPod { found: String },

    /// A Pod manifest whose placement fields do not parse.
    #[error("pod manifest: invalid Pod: {error}")]
    InvalidPod { error: serde_json::Error },

    /// The same object twice.
    #[error(
        "objects file, document {document}: duplicate {kind} {name:?} (first in document {first})"
    )]
    Duplicate {
        document: usize,
        kind: &'static str,
        name: String,
        first: usize,
    },
}

/// serde-saphyr's one-line rendering (`line L column C: problem`), without
/// the source snippet, so it fits an admission message and a log line.
pub(crate) fn yaml_error_message(error: &serde_saphyr::Error) -> String {
    let text = error.without_snippet().to_string();
    match text.strip_prefix("error: ") {
        Some(rest) => rest.to_owned(),
        None => text,
    }
}
