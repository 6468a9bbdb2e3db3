use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use axum::http::StatusCode;
use thiserror::Error;

/// Everything that can go wrong in the webhook: a request that is not a
/// usable AdmissionReview (answered with an HTTP error, never a panic), and
/// the server's own failures (certificate, listener).
#[derive(Debug, Error)]
pub enum WebhookError {
    #[error("request body is not valid JSON: {0}")]
    MalformedJson(String),

    #[error(
        "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got apiVersion {api_version:?} kind {kind:?}"
    )]
    WrongType { api_version: String, kind: String },

    #[error("malformed AdmissionReview: {0}")]
    MalformedReview(String),

    #[error("AdmissionReview has no request")]
    MissingRequest,

    #[error("AdmissionReview request for a Pod {operation} has no object")]
    MissingObject { operation: String },

    #[error("request.object is not a valid Pod: {0}")]
    InvalidPod(String),

    #[error("cannot encode the AdmissionReview response: {0}")]
    EncodeResponse(String),

    #[error("invalid webhook settings: {0}")]
    Settings(String),

    #[error("cannot read {path}: {source}")]
    ReadCertificate {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("invalid certificate or key in {dir}: {reason}")]
    InvalidCertificate { dir: PathBuf, reason: String },

    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },

    #[error("webhook server stopped unexpectedly: {0}")]
    Server(String),
}

impl WebhookError {
    /// The HTTP status a request error is answered with.
    pub fn status_code(&self) -> StatusCode {
        match self {
            WebhookError::MalformedJson(_)
            | WebhookError::WrongType { .. }
            | WebhookError::MalformedReview(_)
            | WebhookError::MissingRequest
            | WebhookError::MissingObject { .. }
            | WebhookError::InvalidPod(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Short, stable name for metrics and events.
    pub fn reason(&self) -> &'static str {
        match self {
            WebhookError::MalformedJson(_) => "malformed_json",
            WebhookError::WrongType { .. } => "wrong_type",
            WebhookError::MalformedReview(_) => "malformed_review",
            WebhookError::MissingRequest => "missing_request",
            WebhookError::MissingObject { .. } => "missing_object",
            WebhookError::InvalidPod(_) => "invalid_pod",
            WebhookError::EncodeResponse(_) => "encode_response",
            WebhookError::ReadCertificate { .. } | WebhookError::InvalidCertificate { .. } => {
                "certificate"
            }
            WebhookError::Settings(_) | WebhookError::Listen { .. } | WebhookError::Server(_) => {
                "server"
            }
        }
    }
}
