//! Component lifecycle: ordered stages with readiness gates, stall
//! detection, graceful shutdown in reverse order, leader gating.

mod component;
mod drain;
mod error;
mod health;
mod leader;
mod signal;
mod supervisor;
mod tasks;
mod term;
#[cfg(feature = "testing")]
pub mod testing;
mod watchdog;

pub use component::{BoxError, Component, Context, Readiness};
pub use drain::Drained;
pub use error::{SupervisorError, error_chain};
pub use health::{CheckResult, Health};
pub use leader::{LeaderElector, LeaderGated, LeadershipReporter};
pub use signal::shutdown_signal;
pub use supervisor::{SHUTDOWN_CHECK, StageBuilder, Supervisor, SupervisorSettings, sleep_until};
pub use term::{LeaderTerm, NotLeader, TermState, WritePermit};
pub use watchdog::{Activity, BusyGuard, format_duration};

#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
