//! The parsed placement policy, cached by the index's ConfigMap generation:
//! a request parses YAML only after a ConfigMap changed, and sees the change
//! at once without following the bus.

use std::sync::Arc;

use parking_lot::Mutex;
use poolkeeper_index::PlacementView;
use poolkeeper_placement::{PlacementError, PlacementPolicy, PolicySource};

pub(crate) type LoadedPolicy = Arc<Result<PlacementPolicy, PlacementError>>;

#[derive(Debug)]
pub(crate) struct PolicyCache {
    source: PolicySource,
    cached: Mutex<Option<(u64, LoadedPolicy)>>,
}

impl PolicyCache {
    pub(crate) fn new(source: PolicySource) -> Self {
        Self {
            source,
            cached: Mutex::new(None),
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
            Ok(policy) => tracing::info!(
                source = %self.source,
                bindings = policy.bindings().count(),
                edge_tolerations = policy.edge_tolerations().len(),
                "placement policy loaded"
            ),
            Err(error) => tracing::error!(
                source = %self.source,
                %error,
                "placement policy is invalid: the validating webhook denies every pod until it is fixed"
            ),
        }
    }
}
