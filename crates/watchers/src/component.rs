//! The watcher component: one kube watch stream feeding a [`WatchBookkeeper`].

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use poolkeeper_bus::{Bus, ResourceKind};
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_supervisor::{BoxError, Component, Context};
use serde::de::DeserializeOwned;

use crate::WatchersError;
use crate::bookkeeping::WatchBookkeeper;
use crate::sync::SyncedKinds;

/// What kube's watcher needs of a watched type.
pub(crate) trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// The component name of the watcher of `kind`.
fn component_name(kind: ResourceKind) -> &'static str {
    match kind {
        ResourceKind::MachineClass => "machine-class-watcher",
        ResourceKind::Machine => "machine-watcher",
        ResourceKind::NodePool => "node-pool-watcher",
        ResourceKind::Node => "node-watcher",
        ResourceKind::ConfigMap => "config-map-watcher",
    }
}

/// What every watcher of one [`crate::Watchers`] set shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) index: Arc<Index>,
    pub(crate) bus: Bus,
    pub(crate) synced: SyncedKinds,
}

/// Watches one kind and keeps it in the index. Ready after the first
/// complete list.
pub(crate) struct KindWatcher<K: Watched> {
    api: Api<K>,
    config: watcher::Config,
    shared: Shared,
}

impl<K> KindWatcher<K>
where
    K: Watched + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    /// Watches every object of `K` in `namespace`.
    pub(crate) fn namespaced(
        client: Client,
        namespace: &str,
        page_size: u32,
        shared: Shared,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            config: watcher::Config::default().page_size(page_size),
            shared,
        }
    }

    /// Watches the single object `namespace/name` (a field selector).
    pub(crate) fn single(client: Client, namespace: &str, name: &str, shared: Shared) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            config: watcher::Config::default().fields(&format!("metadata.name={name}")),
            shared,
        }
    }
}

impl<K> KindWatcher<K>
where
    K: Watched + Resource<Scope = k8s_openapi::ClusterResourceScope>,
{
    /// Watches every object of the cluster-scoped `K`.
    pub(crate) fn cluster(client: Client, page_size: u32, shared: Shared) -> Self {
        Self {
            api: Api::all(client),
            config: watcher::Config::default().page_size(page_size),
            shared,
        }
    }
}

impl<K: Watched> Component for KindWatcher<K>
where
    Index: IndexResource<K>,
{
    fn name(&self) -> &'static str {
        component_name(<Index as IndexResource<K>>::KIND)
    }

    /// The sync tracker's `index` check speaks for every watcher.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        let stream = watcher(self.api, self.config).default_backoff();
        Box::pin(drive::<K, _>(stream, self.shared, ctx))
    }
}

/// Feeds `stream` into the index until `ctx` is cancelled.
pub(crate) async fn drive<K, S>(stream: S, shared: Shared, ctx: Context) -> Result<(), BoxError>
where
    K: Watched,
    Index: IndexResource<K>,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let kind = <Index as IndexResource<K>>::KIND;
    ctx.waiting_for(format!("waiting for the first list of {kind}"));
    let mut stream = std::pin::pin!(stream);
    let mut book = WatchBookkeeper::<K>::new();
    loop {
        let next = tokio::select! {
            biased;
            () = ctx.cancelled() => return Ok(()),
            next = stream.next() => next,
        };
        let Some(next) = next else {
            return Err(WatchersError::StreamEnded { kind }.into());
        };
        let _busy = ctx.busy("applying a watch event");
        match next {
            Ok(event) => apply(&mut book, event, &shared, &ctx),
            Err(error) => {
                tracing::warn!(%kind, %error, "watch failed, retrying with backoff");
                if let Some(event) = book.fail(&error) {
                    shared.bus.publish(event);
                }
            }
        }
    }
}

