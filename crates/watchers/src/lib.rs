//! Kubernetes watches that keep the [`Index`] current.
//!
//! One watcher [`Component`] per enabled kind (MachineClass and Machine in
//! the configured namespace, NodePool and Node cluster-wide, the placement
//! ConfigMap, the Namespaces carrying the namespace pool label) writes each object into the index through
//! [`IndexResource`](poolkeeper_index::IndexResource) and publishes
//! `ResourceChanged` only when the projection changed. After its first
//! complete list a watcher records its kind in the set it shares with the
//! sync tracker and publishes `ResourceSynced`; the tracker publishes
//! `IndexSynchronized` once every enabled kind has synced and is the `index`
//! readiness check until then.
//!
//! Watch failures never stop a watcher: a 410 relists at once, other errors
//! back off (capped, jittered, ended early once the API server is seen coming
//! back), with the retry policy every watch of the process shares
//! ([`poolkeeper_kube::watch`]). Failures are published as `WatchFailed`
//! (once per failure streak) and `WatchRecovered`.

mod bookkeeping;
mod component;
mod sync;

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::core::PartialObjectMeta;
use poolkeeper_api::{Machine, MachineClass, NodePool, PlacementException};
use poolkeeper_bus::{Bus, ResourceKind};
use poolkeeper_config::Config;
use poolkeeper_index::{Index, NodeSummary};
use poolkeeper_supervisor::Component;

use component::{KindWatcher, Shared};
use sync::{SyncTracker, SyncedKinds};

/// What to watch and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatcherSettings {
    /// The kinds to watch: MachineClass and Machine when
    /// `machineClasses.enabled` (and the metadata of Secrets when
    /// `machineClasses.protectSecrets` too), NodePool, Node and the
    /// placement ConfigMap when `placement.enabled` (and the labelled
    /// Namespaces when `placement.namespaceLabels.enabled` too).
    pub kinds: BTreeSet<ResourceKind>,
    /// `namespace`: where MachineClasses and Machines live.
    pub namespace: String,
    /// `watchers.pageSize`: objects per page of a list.
    pub page_size: u32,
    /// `placement.policyConfigMap.namespace`.
    pub config_map_namespace: String,
    /// `placement.policyConfigMap.name`: the one ConfigMap watched.
    pub config_map_name: String,
    /// `placement.namespaceLabels.pool`: the label a watched Namespace
    /// carries.
    pub namespace_pool_label: String,
}

