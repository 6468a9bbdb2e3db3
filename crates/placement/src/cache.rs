//! The placement policy, parsed once per policy generation of the index and
//! shared by every reader (the webhook, the webhook selectors, the audit): a
//! request parses YAML only after a ConfigMap or a labelled Namespace
//! changed, and sees the change at once without following the bus.

use std::sync::Arc;

use parking_lot::Mutex;
use poolkeeper_index::PlacementView;

use crate::{PlacementError, PlacementPolicy, PolicySource};

/// The policy of one generation, or why it does not parse.
pub type LoadedPolicy = Arc<Result<PlacementPolicy, PlacementError>>;

/// Cheap to clone: clones share one cache. Components take it in their
/// settings; the binary hands every reader a clone of one cache.
#[derive(Clone, Debug)]
pub struct PolicyCache {
    inner: Arc<Inner>,
}

/// Two caches are equal when they read the same source: they hold the same
/// policy for every generation.
impl PartialEq for PolicyCache {
    fn eq(&self, other: &Self) -> bool {
        self.inner.source == other.inner.source
    }
}

impl Eq for PolicyCache {}

impl From<&poolkeeper_config::PlacementConfig> for PolicyCache {
    fn from(placement: &poolkeeper_config::PlacementConfig) -> Self {
        Self::new(PolicySource::from(placement))
    }
}

#[derive(Debug)]
struct Inner {
    source: PolicySource,
    cached: Mutex<Option<(u64, LoadedPolicy)>>,
}

impl PolicyCache {
    pub fn new(source: PolicySource) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                cached: Mutex::new(None),
            }),
        }
    }

    /// Where the policy is read from.
    pub fn source(&self) -> &PolicySource {
        &self.inner.source
    }

    /// The policy for the ConfigMaps and Namespaces in `view`.
    pub fn get(&self, view: &PlacementView<'_>) -> LoadedPolicy {
        let generation = view.policy_generation();
        if let Some((cached_generation, policy)) = &*self.inner.cached.lock()
            && *cached_generation == generation
        {
            return Arc::clone(policy);
        }
        let policy: LoadedPolicy = Arc::new(PlacementPolicy::load(view, &self.inner.source));
        let mut cached = self.inner.cached.lock();
        // Another reader may have parsed the same generation meanwhile: log once.
        if cached.as_ref().map(|(g, _)| *g) != Some(generation) {
            self.report(&policy);
            *cached = Some((generation, Arc::clone(&policy)));
        }
        policy
    }

    fn report(&self, policy: &Result<PlacementPolicy, PlacementError>) {
        let source = &self.inner.source;
        match policy {
            Ok(policy) => tracing::info!(
                %source,
                bindings = policy.bindings().count(),
                rejected_label_bindings = policy.rejected_bindings().len(),
                edge_tolerations = policy.edge_tolerations().len(),
                "placement policy loaded"
            ),
            Err(error) => tracing::error!(
                %source,
                %error,
                "placement policy is invalid: the validating webhook denies every pod until it is fixed"
            ),
        }
    }
}
