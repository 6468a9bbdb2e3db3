//! The list/relist bookkeeping of one watcher, free of I/O: fed with
//! `watcher::Event`s and watch errors, it writes the index and returns the
//! bus events to publish.

use std::collections::HashSet;
use std::marker::PhantomData;

use kube::Resource;
use kube::runtime::watcher;
use poolkeeper_bus::{Event, ObjectKey, ResourceKind};
use poolkeeper_index::{Changed, Index, IndexResource, object_key};

use poolkeeper_kube::watch::{WatchFailure, classify};

/// Bookkeeping of the watch of kind `K`.
#[derive(Debug)]
pub(crate) struct WatchBookkeeper<K> {
    /// The first complete list is done.
    synced: bool,
    /// Keys seen since the last `Init`, while a (re)list is in progress.
    listing: Option<HashSet<ObjectKey>>,
    /// A watch error was reported and no event has arrived since.
    failing: bool,
    kind: PhantomData<fn(K)>,
}

impl<K: Resource> WatchBookkeeper<K>
where
    Index: IndexResource<K>,
{
    const KIND: ResourceKind = <Index as IndexResource<K>>::KIND;

    pub(crate) fn new() -> Self {
        Self {
            synced: false,
            listing: None,
            failing: false,
            kind: PhantomData,
        }
    }

    /// The first complete list has been applied.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced
    }

    /// Applies one watch event to `index` and returns what to publish:
    /// - only the first list is `initial`; objects that changed during a
    ///   relist, and everything a relist finds deleted, are live changes;
    /// - `ResourceSynced` after the first `InitDone`;
    /// - `WatchRecovered` first when the watch answers again after an error: with anything
    ///   but `Init`, which kube emits before it even sends the list request;
    /// - nothing for an object whose projection did not change.
    ///
    /// A list is applied object by object as it arrives (never buffered:
    /// a page of full Nodes is far larger than their projections); its
    /// `InitDone` removes what it lacked.
    pub(crate) fn apply(&mut self, index: &Index, event: watcher::Event<K>) -> Vec<Event> {
        let mut out = Vec::new();
        if self.failing && !matches!(event, watcher::Event::Init) {
            self.failing = false;
            out.push(Event::WatchRecovered { kind: Self::KIND });
        }
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
            }
            watcher::Event::InitApply(object) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(object_key(&object));
                }
                let initial = !self.synced;
                out.extend(index.apply(object).map(|c| Self::changed(c, initial)));
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.listing.take() {
                    // Deleted while nobody watched: a real change, never initial.
                    let removed = IndexResource::<K>::retain(index, &listed);
                    out.extend(removed.into_iter().map(|c| Self::changed(c, false)));
                }
                if !self.synced {
                    self.synced = true;
                    out.push(Event::ResourceSynced { kind: Self::KIND });
                }
            }
            watcher::Event::Apply(object) => {
                out.extend(index.apply(object).map(|c| Self::changed(c, false)));
            }
            watcher::Event::Delete(object) => {
                let deleted = IndexResource::<K>::delete(index, &object_key(&object));
                out.extend(deleted.map(|c| Self::changed(c, false)));
            }
        }
        out
    }

    /// Records a watch error; returns `WatchFailed` for the first error of
    /// a streak. A 410 Gone is kube's normal way to ask for a relist and is
    /// not reported as a failure.
    pub(crate) fn fail(&mut self, error: &watcher::Error) -> Option<Event> {
        if classify(error) == WatchFailure::Expired || self.failing {
            return None;
        }
        self.failing = true;
        Some(Event::WatchFailed {
            kind: Self::KIND,
            error: error.to_string(),
        })
    }

    /// The `ResourceChanged` for one change of the index.
    fn changed(changed: Changed, initial: bool) -> Event {
        Event::ResourceChanged {
            kind: Self::KIND,
            key: changed.key,
            change: changed.change,
            initial,
            related: changed.related,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::Status;
    use poolkeeper_api::{ClassSpec, Machine, MachineSpec};
    use poolkeeper_bus::Change;

    use super::*;

    const NS: &str = "machine-system";

    fn node(name: &str, ready: bool, heartbeat: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                resource_version: Some(heartbeat.to_owned()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".to_owned(),
                    status: if ready { "True" } else { "False" }.to_owned(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn machine(name: &str, class_name: &str) -> Machine {
        let mut machine = Machine::new(
            name,
            MachineSpec {
                class: ClassSpec {
                    name: class_name.to_owned(),
                    ..ClassSpec::default()
                },
                ..MachineSpec::default()
            },
        );
        machine.metadata.namespace = Some(NS.to_owned());
        machine
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

    /// A change of Machine `name` that referenced the classes `related`.
    fn machine_changed(name: &str, change: Change, initial: bool, related: &[&str]) -> Event {
        Event::ResourceChanged {
            kind: ResourceKind::Machine,
            key: ObjectKey::namespaced(NS, name),
            change,
            initial,
            related: related
                .iter()
                .map(|class| ObjectKey::namespaced(NS, *class))
                .collect(),
        }
    }

    fn synced(kind: ResourceKind) -> Event {
        Event::ResourceSynced { kind }
    }

    /// Feeds `steps` in order, checking what each one publishes.
    fn run<K: Resource + std::fmt::Debug>(
        index: &Index,
        book: &mut WatchBookkeeper<K>,
        steps: Vec<(watcher::Event<K>, Vec<Event>)>,
    ) where
        Index: IndexResource<K>,
    {
        for (i, (event, expected)) in steps.into_iter().enumerate() {
            let what = format!("step {i}: {event:?}");
            assert_eq!(book.apply(index, event), expected, "{what}");
        }
    }

    #[test]
    fn first_list_is_initial_then_live() {
        let index = Index::new("pool");
        let mut book = WatchBookkeeper::<Node>::new();
        run(
            &index,
            &mut book,
            vec![
                (watcher::Event::Init, vec![]),
                (
                    watcher::Event::InitApply(node("n1", true, "1")),
                    vec![node_changed("n1", Change::Created, true)],
                ),
                (
                    watcher::Event::InitApply(node("n2", false, "2")),
                    vec![node_changed("n2", Change::Created, true)],
                ),
                (watcher::Event::InitDone, vec![synced(ResourceKind::Node)]),
                (
                    watcher::Event::Apply(node("n3", true, "3")),
                    vec![node_changed("n3", Change::Created, false)],
                ),
                (
                    watcher::Event::Apply(node("n2", true, "4")),
                    vec![node_changed("n2", Change::Updated, false)],
                ),
                (
                    watcher::Event::Delete(node("n1", true, "5")),
                    vec![node_changed("n1", Change::Deleted, false)],
                ),
                // A delete of something the index never had publishes nothing.
                (watcher::Event::Delete(node("n9", true, "6")), vec![]),
            ],
        );
        assert!(book.is_synced());
        assert_eq!(index.object_count(ResourceKind::Node), 2);
    }

    #[test]
    fn unchanged_projection_publishes_nothing() {
        let index = Index::new("pool");
        let mut book = WatchBookkeeper::<Node>::new();
        run(
            &index,
            &mut book,
            vec![
                (watcher::Event::Init, vec![]),
                (
                    watcher::Event::InitApply(node("n1", true, "1")),
                    vec![node_changed("n1", Change::Created, true)],
                ),
                (watcher::Event::InitDone, vec![synced(ResourceKind::Node)]),
                // Heartbeats: new resourceVersion, same projection.
                (watcher::Event::Apply(node("n1", true, "2")), vec![]),
                (watcher::Event::Apply(node("n1", true, "3")), vec![]),
            ],
        );
    }

    #[test]
    fn relist_reports_deletes_and_changes_as_live() {
        let index = Index::new("pool");
        let mut book = WatchBookkeeper::<Node>::new();
        run(
            &index,
            &mut book,
            vec![
                (watcher::Event::Init, vec![]),
                (
                    watcher::Event::InitApply(node("n1", true, "1")),
                    vec![node_changed("n1", Change::Created, true)],
                ),
                (
                    watcher::Event::InitApply(node("n2", true, "1")),
                    vec![node_changed("n2", Change::Created, true)],
                ),
                (
                    watcher::Event::InitApply(node("n3", true, "1")),
                    vec![node_changed("n3", Change::Created, true)],
                ),
                (watcher::Event::InitDone, vec![synced(ResourceKind::Node)]),
                // Relist after a 410: n2 gone, n3 changed, n4 new, n1 the same.
                (watcher::Event::Init, vec![]),
                (watcher::Event::InitApply(node("n1", true, "9")), vec![]),
                (
                    watcher::Event::InitApply(node("n3", false, "9")),
                    vec![node_changed("n3", Change::Updated, false)],
                ),
                (
                    watcher::Event::InitApply(node("n4", true, "9")),
                    vec![node_changed("n4", Change::Created, false)],
                ),
                // No second ResourceSynced.
                (
                    watcher::Event::InitDone,
                    vec![node_changed("n2", Change::Deleted, false)],
                ),
            ],
        );
        let view = index.placement();
        let names: Vec<&str> = view.nodes().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n1", "n3", "n4"]);
    }

    #[test]
    fn relist_with_nothing_left_empties_the_kind() {
        let index = Index::new("pool");
        let mut book = WatchBookkeeper::<Machine>::new();
        run(
            &index,
            &mut book,
            vec![
                (watcher::Event::Init, vec![]),
                (
                    watcher::Event::InitApply(machine("m1", "c1")),
                    vec![machine_changed("m1", Change::Created, true, &["c1"])],
                ),
                (
                    watcher::Event::InitDone,
                    vec![synced(ResourceKind::Machine)],
                ),
                (watcher::Event::Init, vec![]),
                (
                    watcher::Event::InitDone,
                    vec![machine_changed("m1", Change::Deleted, false, &["c1"])],
                ),
            ],
        );
        assert_eq!(index.machines().machines_of_class(NS, "c1").count(), 0);
    }

    #[test]
    fn restart_over_a_warm_index_reports_what_changed_meanwhile() {
        // A new watcher instance (process restart with a kept index, or a
        // second watcher) lists into an index that already holds objects.
        let index = Index::new("pool");
        index.apply(machine("m1", "c1"));
        index.apply(machine("gone", "c1"));
        let mut book = WatchBookkeeper::<Machine>::new();
        run(
            &index,
            &mut book,
            vec![
                (watcher::Event::Init, vec![]),
                (watcher::Event::InitApply(machine("m1", "c1")), vec![]),
                (
                    watcher::Event::InitApply(machine("m2", "c2")),
                    vec![machine_changed("m2", Change::Created, true, &["c2"])],
                ),
                (
                    watcher::Event::InitDone,
                    vec![
                        machine_changed("gone", Change::Deleted, false, &["c1"]),
                        synced(ResourceKind::Machine),
                    ],
                ),
            ],
        );
    }

    #[test]
    fn machine_class_change_is_an_update() {
        let index = Index::new("pool");
        let mut book = WatchBookkeeper::<Machine>::new();
        book.apply(&index, watcher::Event::Init::<Machine>);
        book.apply(&index, watcher::Event::InitApply(machine("m1", "c1")));
        book.apply(&index, watcher::Event::<Machine>::InitDone);
        assert_eq!(
            book.apply(&index, watcher::Event::Apply(machine("m1", "c2"))),
            vec![machine_changed("m1", Change::Updated, false, &["c1", "c2"])]
        );
        let view = index.machines();
        assert_eq!(view.machines_of_class(NS, "c1").count(), 0);
        assert_eq!(view.machines_of_class(NS, "c2").count(), 1);
    }

    #[test]
    fn failures_are_reported_once_per_streak() {
        let index = Index::new("pool");
        let mut book = WatchBookkeeper::<Node>::new();
        let failure = watcher::Error::NoResourceVersion;
        let gone = watcher::Error::WatchError(
            Status::failure("too old", "Expired").with_code(410).boxed(),
        );
        let failed = Event::WatchFailed {
            kind: ResourceKind::Node,
            error: failure.to_string(),
        };
        assert_eq!(book.fail(&failure), Some(failed.clone()));
        assert_eq!(book.fail(&failure), None);
        // kube emits Init before it sends the list: no sign of recovery yet.
        assert_eq!(book.apply(&index, watcher::Event::<Node>::Init), vec![]);
        assert_eq!(
            book.apply(&index, watcher::Event::<Node>::InitDone),
            vec![
                Event::WatchRecovered {
                    kind: ResourceKind::Node
                },
                synced(ResourceKind::Node)
            ]
        );
        // 410 Gone is a relist request, not a failure, wherever kube reports it.
        assert_eq!(book.fail(&gone), None);
        let expired_continue = watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure("continue too old", "Expired")
                .with_code(410)
                .boxed(),
        ));
        assert_eq!(book.fail(&expired_continue), None);
        assert_eq!(book.apply(&index, watcher::Event::<Node>::Init), vec![]);
        // A new streak is reported again.
        assert_eq!(book.fail(&failure), Some(failed));
        assert_eq!(
            book.apply(&index, watcher::Event::Apply(node("n1", true, "1"))),
            vec![
                Event::WatchRecovered {
                    kind: ResourceKind::Node
                },
                node_changed("n1", Change::Created, false)
            ]
        );
    }

    #[test]
    fn a_list_that_keeps_failing_is_one_failure_not_a_flap() {
        // A missing CRD: every list fails, and kube emits Init before each.
        let index = Index::new("pool");
        let mut book = WatchBookkeeper::<Node>::new();
        let missing = watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure("not found", "NotFound")
                .with_code(404)
                .boxed(),
        ));
        let mut published = Vec::new();
        for _ in 0..3 {
            published.extend(book.apply(&index, watcher::Event::<Node>::Init));
            published.extend(book.fail(&missing));
        }
        published.extend(book.apply(&index, watcher::Event::<Node>::Init));
        published.extend(book.apply(&index, watcher::Event::InitApply(node("n1", true, "1"))));
        assert_eq!(
            published,
            vec![
                Event::WatchFailed {
                    kind: ResourceKind::Node,
                    error: missing.to_string(),
                },
                Event::WatchRecovered {
                    kind: ResourceKind::Node
                },
                node_changed("n1", Change::Created, true),
            ]
        );
    }
}
