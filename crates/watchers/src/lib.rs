//! Kubernetes watches that keep the [`Index`] current.
//!
//! One watcher [`Component`] per enabled kind (MachineClass and Machine in
//! the configured namespace, NodePool and Node cluster-wide, the placement
//! ConfigMap) converts each object to its compact projection, writes the
//! index and publishes `ResourceChanged` only when the projection changed.
//! After its first complete list a watcher publishes `ResourceSynced` and
//! reports ready; the sync tracker publishes `IndexSynchronized` once every
//! enabled kind has synced.
//!
//! Watch failures never stop a watcher: kube's watcher relists after a 410
//! and the stream backs off between retries. Failures are published as
//! `WatchFailed` (once per failure streak) and `WatchRecovered`.

mod bookkeeping;
mod component;
mod kinds;
mod metrics;
mod sync;

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Client;
use poolkeeper_api::{Machine, MachineClass, NodePool};
use poolkeeper_bus::{Bus, ObjectKey, ResourceKind};
use poolkeeper_index::Index;
use poolkeeper_supervisor::{Component, Gate};
use prometheus_client::registry::Registry;

pub use bookkeeping::WatchBookkeeper;
use component::KindWatcher;
pub use kinds::WatchedKind;
pub use metrics::WatcherMetrics;
pub use sync::{SyncTracker, SyncedKinds};

/// What to watch and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatcherSettings {
    /// The kinds to watch; kinds of a disabled feature are left out.
    pub kinds: BTreeSet<ResourceKind>,
    /// Where MachineClasses and Machines live.
    pub namespace: String,
    /// Objects per page of an initial list.
    pub page_size: u32,
    /// The placement ConfigMap (watched when `kinds` holds ConfigMap).
    pub placement_config_map: ObjectKey,
    /// The label that assigns a Node to a pool; must be the one the index
    /// was built with.
    pub pool_label: String,
}

impl WatcherSettings {
    /// MachineClass and Machine.
    pub const MACHINE_KINDS: [ResourceKind; 2] =
        [ResourceKind::MachineClass, ResourceKind::Machine];
    /// NodePool, Node and the placement ConfigMap.
    pub const PLACEMENT_KINDS: [ResourceKind; 3] = [
        ResourceKind::NodePool,
        ResourceKind::Node,
        ResourceKind::ConfigMap,
    ];

    /// The kinds the two features need.
    pub fn kinds_for(machine_classes: bool, placement: bool) -> BTreeSet<ResourceKind> {
        let mut kinds = BTreeSet::new();
        if machine_classes {
            kinds.extend(Self::MACHINE_KINDS);
        }
        if placement {
            kinds.extend(Self::PLACEMENT_KINDS);
        }
        kinds
    }
}

