use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

/// One line of a `/healthz` or `/readyz` report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    pub name: String,
    /// `Err(reason)` when the check fails.
    pub status: Result<(), String>,
    /// What the check's owner says about a passing check (which certificate
    /// is served, which engine runs), shown by `/readyz?verbose`.
    pub detail: Option<String>,
}

/// The named liveness and readiness checks of the process, shared by the
/// supervisor (which feeds them) and the admin server (which reports them).
#[derive(Clone, Debug, Default)]
pub struct Health {
    inner: Arc<HealthInner>,
}

#[derive(Debug, Default)]
struct HealthInner {
    liveness: RwLock<BTreeMap<String, Result<(), String>>>,
    readiness: RwLock<BTreeMap<String, Result<(), String>>>,
    details: RwLock<BTreeMap<String, String>>,
}

impl Health {
    /// A readiness check that starts out failing with `reason`.
    pub(crate) fn readiness_gate(&self, name: &str, reason: &str) -> Gate {
        self.inner
            .readiness
            .write()
            .insert(name.to_string(), Err(reason.to_string()));
        Gate {
            health: self.clone(),
            name: name.to_string(),
            liveness: false,
        }
    }

    /// A liveness check that starts out passing.
    pub(crate) fn liveness_gate(&self, name: &str) -> Gate {
        self.inner.liveness.write().insert(name.to_string(), Ok(()));
        Gate {
            health: self.clone(),
            name: name.to_string(),
            liveness: true,
        }
    }

    /// Says what `name` stands for on `/readyz?verbose`: the detail of the
    /// readiness check of that name, or a passing line of its own when there
    /// is no such check (a state worth knowing that never holds readiness
    /// back, such as a missing optional API). Replaces the previous detail.
    pub fn describe(&self, name: &str, detail: impl Into<String>) {
        self.inner
            .details
            .write()
            .insert(name.to_string(), detail.into());
    }

    pub fn liveness(&self) -> Vec<CheckResult> {
        report(&self.inner.liveness.read(), &BTreeMap::new())
    }

    pub fn readiness(&self) -> Vec<CheckResult> {
        report(&self.inner.readiness.read(), &self.inner.details.read())
    }

    fn set(&self, liveness: bool, name: &str, status: Result<(), String>) {
        let map = if liveness {
            &self.inner.liveness
        } else {
            &self.inner.readiness
        };
        map.write().insert(name.to_string(), status);
    }
}

fn report(
    checks: &BTreeMap<String, Result<(), String>>,
    details: &BTreeMap<String, String>,
) -> Vec<CheckResult> {
    let described_only = details
        .keys()
        .filter(|name| !checks.contains_key(*name))
        .map(|name| (name, &Ok(())));
    let mut results: Vec<CheckResult> = checks
        .iter()
        .chain(described_only)
        .map(|(name, status)| CheckResult {
            name: name.clone(),
            status: status.clone(),
            detail: details.get(name).cloned(),
        })
        .collect();
    results.sort_by(|a, b| a.name.cmp(&b.name));
    results
}

/// The handle that sets one named check.
#[derive(Clone, Debug)]
pub struct Gate {
    health: Health,
    name: String,
    liveness: bool,
}

impl Gate {
    pub fn pass(&self) {
        self.health.set(self.liveness, &self.name, Ok(()));
    }

    /// What a verbose readiness report says of this check while it passes.
    pub fn detail(&self, detail: impl Into<String>) {
        if !self.liveness {
            self.health.describe(&self.name, detail);
        }
    }

    pub fn fail(&self, reason: impl Into<String>) {
        self.health
            .set(self.liveness, &self.name, Err(reason.into()));
    }
}