/// Applies one watch event and publishes what it changed; the first
/// complete list makes the watcher ready.
fn apply<K: Watched>(
    book: &mut WatchBookkeeper<K>,
    event: watcher::Event<K>,
    shared: &Shared,
    ctx: &Context,
) where
    Index: IndexResource<K>,
{
    let kind = <Index as IndexResource<K>>::KIND;
    let was_synced = book.is_synced();
    let events = book.apply(&shared.index, event);
    let just_synced = !was_synced && book.is_synced();
    if just_synced {
        // Before ResourceSynced goes out, so the tracker never sees the
        // event without the state.
        shared.synced.insert(kind);
    }
    for event in events {
        shared.bus.publish(event);
    }
    if just_synced {
        let objects = shared.index.object_count(kind);
        tracing::info!(%kind, objects, "initial list applied");
        ctx.mark_ready();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use poolkeeper_bus::{Change, Event, ObjectKey};
    use poolkeeper_supervisor::testing::{EventRecorder, spawn};

    use super::*;

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn shared(bus: &Bus) -> Shared {
        Shared {
            index: Arc::new(Index::new("pool")),
            bus: bus.clone(),
            synced: SyncedKinds::default(),
        }
    }

    /// A component driving a scripted stream, as the watcher drives kube's.
    struct Scripted {
        items: Vec<Result<watcher::Event<Node>, watcher::Error>>,
        shared: Shared,
        then_pending: bool,
    }

    impl Component for Scripted {
        fn name(&self) -> &'static str {
            "scripted-node-watcher"
        }

        fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
            let items = futures::stream::iter(self.items);
            if self.then_pending {
                let stream = items.chain(futures::stream::pending());
                Box::pin(drive::<Node, _>(stream, self.shared, ctx))
            } else {
                Box::pin(drive::<Node, _>(items, self.shared, ctx))
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn drives_events_into_index_and_bus() {
        let bus = Bus::new(64);
        let recorder = EventRecorder::new(&bus);
        bus.start();
        let shared = shared(&bus);
        let items = vec![
            Err(watcher::Error::NoResourceVersion),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(node("n1"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(node("n2"))),
        ];
        let mut running = spawn(Box::new(Scripted {
            items,
            shared: shared.clone(),
            then_pending: true,
        }));
        running.wait_ready(Duration::from_secs(1)).await;
        assert!(shared.synced.contains_all(&[ResourceKind::Node].into()));
        let kind = ResourceKind::Node;
        let last = Event::ResourceChanged {
            kind,
            key: ObjectKey::cluster("n2"),
            change: Change::Created,
            initial: false,
            related: vec![],
        };
        recorder
            .wait_for(Duration::from_secs(1), |e| *e == last)
            .await;
        assert_eq!(shared.index.object_count(kind), 2);
        assert_eq!(
            recorder.events(),
            vec![
                Event::WatchFailed {
                    kind,
                    error: watcher::Error::NoResourceVersion.to_string()
                },
                Event::WatchRecovered { kind },
                Event::ResourceChanged {
                    kind,
                    key: ObjectKey::cluster("n1"),
                    change: Change::Created,
                    initial: true,
                    related: vec![],
                },
                Event::ResourceSynced { kind },
                last,
            ]
        );
        assert!(running.stop().await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_first_list() {
        let bus = Bus::new(8);
        let items = vec![Ok(watcher::Event::Init)];
        let running = spawn(Box::new(Scripted {
            items,
            shared: shared(&bus),
            then_pending: true,
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            running.waiting_reason().as_deref(),
            Some("waiting for the first list of Node")
        );
        assert!(running.stop().await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_stream_is_an_error() {
        let bus = Bus::new(8);
        let running = spawn(Box::new(Scripted {
            items: Vec::new(),
            shared: shared(&bus),
            then_pending: false,
        }));
        let error = running
            .join()
            .await
            .expect_err("a watch stream never ends on its own");
        assert!(
            error.to_string().contains("Node watch stream ended"),
            "{error}"
        );
    }
}
