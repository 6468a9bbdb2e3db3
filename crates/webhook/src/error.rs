use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::StatusCode;
use poolkeeper_supervisor::BoxError;
use thiserror::Error;

/// Everything that can go wrong in the webhook: a request that is not a
/// usable AdmissionReview (answered with an HTTP error, never a panic), and
/// the server's own failures (certificate, listener).
///
/// The JSON errors are shown in the message rather than as a source: the
/// message is the body of the HTTP 400 the API server logs.
#[derive(Debug, Error)]
pub enum WebhookError {
    #[error("request body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },

    #[error("request body not received within {timeout:?}")]
    BodyTimeout { timeout: Duration },

    #[error("cannot read the request body: {0}")]
    ReadBody(#[source] BoxError),

    #[error("request body is not valid JSON: {0}")]
    MalformedJson(serde_json::Error),

    #[error(
        "request body is not valid JSON: it is not UTF-8 (invalid bytes from offset {})",
        .0.valid_up_to()
    )]
    NotUtf8(std::str::Utf8Error),

    #[error(
        "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got apiVersion {api_version:?} kind {kind:?}"
    )]
    WrongType { api_version: String, kind: String },

    #[error("malformed AdmissionReview: {0}")]
    MalformedReview(serde_json::Error),

    #[error("AdmissionReview has no request")]
    MissingRequest,

    #[error("AdmissionReview request for a Pod {operation} has no object")]
    MissingObject { operation: &'static str },

    #[error("request.object is not a valid Pod: {0}")]
    InvalidPod(serde_json::Error),

    #[error("request.object or request.oldObject is not a valid workload: {0}")]
    InvalidWorkload(poolkeeper_placement::PlacementError),

    #[error("cannot encode the AdmissionReview response: {0}")]
    EncodeResponse(serde_json::Error),

    #[error("cannot read {path}: {source}")]
    ReadCertificate {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{path} does not parse as PEM: {source}")]
    Pem {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },

    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },

    #[error("webhook.certificate.source reads a Secret, but the server has no Kubernetes client")]
    NoClient,

    #[error("the certificate and key in {dir} cannot be served: {source}")]
    UnusableCertificate {
        dir: PathBuf,
        #[source]
        source: rustls::Error,
    },

    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },

    #[error("the HTTPS server on {addr} stopped before shutdown")]
    ServerEnded { addr: SocketAddr },

    #[error("the HTTPS server task on {addr} failed: {source}")]
    ServerTask {
        addr: SocketAddr,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl WebhookError {
    /// The HTTP status a request error is answered with.
    pub fn status_code(&self) -> StatusCode {
        match self {
            WebhookError::MalformedJson(_)
            | WebhookError::NotUtf8(_)
            | WebhookError::WrongType { .. }
            | WebhookError::MalformedReview(_)
            | WebhookError::MissingRequest
            | WebhookError::MissingObject { .. }
            | WebhookError::InvalidPod(_)
            | WebhookError::InvalidWorkload(_)
            | WebhookError::ReadBody(_) => StatusCode::BAD_REQUEST,
            WebhookError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            WebhookError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Short, stable name for events and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            WebhookError::BodyTooLarge { .. } => "body_too_large",
            WebhookError::BodyTimeout { .. } => "body_timeout",
            WebhookError::ReadBody(_) => "unreadable_body",
            WebhookError::MalformedJson(_) | WebhookError::NotUtf8(_) => "malformed_json",
            WebhookError::WrongType { .. } => "wrong_type",
            WebhookError::MalformedReview(_) => "malformed_review",
            WebhookError::MissingRequest => "missing_request",
            WebhookError::MissingObject { .. } => "missing_object",
            WebhookError::InvalidPod(_) => "invalid_pod",
            WebhookError::InvalidWorkload(_) => "invalid_workload",
            WebhookError::EncodeResponse(_) => "encode_response",
            WebhookError::ReadCertificate { .. }
            | WebhookError::Pem { .. }
            | WebhookError::NoCertificate { .. }
            | WebhookError::UnusableCertificate { .. }
            | WebhookError::NoClient => "certificate",
            WebhookError::Listen { .. }
            | WebhookError::ServerEnded { .. }
            | WebhookError::ServerTask { .. } => "server",
        }
    }
}
