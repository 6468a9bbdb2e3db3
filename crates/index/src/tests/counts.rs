//! Object counts, and the index as a shared value: two halves that lock
//! independently.

use poolkeeper_bus::IntoEnumIterator;

use crate::{Index, IndexResource, ObjectKey, ResourceKind};

use super::{NS, config_map, counts, machine, machine_class, node, placement_fixture};

#[test]
fn object_counts_list_every_kind() {
    let index = placement_fixture();
    let all: Vec<ResourceKind> = index.object_counts().into_iter().map(|(k, _)| k).collect();
    assert_eq!(all, ResourceKind::iter().collect::<Vec<_>>());

    index.apply(machine_class(NS, "c1"));
    index.apply(machine(NS, "m1", "c1"));
    index.apply(machine(NS, "m2", "c1"));
    IndexResource::<k8s_openapi::api::core::v1::Node>::delete(&index, &ObjectKey::cluster("n4"));
    index.apply(config_map("poolkeeper-system", "placement", &[]));
    index.apply(super::secret_meta(NS, "cloud", &[]));
    let expected = [
        (ResourceKind::MachineClass, 1),
        (ResourceKind::Machine, 2),
        (ResourceKind::NodePool, 2),
        (ResourceKind::Node, 3),
        (ResourceKind::ConfigMap, 1),
        (ResourceKind::Secret, 1),
        (ResourceKind::Namespace, 0),
        (ResourceKind::PlacementException, 0),
    ];
    assert_eq!(counts(&index), expected.into_iter().collect());
}

#[test]
fn halves_lock_independently() {
    let index = placement_fixture();
    // A placement reader must not keep machine writers waiting, and the
    // reverse: with one lock these writes would deadlock this thread.
    let placement = index.placement();
    assert!(index.apply(machine(NS, "m1", "c1")).is_some());
    let machines = index.machines();
    assert!(index.placement.try_write().is_none());
    drop(placement);
    assert!(index.apply(node("n9", &[])).is_some());
    assert_eq!(machines.machines().count(), 1);
}

#[test]
fn index_is_shareable() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Index>();
    let index = placement_fixture();
    let debug = format!("{index:?}");
    assert!(debug.contains("Node: 4"), "{debug}");
    assert!(debug.contains("apps.openyurt.io/nodepool"), "{debug}");
}
