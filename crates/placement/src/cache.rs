//! The placement policy as the process's state: [`PolicyCache`] parses it
//! once per policy generation of the index and is the one source every
//! reader (the webhook, the webhook selectors, the audit, the reporter of
//! rejected bindings) takes it from, the excluded namespaces included. A
//! request parses YAML only after a ConfigMap or a labelled Namespace
//! changed, and sees the change at once without following the bus.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use poolkeeper_bus::{BindingRejection, RejectedBinding, ResourceKind};
use poolkeeper_index::{ObjectKey, PlacementView};

use crate::{PlacementError, PlacementPolicy, PolicySource};

/// The policy of one generation, or why it does not parse.
pub type LoadedPolicy = Arc<Result<PlacementPolicy, PlacementError>>;

/// The one holder of the placement policy; clones share it. The binary
/// builds one from `placement.*` and hands a clone to each reader.
///
/// Readers ask for the policy of the [`PlacementView`] they decide over, so
/// the policy is never older or newer than the index state it is applied
/// to (a policy pushed by a task following the bus could be).
#[derive(Clone, Debug)]
pub struct PolicyCache {
    inner: Arc<Inner>,
}

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

    /// Whether a change of this object may change the policy: the policy
    /// ConfigMap, or any Namespace (its labels may bind it).
    pub fn reads(&self, kind: ResourceKind, key: &ObjectKey) -> bool {
        match kind {
            ResourceKind::ConfigMap => *key == self.inner.source.config_map_key(),
            ResourceKind::Namespace => true,
            _ => false,
        }
    }

    /// The namespaces poolkeeper never places and whose Pods never reach
    /// its webhooks: `placement.excludedNamespaces` and poolkeeper's own
    /// namespace (the policy ConfigMap's).
    pub fn excluded_namespaces(&self) -> &BTreeSet<String> {
        &self.inner.source.excluded_namespaces
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

/// The label bindings that take no effect, as last reported: what tells
/// a new report from a repeat, and a rejection first found from one
/// already reported. Starts empty, so that a new reporter (a new leader)
/// reports every rejection as first found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportedRejections {
    reported: BTreeSet<(String, BindingRejection)>,
}

impl ReportedRejections {
    /// The rejections of `policy` to publish, each marked `first_found`
    /// unless it was reported for the same reason last time; `None` when
    /// they are the ones reported last time.
    pub fn update(&mut self, policy: &PlacementPolicy) -> Option<Vec<RejectedBinding>> {
        let now: BTreeSet<(String, BindingRejection)> = policy
            .rejected_bindings()
            .iter()
            .map(|r| (r.namespace.clone(), r.reason))
            .collect();
        if now == self.reported {
            return None;
        }
        let rejected = policy
            .rejected_bindings()
            .iter()
            .map(|r| RejectedBinding {
                first_found: !self.reported.contains(&(r.namespace.clone(), r.reason)),
                ..r.clone()
            })
            .collect();
        self.reported = now;
        Some(rejected)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use poolkeeper_config::PlacementConfig;
    use poolkeeper_index::Namespace;

    use super::*;

    /// The policy ConfigMap and every Namespace are the policy's inputs;
    /// other ConfigMaps and other kinds are not.
    #[test]
    fn the_policy_reads_its_config_map_and_every_namespace() {
        let cache = PolicyCache::from(&PlacementConfig::default());
        let own = cache.source().config_map_key();
        let other = ObjectKey::namespaced(own.namespace.clone().unwrap_or_default(), "other");
        for (kind, key, reads) in [
            (ResourceKind::ConfigMap, &own, true),
            (ResourceKind::ConfigMap, &other, false),
            (ResourceKind::Namespace, &ObjectKey::cluster("shop"), true),
            (ResourceKind::Node, &ObjectKey::cluster("edge-1"), false),
            (ResourceKind::Secret, &own, false),
        ] {
            assert_eq!(cache.reads(kind, key), reads, "{kind:?} {key}");
        }
    }

    /// The policy of ConfigMap `yaml` with each `(namespace, pool label)`
    /// labelled.
    fn policy(yaml: &str, labelled: &[(&str, &str)]) -> PlacementPolicy {
        let mut placement = PlacementConfig::default();
        placement.namespace_labels.enabled = true;
        let source = PolicySource::from(&placement);
        let namespaces: Vec<Namespace> = labelled
            .iter()
            .map(|(name, pool)| Namespace {
                name: (*name).to_owned(),
                uid: format!("uid-{name}"),
                labels: BTreeMap::from([(placement.pool_label.clone(), (*pool).to_owned())]),
            })
            .collect();
        let data = BTreeMap::from([(source.key.clone(), yaml.to_owned())]);
        PlacementPolicy::from_config_map_data(Some(&data), &source)
            .unwrap()
            .with_namespace_labels(&namespaces, &placement.namespace_labels)
    }

    /// A publication as (namespace, first found) pairs.
    type Published = Option<Vec<(String, bool)>>;

    fn reported(published: Option<Vec<RejectedBinding>>) -> Published {
        published.map(|rejected| {
            rejected
                .into_iter()
                .map(|r| (r.namespace, r.first_found))
                .collect()
        })
    }

    const CONFIG_MAP: &str = "bindings: [{namespace: shop, nodePool: cloud}]";

    #[test]
    fn each_change_of_the_rejections_is_published_once_with_what_is_new_marked() {
        let mut rejections = ReportedRejections::default();
        let owned = |list: &[(&str, bool)]| {
            Some(
                list.iter()
                    .map(|(ns, first)| ((*ns).to_owned(), *first))
                    .collect(),
            )
        };
        // (labelled namespaces, what is published)
        let steps: [(&[(&str, &str)], Published); 6] = [
            // Nothing rejected yet: nothing to say.
            (&[("team", "cloud")], None),
            (&[("shop", "edge")], owned(&[("shop", true)])),
            // The same rejection again: no repeat.
            (&[("shop", "edge"), ("team", "cloud")], None),
            (
                &[("shop", "edge"), ("kube-system", "cloud")],
                owned(&[("shop", false), ("kube-system", true)]),
            ),
            // Both labels removed: the empty list clears them.
            (&[], owned(&[])),
            (&[("shop", "edge")], owned(&[("shop", true)])),
        ];
        for (i, (labelled, expected)) in steps.into_iter().enumerate() {
            let published = rejections.update(&policy(CONFIG_MAP, labelled));
            assert_eq!(reported(published), expected, "step {i}: {labelled:?}");
        }
    }

    #[test]
    fn a_new_reporter_reports_every_rejection_as_first_found() {
        let policy = policy(CONFIG_MAP, &[("shop", "edge"), ("kube-public", "cloud")]);
        let mut first_term = ReportedRejections::default();
        assert!(first_term.update(&policy).is_some());
        assert_eq!(first_term.update(&policy), None);
        let published = ReportedRejections::default().update(&policy);
        assert_eq!(
            reported(published),
            Some(vec![
                ("shop".to_owned(), true),
                ("kube-public".to_owned(), true)
            ])
        );
    }

    #[test]
    fn the_excluded_namespaces_are_the_configured_ones_and_the_policy_config_maps() {
        let mut placement = PlacementConfig {
            excluded_namespaces: vec!["kube-system".to_owned(), "batch".to_owned()],
            ..PlacementConfig::default()
        };
        placement.policy_config_map.namespace = "pk".to_owned();
        let cache = PolicyCache::from(&placement);
        assert_eq!(
            cache.excluded_namespaces().iter().collect::<Vec<_>>(),
            ["batch", "kube-system", "pk"]
        );
    }
}
