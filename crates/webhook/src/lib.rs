//! The HTTPS admission webhooks of poolkeeper's NodePool placement.
//!
//! - [`WebhookServer`]: a supervisor [`Component`](poolkeeper_supervisor::Component)
//!   serving the mutating and validating AdmissionReview endpoints over
//!   rustls (TLS 1.2+), reloading `tls.crt`/`tls.key` when they change, and
//!   publishing `AdmissionDecided` for every request.
//! - [`review_response`]: one AdmissionReview in, its response out — the
//!   code path the server and the offline `poolkeeper admit` share.

mod activity;
mod admission;
mod component;
mod connection;
mod error;
mod review;
mod serving;
mod settings;
mod source;
mod tls;
mod wire;

pub use component::{COMPONENT_NAME, WebhookServer};
pub use error::WebhookError;
pub use review::review_response;
pub use settings::WebhookSettings;
pub use tls::{CERT_FILE, KEY_FILE};

#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
