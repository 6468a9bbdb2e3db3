//! poolkeeper's own serving certificate (`webhook.certificate.source:
//! self`): the leader issues a CA and a serving certificate for the
//! webhook Service into one Secret, renews and rotates them, and keeps the
//! caBundle of both webhook configurations in step; with source `secret`
//! it only publishes the Secret's CA.
//!
//! - [`plan`] decides, purely, from the Secret's contents and the time.
//! - [`issue`] issues what a plan calls for (rcgen).
//! - [`WebhookCertificates`] is the leader-only component.

mod bundle;
mod component;
mod error;
mod issue;
mod plan;
mod settings;

pub use bundle::{CA_INJECTOR_ANNOTATIONS, StoredBundles, bundle_patch};
pub use component::WebhookCertificates;
pub use error::CertificateError;

pub use issue::{IssueError, issue};
pub use plan::{BACKDATE, CaReason, LeafProblem, LeafReason, Plan, Stored, plan};
pub use settings::{CertificateSettings, Lifetimes, service_dns_names};

#[cfg(test)]
mod tests;
