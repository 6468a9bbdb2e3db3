//! The watcher component: one kube watch stream feeding a [`WatchBookkeeper`].

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use poolkeeper_bus::{Bus, Event, ResourceKind};
use poolkeeper_index::{Index, IndexResource};
use poolkeeper_kube::watch::{
    self, Probe, ReadyzProbe, RetryPolicy, WatchFailure, classify, relists_by_itself, wait_out,
};
use poolkeeper_supervisor::{BoxError, Component, Context, format_duration};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

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
        ResourceKind::Secret => "secret-watcher",
        ResourceKind::Namespace => "namespace-watcher",
        ResourceKind::PlacementException => "placement-exception-watcher",
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

    /// Watches every object of `K` in every namespace.
    pub(crate) fn everywhere(client: Client, page_size: u32, shared: Shared) -> Self {
        Self {
            api: Api::all(client),
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

    /// Watches the objects of the cluster-scoped `K` that carry the label
    /// `key`; one that loses it leaves the watch as a delete.
    pub(crate) fn labelled(client: Client, key: &str, page_size: u32, shared: Shared) -> Self {
        Self {
            api: Api::all(client),
            config: watcher::Config::default().labels(key).page_size(page_size),
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
        let Self {
            api,
            config,
            shared,
        } = *self;
        let probe = ReadyzProbe::new(Client::from(api.clone()));
        let connect = move || watcher(api.clone(), config.clone());
        let retry = RetryPolicy::new(watch::backoff());
        Box::pin(async move { drive::<K, _, _>(connect, &probe, retry, shared, ctx).await })
    }
}

/// Feeds the watch stream `connect` builds into the index until `ctx` is cancelled, waiting
/// after errors as `retry` says (see [`poolkeeper_kube::watch`]). A new stream (a fresh list) replaces
/// one that kube would retry at an expired resourceVersion forever.
pub(crate) async fn drive<K, S, F>(
    mut connect: F,
    probe: &dyn Probe,
    mut retry: RetryPolicy,
    shared: Shared,
    ctx: Context,
) -> Result<(), BoxError>
where
    K: Watched,
    Index: IndexResource<K>,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    F: FnMut() -> S + Send,
{
    let kind = <Index as IndexResource<K>>::KIND;
    ctx.waiting_for(format!("waiting for the first list of {kind}"));
    let mut stream = Box::pin(connect());
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
        let error = match next {
            Ok(event) => {
                if !matches!(event, watcher::Event::Init) {
                    retry.on_success();
                }
                let _busy = ctx.busy("applying a watch event");
                apply(&mut book, event, &shared, &ctx);
                continue;
            }
            Err(error) => error,
        };
        let failure = classify(&error);
        let delay = retry.on_failure(failure, Instant::now());
        report(kind, failure, &error, delay, &mut book, &shared);
        if failure == WatchFailure::Expired && !relists_by_itself(&error) {
            stream = Box::pin(connect());
        }
        if !delay.is_zero() {
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Ok(()),
                waited = wait_out(delay, probe) => {
                    tracing::debug!(%kind, waited = waited.as_str(), "retrying the watch");
                }
            }
        }
    }
}

