//! Component lifecycle: ordered stages with readiness gates, stall
//! detection, graceful shutdown in reverse order, leader gating.

mod component;
mod health;

pub use component::{Activity, BoxError, BusyGuard, Component, Context};
pub use health::{CheckResult, Gate, Health};
