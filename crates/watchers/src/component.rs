//! The watcher component: one kube watch stream feeding a [`WatchBookkeeper`].

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use poolkeeper_bus::{Bus, Event};
use poolkeeper_index::Index;
use poolkeeper_supervisor::{BoxError, Component, Context};

use crate::sync::SyncedKinds;
use crate::{WatchBookkeeper, WatchedKind, WatcherMetrics, WatchersError};

/// What every watcher of one [`crate::Watchers`] set shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) index: Arc<Index>,
    pub(crate) bus: Bus,
    pub(crate) metrics: WatcherMetrics,
    pub(crate) synced: SyncedKinds,
}

/// Watches one kind and keeps it in the index. Marks itself ready after
/// the first complete list.
pub struct KindWatcher<K: WatchedKind> {
    api: Api<K>,
    config: watcher::Config,
    shared: Shared,
}

impl<K: WatchedKind> KindWatcher<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
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

impl<K: WatchedKind> KindWatcher<K>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>,
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

impl<K: WatchedKind> Component for KindWatcher<K> {
    fn name(&self) -> &'static str {
        K::COMPONENT
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        let stream = watcher(self.api, self.config).default_backoff();
        Box::pin(drive::<K, _>(stream, self.shared, ctx))
    }
}

/// Feeds `stream` into the index until `ctx` is cancelled.
pub(crate) async fn drive<K, S>(stream: S, shared: Shared, ctx: Context) -> Result<(), BoxError>
where
    K: WatchedKind,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    let mut book = WatchBookkeeper::new(K::KIND);
    loop {
        let next = tokio::select! {
            biased;
            () = ctx.cancelled() => return Ok(()),
            next = stream.next() => next,
        };
        let Some(next) = next else {
            return Err(WatchersError::StreamEnded { kind: K::KIND }.into());
        };
        let _busy = ctx.busy("applying a watch event");
        match next {
            Ok(event) => {
                let was_synced = book.is_synced();
                let events = book.apply(&shared.index, event);
                if !was_synced && book.is_synced() {
                    // Before ResourceSynced goes out, so the tracker never
                    // sees the event without the state.
                    shared.synced.insert(K::KIND);
                }
                publish(&shared.bus, events);
                if !was_synced && book.is_synced() {
                    tracing::info!(kind = %K::KIND, objects = shared.index.count(K::KIND), "initial list applied");
                    ctx.mark_ready();
                }
            }
            Err(error) => {
                shared.metrics.restart(K::KIND);
                tracing::warn!(kind = %K::KIND, %error, "watch failed, retrying with backoff");
                if let Some(event) = book.fail(&error) {
                    shared.bus.publish(event);
                }
            }
        }
    }
}

fn publish(bus: &Bus, events: Vec<Event>) {
    for event in events {
        bus.publish(event);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use poolkeeper_bus::{Change, Delivery, ObjectKey, ResourceKind, Subscription};
    use poolkeeper_supervisor::Activity;
    use tokio_util::sync::CancellationToken;

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

    fn drain(sub: &mut Subscription) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(Delivery::Event(envelope)) = sub.try_recv() {
            events.push(envelope.event.clone());
        }
        events
    }

    fn shared(bus: &Bus) -> Shared {
        Shared {
            index: Arc::new(Index::new("pool")),
            bus: bus.clone(),
            metrics: WatcherMetrics::default(),
            synced: SyncedKinds::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn drives_events_into_index_and_bus() {
        let bus = Bus::new(64);
        let mut observer = bus.subscribe("observer");
        bus.start();
        let shared = shared(&bus);
        let items: Vec<Result<watcher::Event<Node>, watcher::Error>> = vec![
            Err(watcher::Error::NoResourceVersion),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(node("n1"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(node("n2"))),
        ];
        let stream = futures::stream::iter(items).chain(futures::stream::pending());
        let cancel = CancellationToken::new();
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let ctx = Context::new(cancel.clone(), Activity::default(), ready_tx);
        let task = tokio::spawn(drive::<Node, _>(stream, shared.clone(), ctx));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert!(*ready.borrow());
        assert_eq!(shared.metrics.restarts(ResourceKind::Node), 2);
        assert!(shared.synced.contains_all(&[ResourceKind::Node].into()));
        assert_eq!(shared.index.count(ResourceKind::Node), 2);
        let kind = ResourceKind::Node;
        assert_eq!(
            drain(&mut observer),
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
                    initial: true
                },
                Event::ResourceSynced { kind },
                Event::ResourceChanged {
                    kind,
                    key: ObjectKey::cluster("n2"),
                    change: Change::Created,
                    initial: false
                },
            ]
        );
        cancel.cancel();
        assert!(task.await.expect("joins").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_stream_is_an_error() {
        let bus = Bus::new(8);
        let stream =
            futures::stream::iter(Vec::<Result<watcher::Event<Node>, watcher::Error>>::new());
        let (ready_tx, _ready) = tokio::sync::watch::channel(false);
        let ctx = Context::new(CancellationToken::new(), Activity::default(), ready_tx);
        let error = drive::<Node, _>(stream, shared(&bus), ctx)
            .await
            .expect_err("a watch stream never ends on its own");
        assert!(
            error.to_string().contains("Node watch stream ended"),
            "{error}"
        );
    }
}