impl Default for WatcherSettings {
    fn default() -> Self {
        Self {
            kinds: ResourceKind::ALL.into_iter().collect(),
            namespace: "machine-system".to_owned(),
            page_size: 500,
            placement_config_map: ObjectKey::namespaced(
                "poolkeeper-system",
                "poolkeeper-placement",
            ),
            pool_label: "apps.openyurt.io/nodepool".to_owned(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WatchersError {
    #[error(
        "the index groups nodes by label {index:?} but the watchers are set up for {settings:?}"
    )]
    PoolLabelMismatch { index: String, settings: String },
    #[error("the placement ConfigMap {name:?} needs a namespace")]
    ConfigMapWithoutNamespace { name: String },
    #[error("watchers.pageSize must be at least 1")]
    ZeroPageSize,
    #[error("the {kind} watch stream ended")]
    StreamEnded { kind: ResourceKind },
}

/// The watcher components for the enabled kinds plus the sync tracker.
pub struct Watchers {
    components: Vec<Box<dyn Component>>,
    tracker: SyncTracker,
    metrics: WatcherMetrics,
}

impl Watchers {
    /// Builds one watcher per enabled kind and the sync tracker. Subscribes
    /// to `bus`, so call it before the bus starts.
    pub fn new(
        client: Client,
        bus: &Bus,
        index: Arc<Index>,
        settings: &WatcherSettings,
    ) -> Result<Self, WatchersError> {
        if index.pool_label() != settings.pool_label {
            return Err(WatchersError::PoolLabelMismatch {
                index: index.pool_label().to_owned(),
                settings: settings.pool_label.clone(),
            });
        }
        if settings.page_size == 0 {
            return Err(WatchersError::ZeroPageSize);
        }
        let metrics = WatcherMetrics::default();
        let synced = SyncedKinds::default();
        let mut components: Vec<Box<dyn Component>> = Vec::new();
        for kind in &settings.kinds {
            let shared = component::Shared {
                index: Arc::clone(&index),
                bus: bus.clone(),
                metrics: metrics.clone(),
                synced: synced.clone(),
            };
            let namespace = settings.namespace.as_str();
            let page_size = settings.page_size;
            let watcher: Box<dyn Component> = match kind {
                ResourceKind::MachineClass => Box::new(KindWatcher::<MachineClass>::namespaced(
                    client.clone(),
                    namespace,
                    page_size,
                    shared,
                )),
                ResourceKind::Machine => Box::new(KindWatcher::<Machine>::namespaced(
                    client.clone(),
                    namespace,
                    page_size,
                    shared,
                )),
                ResourceKind::NodePool => Box::new(KindWatcher::<NodePool>::cluster(
                    client.clone(),
                    page_size,
                    shared,
                )),
                ResourceKind::Node => Box::new(KindWatcher::<Node>::cluster(
                    client.clone(),
                    page_size,
                    shared,
                )),
                ResourceKind::ConfigMap => {
                    let key = &settings.placement_config_map;
                    let namespace = key.namespace.as_deref().ok_or_else(|| {
                        WatchersError::ConfigMapWithoutNamespace {
                            name: key.name.clone(),
                        }
                    })?;
                    Box::new(KindWatcher::<ConfigMap>::single(
                        client.clone(),
                        namespace,
                        &key.name,
                        shared,
                    ))
                }
            };
            components.push(watcher);
        }
        let tracker = SyncTracker::new(bus, settings.kinds.clone(), synced);
        Ok(Self {
            components,
            tracker,
            metrics,
        })
    }

    /// Registers `poolkeeper_watch_restarts_total{kind}`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    /// Passes `gate` (the `index` readiness check) once the index is
    /// synchronized.
    pub fn with_readiness_gate(mut self, gate: Gate) -> Self {
        self.tracker = self.tracker.with_gate(gate);
        self
    }

    /// The components, watchers first and the sync tracker last.
    pub fn into_components(self) -> Vec<Box<dyn Component>> {
        let mut components = self.components;
        components.push(Box::new(self.tracker));
        components
    }
}

#[cfg(test)]
mod tests {
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
                WatcherSettings::kinds_for(true, true),
                vec![
                    "machine-class-watcher",
                    "machine-watcher",
                    "node-pool-watcher",
                    "node-watcher",
                    "config-map-watcher",
                    "index-sync-tracker",
                ],
            ),
            (
                WatcherSettings::kinds_for(true, false),
                vec![
                    "machine-class-watcher",
                    "machine-watcher",
                    "index-sync-tracker",
                ],
            ),
            (
                WatcherSettings::kinds_for(false, true),
                vec![
                    "node-pool-watcher",
                    "node-watcher",
                    "config-map-watcher",
                    "index-sync-tracker",
                ],
            ),
            (BTreeSet::new(), vec!["index-sync-tracker"]),
        ];
        for (kinds, expected) in cases {
            let settings = WatcherSettings {
                kinds: kinds.clone(),
                ..WatcherSettings::default()
            };
            let index = Arc::new(Index::new(&settings.pool_label));
            let watchers =
                Watchers::new(client(), &Bus::default(), index, &settings).expect("valid settings");
            assert_eq!(names(watchers), expected, "{kinds:?}");
        }
    }

    #[tokio::test]
    async fn invalid_settings_are_rejected() {
        type Edit = fn(&mut WatcherSettings);
        let cases: [(&str, Edit, &str); 3] = [
            (
                "pool label",
                |s| s.pool_label = "other".into(),
                "groups nodes by label",
            ),
            ("page size", |s| s.page_size = 0, "pageSize"),
            (
                "config map namespace",
                |s| s.placement_config_map = ObjectKey::cluster("cm"),
                "needs a namespace",
            ),
        ];
        for (what, edit, message) in cases {
            let mut settings = WatcherSettings::default();
            let index = Arc::new(Index::new(&settings.pool_label));
            edit(&mut settings);
            let error = Watchers::new(client(), &Bus::default(), index, &settings)
                .err()
                .unwrap_or_else(|| panic!("{what}: accepted"));
            assert!(error.to_string().contains(message), "{what}: {error}");
        }
    }

    #[tokio::test]
    async fn registers_restart_metric() {
        let settings = WatcherSettings::default();
        let index = Arc::new(Index::new(&settings.pool_label));
        let watchers = Watchers::new(client(), &Bus::default(), index, &settings).expect("valid");
        let mut registry = Registry::default();
        watchers.register_metrics(&mut registry);
        watchers.metrics.restart(ResourceKind::Node);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains(r#"poolkeeper_watch_restarts_total{kind="Node"} 1"#),
            "{text}"
        );
    }
}