/// Logs a watch error and publishes `WatchFailed` for the first of a streak.
fn report<K: Watched>(
    kind: ResourceKind,
    failure: WatchFailure,
    error: &watcher::Error,
    delay: Duration,
    book: &mut WatchBookkeeper<K>,
    shared: &Shared,
) where
    Index: IndexResource<K>,
{
    let why = failure.as_str();
    match book.fail(error) {
        Some(event) => {
            tracing::warn!(%kind, %error, why, retry_in = %format_duration(delay), "watch failed, retrying");
            shared.bus.publish(event);
        }
        None if failure == WatchFailure::Expired && delay.is_zero() => {
            tracing::info!(%kind, %error, "resourceVersion expired, relisting now");
        }
        None => tracing::debug!(
            %kind,
            %error,
            why,
            retry_in = %format_duration(delay),
            "watch failed again, retrying"
        ),
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
        shared.synced.insert(kind);
    }
    for event in events {
        if matches!(event, Event::WatchRecovered { .. }) {
            tracing::info!(%kind, "watch recovered");
        }
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
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::stream::BoxStream;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::Status;
    use poolkeeper_bus::{Change, Event, ObjectKey};
    use poolkeeper_index::NodeSummary as Node;
    use poolkeeper_supervisor::testing::{BusRecorder, spawn};

    use super::*;
    use poolkeeper_kube::watch::ProbeAnswer;

    type Item = Result<watcher::Event<Node>, watcher::Error>;

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

    fn refused() -> watcher::Error {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(io)))
    }

    fn expired() -> Box<Status> {
        Status::failure("too old resource version: 200 (203)", "Expired")
            .with_code(410)
            .boxed()
    }

    fn list(names: &[&str]) -> Vec<Item> {
        let mut items = vec![Ok(watcher::Event::Init)];
        items.extend(
            names
                .iter()
                .map(|name| Ok(watcher::Event::InitApply(node(name)))),
        );
        items.push(Ok(watcher::Event::InitDone));
        items
    }

    /// How a scripted stream goes on after its items.
    enum Then {
        Pending,
        End,
        /// The same error forever, as kube's watcher retrying one resourceVersion.
        Repeat(fn() -> watcher::Error),
    }

    fn script(items: Vec<Item>, then: Then) -> BoxStream<'static, Item> {
        let items = futures::stream::iter(items);
        match then {
            Then::Pending => items.chain(futures::stream::pending()).boxed(),
            Then::End => items.boxed(),
            Then::Repeat(error) => items
                .chain(futures::stream::repeat_with(move || Err(error())))
                .boxed(),
        }
    }

    /// The API server as the probe sees it: unreachable until `up_at`, then ready; or
    /// always the same answer.
    enum TestProbe {
        UpAt(Instant),
        Always(ProbeAnswer),
    }

    impl Probe for TestProbe {
        fn probe(&self) -> BoxFuture<'_, ProbeAnswer> {
            let answer = match self {
                Self::UpAt(at) if Instant::now() < *at => ProbeAnswer::Unreachable,
                Self::UpAt(_) => ProbeAnswer::Ready,
                Self::Always(answer) => *answer,
            };
            Box::pin(async move { answer })
        }
    }

    /// A component driving scripted streams, one per (re)connect, as the watcher drives
    /// kube's; no jitter.
    struct Scripted {
        streams: VecDeque<BoxStream<'static, Item>>,
        probe: TestProbe,
        shared: Shared,
        connects: Arc<AtomicUsize>,
    }

    impl Scripted {
        fn new(streams: Vec<BoxStream<'static, Item>>, probe: TestProbe, shared: &Shared) -> Self {
            Self {
                streams: streams.into(),
                probe,
                shared: shared.clone(),
                connects: Arc::default(),
            }
        }
    }

    impl Component for Scripted {
        fn name(&self) -> &'static str {
            "scripted-node-watcher"
        }

        fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
            let Self {
                mut streams,
                probe,
                shared,
                connects,
            } = *self;
            let connect = move || {
                connects.fetch_add(1, Ordering::SeqCst);
                streams
                    .pop_front()
                    .unwrap_or_else(|| futures::stream::pending().boxed())
            };
            let retry = RetryPolicy::new(watch::backoff().with_random(|| 0.0));
            Box::pin(async move { drive::<Node, _, _>(connect, &probe, retry, shared, ctx).await })
        }
    }

    fn node_changed(name: &str, change: Change, initial: bool) -> Event {
        Event::ResourceChanged {
            kind: ResourceKind::Node,
            key: ObjectKey::cluster(name),
            change,
            initial,
            related: vec![],
        }
    }

    #[tokio::test(start_paused = true)]
    async fn drives_events_into_index_and_bus() {
        let bus = Bus::new(64);
        let recorder = BusRecorder::new(&bus);
        bus.start();
        let shared = shared(&bus);
        let mut items = vec![
            Err(watcher::Error::NoResourceVersion),
            Err(watcher::Error::NoResourceVersion),
        ];
        items.extend(list(&["n1"]));
        items.push(Ok(watcher::Event::Apply(node("n2"))));
        let probe = TestProbe::Always(ProbeAnswer::Ready);
        let scripted = Scripted::new(vec![script(items, Then::Pending)], probe, &shared);
        let mut running = spawn(Box::new(scripted));
        running.wait_ready(Duration::from_secs(10)).await;
        assert!(shared.synced.contains_all(&[ResourceKind::Node].into()));
        let kind = ResourceKind::Node;
        let last = node_changed("n2", Change::Created, false);
        recorder
            .wait_for(Duration::from_secs(1), |e| *e == last)
            .await;
        assert_eq!(shared.index.object_count(kind), 2);
        let timed = recorder.timed();
        let events: Vec<&Event> = timed.iter().map(|(_, e)| e).collect();
        assert_eq!(
            events,
            [
                &Event::WatchFailed {
                    kind,
                    error: watcher::Error::NoResourceVersion.to_string()
                },
                &Event::WatchRecovered { kind },
                &node_changed("n1", Change::Created, true),
                &Event::ResourceSynced { kind },
                &last,
            ]
        );
        // Rejected twice while the API server is ready: 1 s, then 2 s of backoff.
        assert_eq!(timed[1].0, Duration::from_secs(3), "{timed:?}");
        assert!(running.stop().await.is_ok());
    }

    /// The defect seen by hand: after an outage every watch got 410 on reconnect and waited
    /// out a backoff that had grown during the outage. A 410 relists at once.
    #[tokio::test(start_paused = true)]
    async fn an_expired_version_after_failures_relists_at_once() {
        let bus = Bus::new(64);
        let recorder = BusRecorder::new(&bus);
        bus.start();
        let shared = shared(&bus);
        let mut items = list(&["n1"]);
        items.extend([Err(refused()), Err(refused()), Err(refused())]);
        items.push(Err(watcher::Error::WatchError(expired())));
        items.extend(list(&["n1", "n2"]));
        // The probe cannot tell (forbidden): the backoff alone decides, 1 + 2 + 4 s.
        let probe = TestProbe::Always(ProbeAnswer::Unusable);
        let scripted = Scripted::new(vec![script(items, Then::Pending)], probe, &shared);
        let running = spawn(Box::new(scripted));
        let created = node_changed("n2", Change::Created, false);
        recorder
            .wait_for(Duration::from_secs(60), |e| *e == created)
            .await;
        let timed = recorder.timed();
        let at = |wanted: &Event| timed.iter().find(|(_, e)| e == wanted).map(|(t, _)| *t);
        assert_eq!(at(&created), Some(Duration::from_secs(7)), "{timed:?}");
        assert_eq!(
            recorder.count(|e| matches!(e, Event::WatchFailed { .. })),
            1,
            "one failure streak, the 410 is none: {timed:?}"
        );
        assert!(running.stop().await.is_ok());
    }

    /// A relist that lacks an object reports its delete: the restart seen through the probe,
    /// the relist started the moment the API server is ready again.
    #[tokio::test(start_paused = true)]
    async fn a_relist_after_an_outage_reports_the_deletes_when_the_server_is_back() {
        let bus = Bus::new(64);
        let recorder = BusRecorder::new(&bus);
        bus.start();
        let shared = shared(&bus);
        let mut items = list(&["n1", "n2"]);
        items.push(Err(refused()));
        items.push(Err(watcher::Error::WatchError(expired())));
        items.extend(list(&["n1"]));
        let up_at = Instant::now() + Duration::from_millis(10_200);
        let scripted = Scripted::new(
            vec![script(items, Then::Pending)],
            TestProbe::UpAt(up_at),
            &shared,
        );
        let running = spawn(Box::new(scripted));
        let deleted = node_changed("n2", Change::Deleted, false);
        recorder
            .wait_for(Duration::from_secs(60), |e| *e == deleted)
            .await;
        let timed = recorder.timed();
        let (at, _) = timed.iter().find(|(_, e)| *e == deleted).unwrap();
        // Probes every 500 ms: the first one after 10.2 s answers at 10.5 s.
        assert_eq!(*at, Duration::from_millis(10_500), "{timed:?}");
        assert_eq!(shared.index.object_count(ResourceKind::Node), 1);
        assert!(shared.index.placement().node("n2").is_none());
        assert!(running.stop().await.is_ok());
    }

    /// kube retries a failed watch start at the same resourceVersion; after a 410 that
    /// never succeeds, so a new watcher (a fresh list) takes over at once.
    #[tokio::test(start_paused = true)]
    async fn an_expired_watch_start_starts_a_new_watcher() {
        let bus = Bus::new(64);
        let recorder = BusRecorder::new(&bus);
        bus.start();
        let shared = shared(&bus);
        let stale = script(
            list(&["n1", "n2"]),
            Then::Repeat(|| watcher::Error::WatchStartFailed(kube::Error::Api(expired()))),
        );
        let fresh = script(list(&["n2"]), Then::Pending);
        let probe = TestProbe::Always(ProbeAnswer::Ready);
        let scripted = Scripted::new(vec![stale, fresh], probe, &shared);
        let connects = Arc::clone(&scripted.connects);
        let running = spawn(Box::new(scripted));
        let deleted = node_changed("n1", Change::Deleted, false);
        recorder
            .wait_for(Duration::from_secs(1), |e| *e == deleted)
            .await;
        assert_eq!(connects.load(Ordering::SeqCst), 2);
        assert_eq!(
            recorder.timed().last().map(|(t, _)| *t),
            Some(Duration::ZERO)
        );
        assert!(running.stop().await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_first_list() {
        let bus = Bus::new(8);
        let shared = shared(&bus);
        let items = vec![Ok(watcher::Event::Init)];
        let probe = TestProbe::Always(ProbeAnswer::Ready);
        let scripted = Scripted::new(vec![script(items, Then::Pending)], probe, &shared);
        let running = spawn(Box::new(scripted));
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
        let shared = shared(&bus);
        let probe = TestProbe::Always(ProbeAnswer::Ready);
        let scripted = Scripted::new(vec![script(Vec::new(), Then::End)], probe, &shared);
        let running = spawn(Box::new(scripted));
        let error = running
            .join()
            .await
            .expect_err("a watch stream never ends on its own");
        assert!(
            error.to_string().contains("Node watch stream ended"),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_backing_off_stops_when_cancelled() {
        let bus = Bus::new(8);
        let shared = shared(&bus);
        let probe = TestProbe::Always(ProbeAnswer::Unreachable);
        let scripted = Scripted::new(
            vec![script(vec![Err(refused())], Then::Pending)],
            probe,
            &shared,
        );
        let running = spawn(Box::new(scripted));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(running.stop().await.is_ok());
    }
}
