use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use poolkeeper_bus::ResourceKind;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// Metrics of the watchers. Clones share the same series.
#[derive(Clone, Debug, Default)]
pub struct WatcherMetrics {
    restarts: Family<KindLabels, Counter>,
}

impl WatcherMetrics {
    /// Registers `poolkeeper_watch_restarts_total{kind}`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "poolkeeper_watch_restarts",
            "Watch streams that failed and were restarted with backoff, by kind",
            self.restarts.clone(),
        );
    }

    pub fn restart(&self, kind: ResourceKind) {
        self.restarts
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .inc();
    }

    pub fn restarts(&self, kind: ResourceKind) -> u64 {
        self.restarts
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .get()
    }
}
