use thiserror::Error;

/// Everything that can go wrong in this crate: reading the placement policy
/// and reading an objects file for offline evaluation. Placement decisions
/// themselves never fail — they allow or deny.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlacementError {
    /// The policy is not YAML of the expected shape (syntax error, unknown
    /// field, wrong type); the message carries the line and column.
    #[error("{origin}: {message}")]
    PolicySyntax { origin: String, message: String },

    /// The policy parsed but breaks a rule; each problem is `path: reason`.
    #[error("{origin} is invalid: {}", .problems.join("; "))]
    PolicyInvalid {
        origin: String,
        problems: Vec<String>,
    },

    /// An objects file is not valid multi-document YAML.
    #[error("objects file: {message}")]
    ObjectsSyntax { message: String },

    /// One object of an objects file could not be read.
    #[error("objects file, document {document}: {message}")]
    Object { document: usize, message: String },
}
