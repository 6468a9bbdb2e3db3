//! Kubernetes plumbing shared by poolkeeper's components and its binary: the client
//! ([`client`]), the API server startup check ([`ApiServerCheck`]), the retry policy of
//! watches ([`watch`]), the one exponential [`Backoff`], and leader election on a Lease
//! ([`LeaseElector`] around the pure [`LeaseDecider`]), which plugs into the supervisor's
//! leader gating as a [`poolkeeper_supervisor::LeaderElector`] and confirms the
//! [`poolkeeper_supervisor::LeaderTerm`] every leader write asks first, and the [`fencing`] of
//! the objects poolkeeper alone owns by the term's epoch.

mod apiserver;
mod backoff;
mod client;
mod elector;
pub mod fencing;
mod lease;
pub mod watch;

pub use apiserver::{APISERVER_CHECK, ApiServerCheck, ApiServerUnreachable};
pub use backoff::Backoff;
pub use client::{ClientError, client};
pub use elector::{LeaseElector, LeaseError, LeaseSettings};
pub use fencing::{Deposed, Fence, LEADER_EPOCH_ANNOTATION, refused, stamp, version_precondition};
pub use lease::{LeaseAction, LeaseDecider, LeaseRecord};

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
