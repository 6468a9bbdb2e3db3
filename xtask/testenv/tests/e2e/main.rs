//! End-to-end tests of the local control plane: each test starts its own control plane.

mod configmap;
mod controllers;
mod crd;
mod faults;
mod lifecycle;
mod scheduler;
mod webhook;

use std::time::Duration;

/// Generous bound for anything the control plane does asynchronously.
pub const TIMEOUT: Duration = Duration::from_secs(30);
