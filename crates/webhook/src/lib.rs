//! The HTTPS admission webhooks of poolkeeper's NodePool placement.
//!
//! - [`WebhookServer`]: a supervisor [`Component`](poolkeeper_supervisor::Component)
//!   serving the mutating and validating AdmissionReview endpoints over
//!   rustls (TLS 1.2+), reloading `tls.crt`/`tls.key` when they change.
//! - [`review_response`]: one AdmissionReview in, its response out — the
//!   code path the server and the offline `poolkeeper admit` share.

mod error;
mod metrics;
mod policy;
mod review;
mod server;
mod tls;

pub use error::WebhookError;
pub use metrics::{DURATION_BUCKETS, RequestResult};
pub use poolkeeper_bus::WebhookKind;
pub use poolkeeper_placement::{PlacementSettings, PolicySource};
pub use review::{NOT_READY_MESSAGE, Reviewed, not_ready_review, review, review_response};
pub use server::{COMPONENT_NAME, WebhookHandle, WebhookServer, WebhookSettings};
pub use tls::{CERT_FILE, KEY_FILE};

#[cfg(test)]
mod tests;
