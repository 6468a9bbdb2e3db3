use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use poolkeeper_bus::ResourceKind;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

pub(crate) struct Metrics {
    objects: Family<KindLabels, Gauge>,
    /// One gauge per kind in [`ResourceKind::ALL`] order, resolved once so
    /// writes skip the label lookup (and every kind reports 0 from the start).
    by_kind: Vec<Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let objects = Family::<KindLabels, Gauge>::default();
        let by_kind = ResourceKind::ALL
            .iter()
            .map(|kind| {
                objects
                    .get_or_create(&KindLabels {
                        kind: kind.as_str(),
                    })
                    .clone()
            })
            .collect();
        Self { objects, by_kind }
    }
}

impl Metrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "poolkeeper_index_objects",
            "Objects held in the index, by kind",
            self.objects.clone(),
        );
    }

    pub(crate) fn set(&self, kind: ResourceKind, count: usize) {
        let position = ResourceKind::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_default();
        if let Some(gauge) = self.by_kind.get(position) {
            gauge.set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}
