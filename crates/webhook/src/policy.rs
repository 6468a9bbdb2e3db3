//! The parsed placement policy, cached by the index's ConfigMap generation
//! so a request parses YAML only after the ConfigMap changed.

use std::sync::Arc;

use parking_lot::Mutex;
use poolkeeper_index::PlacementView;
use poolkeeper_placement::{PlacementError, PlacementPolicy, PolicySource};

use crate::metrics::Metrics;

pub(crate) type LoadedPolicy = Arc<Result<PlacementPolicy, PlacementError>>;

#[derive(Debug)]
pub(crate) struct PolicyCache {
    source: PolicySource,
    cached: Mutex<Option<(u64, LoadedPolicy)>>,
    metrics: Metrics,
}

impl PolicyCache {
    pub(crate) fn new(source: PolicySource, metrics: Metrics) -> Self {
        Self {
            source,
            cached: Mutex::new(None),
            metrics,
        }
    }

    /// The policy for the ConfigMaps in `view`.
    pub(crate) fn get(&self, view: &PlacementView<'_>) -> LoadedPolicy {
        let generation = view.config_maps_generation();
        if let Some((cached_generation, policy)) = &*self.cached.lock()
            && *cached_generation == generation
        {
            return Arc::clone(policy);
        }
        let policy: LoadedPolicy = Arc::new(PlacementPolicy::load(view, &self.source));
        let mut cached = self.cached.lock();
        // Another request may have parsed the same generation meanwhile: log once.
        if cached.as_ref().map(|(g, _)| *g) != Some(generation) {
            self.report(&policy);
            *cached = Some((generation, Arc::clone(&policy)));
        }
        policy
    }

    fn report(&self, policy: &Result<PlacementPolicy, PlacementError>) {
        match policy {
            Ok(policy) => {
                self.metrics.policy_valid(true);
                tracing::info!(
                    source = %self.source,
                    bindings = policy.bindings().count(),
                    edge_tolerations = policy.edge_tolerations().len(),
                    "placement policy loaded"
                );
            }
            Err(error) => {
                self.metrics.policy_valid(false);
                tracing::error!(
                    source = %self.source,
                    %error,
                    "placement policy is invalid: pods are denied by the validating webhook until it is fixed"
                );
            }
        }
    }
}