impl From<&Config> for WatcherSettings {
    fn from(config: &Config) -> Self {
        let mut kinds = BTreeSet::new();
        if config.machine_classes.enabled {
            kinds.extend([ResourceKind::MachineClass, ResourceKind::Machine]);
            if config.machine_classes.protect_secrets {
                kinds.insert(ResourceKind::Secret);
            }
        }
        if config.placement.enabled {
            kinds.extend([
                ResourceKind::NodePool,
                ResourceKind::Node,
                ResourceKind::ConfigMap,
            ]);
            if config.placement.namespace_labels.enabled {
                kinds.insert(ResourceKind::Namespace);
            }
            kinds.insert(ResourceKind::PlacementException);
        }
        let config_map = &config.placement.policy_config_map;
        Self {
            kinds,
            namespace: config.namespace.clone(),
            page_size: config.watchers.page_size,
            config_map_namespace: config_map.namespace.clone(),
            config_map_name: config_map.name.clone(),
            namespace_pool_label: config.placement.namespace_labels.pool.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WatchersError {
    #[error("the {kind} watch stream ended")]
    StreamEnded { kind: ResourceKind },
}

/// The watcher components for the enabled kinds plus the sync tracker.
pub struct Watchers {
    components: Vec<Box<dyn Component>>,
    tracker: SyncTracker,
}

impl Watchers {
    /// Builds one watcher per enabled kind and the sync tracker. Subscribes
    /// to `bus`, so call it before the bus starts.
    pub fn new(settings: &WatcherSettings, bus: &Bus, client: Client, index: Arc<Index>) -> Self {
        debug_assert!(
            settings.page_size > 0,
            "the configuration rules out pageSize 0"
        );
        let synced = SyncedKinds::default();
        let components = settings
            .kinds
            .iter()
            .map(|kind| {
                let shared = Shared {
                    index: Arc::clone(&index),
                    bus: bus.clone(),
                    synced: synced.clone(),
                };
                watcher(*kind, client.clone(), settings, shared)
            })
            .collect();
        let tracker = SyncTracker::new(bus, settings.kinds.clone(), synced);
        Self {
            components,
            tracker,
        }
    }

    /// The components, watchers first and the sync tracker last.
    pub fn into_components(self) -> Vec<Box<dyn Component>> {
        let mut components = self.components;
        components.push(Box::new(self.tracker));
        components
    }
}

fn watcher(
    kind: ResourceKind,
    client: Client,
    settings: &WatcherSettings,
    shared: Shared,
) -> Box<dyn Component> {
    let namespace = settings.namespace.as_str();
    let page_size = settings.page_size;
    match kind {
        ResourceKind::MachineClass => Box::new(KindWatcher::<MachineClass>::namespaced(
            client, namespace, page_size, shared,
        )),
        ResourceKind::Machine => Box::new(KindWatcher::<Machine>::namespaced(
            client, namespace, page_size, shared,
        )),
        ResourceKind::NodePool => {
            Box::new(KindWatcher::<NodePool>::cluster(client, page_size, shared))
        }
        ResourceKind::PlacementException => Box::new(
            KindWatcher::<PlacementException>::everywhere(client, page_size, shared),
        ),
        // Every kubelet heartbeat is a watch event: decoded into only what the
        // index projects, it allocates next to nothing (see `NodeSummary`).
        ResourceKind::Node => Box::new(KindWatcher::<NodeSummary>::cluster(
            client, page_size, shared,
        )),
        ResourceKind::ConfigMap => Box::new(KindWatcher::<ConfigMap>::single(
            client,
            &settings.config_map_namespace,
            &settings.config_map_name,
            shared,
        )),
        // `Api<PartialObjectMeta<_>>` lists and watches metadata only: the API
        // server never sends a Secret's data (see `poolkeeper_index::Secret`).
        ResourceKind::Secret => Box::new(KindWatcher::<PartialObjectMeta<Secret>>::namespaced(
            client, namespace, page_size, shared,
        )),
        ResourceKind::Namespace => Box::new(KindWatcher::<Namespace>::labelled(
            client,
            &settings.namespace_pool_label,
            page_size,
            shared,
        )),
    }
}

#[cfg(test)]
mod tests {
    use poolkeeper_bus::IntoEnumIterator;

    use super::*;

    fn client() -> Client {
        let url = "http://127.0.0.1:9".parse().expect("valid URL");
        Client::try_from(kube::Config::new(url)).expect("client without connecting")
    }

    fn names(watchers: Watchers) -> Vec<&'static str> {
        watchers
            .into_components()
            .iter()
            .map(|component| component.name())
            .collect()
    }

    #[tokio::test]
    async fn one_component_per_enabled_kind_plus_tracker() {
        let cases = [
            (
                true,
                true,
                vec![
                    "machine-class-watcher",
                    "machine-watcher",
                    "node-pool-watcher",
                    "node-watcher",
                    "config-map-watcher",
                    "secret-watcher",
                    "namespace-watcher",
                    "placement-exception-watcher",
                    "index-sync-tracker",
                ],
            ),
            (
                true,
                false,
                vec![
                    "machine-class-watcher",
                    "machine-watcher",
                    "secret-watcher",
                    "index-sync-tracker",
                ],
            ),
            (
                false,
                true,
                vec![
                    "node-pool-watcher",
                    "node-watcher",
                    "config-map-watcher",
                    "namespace-watcher",
                    "placement-exception-watcher",
                    "index-sync-tracker",
                ],
            ),
            (false, false, vec!["index-sync-tracker"]),
        ];
        for (machine_classes, placement, expected) in cases {
            let mut config = Config::default();
            config.machine_classes.enabled = machine_classes;
            config.placement.enabled = placement;
            let settings = WatcherSettings::from(&config);
            let index = Arc::new(Index::new(&config.placement.pool_label));
            let watchers = Watchers::new(&settings, &Bus::default(), client(), index);
            assert_eq!(
                names(watchers),
                expected,
                "machineClasses {machine_classes}, placement {placement}"
            );
        }
    }

    #[tokio::test]
    async fn secrets_are_watched_only_while_protected() {
        let mut config = Config::default();
        config.machine_classes.protect_secrets = false;
        let settings = WatcherSettings::from(&config);
        assert!(!settings.kinds.contains(&ResourceKind::Secret));
        let index = Arc::new(Index::new(&config.placement.pool_label));
        let watchers = Watchers::new(&settings, &Bus::default(), client(), index);
        assert!(!names(watchers).contains(&"secret-watcher"));
    }

    #[tokio::test]
    async fn namespaces_are_watched_only_while_they_may_bind() {
        let mut config = Config::default();
        config.placement.namespace_labels.enabled = false;
        let settings = WatcherSettings::from(&config);
        assert!(!settings.kinds.contains(&ResourceKind::Namespace));
        let index = Arc::new(Index::new(&config.placement.pool_label));
        let watchers = Watchers::new(&settings, &Bus::default(), client(), index);
        assert!(!names(watchers).contains(&"namespace-watcher"));
    }

    #[test]
    fn settings_come_from_the_config() {
        let config = Config::from_yaml_str(
            "namespace: machines\nwatchers: {pageSize: 50}\nplacement:\n  policyConfigMap: {namespace: ops, name: placement}\n  namespaceLabels: {pool: example.com/pool}\n",
        )
        .expect("valid config");
        let settings = WatcherSettings::from(&config);
        assert_eq!(
            settings,
            WatcherSettings {
                kinds: ResourceKind::iter().collect(),
                namespace: "machines".to_owned(),
                page_size: 50,
                config_map_namespace: "ops".to_owned(),
                config_map_name: "placement".to_owned(),
                namespace_pool_label: "example.com/pool".to_owned(),
            }
        );
    }

    #[tokio::test]
    async fn only_the_tracker_is_a_readiness_check() {
        let settings = WatcherSettings::from(&Config::default());
        let index = Arc::new(Index::new("pool"));
        let components =
            Watchers::new(&settings, &Bus::default(), client(), index).into_components();
        let checks: Vec<Option<&str>> = components.iter().map(|c| c.readiness_check()).collect();
        let (watchers, tracker) = checks.split_at(checks.len() - 1);
        assert_eq!(watchers.len(), ResourceKind::iter().count());
        assert!(watchers.iter().all(Option::is_none), "{checks:?}");
        assert_eq!(tracker, [Some("index")]);
    }
}

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
