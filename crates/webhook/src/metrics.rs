use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Admission latency buckets, in seconds: decisions are in-memory, so the
/// interesting range starts well below a millisecond.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    webhook: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    result: &'static str,
}

/// What a request came to, as the `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestResult {
    Allowed,
    Denied,
    Patched,
    Error,
}

impl RequestResult {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestResult::Allowed => "allowed",
            RequestResult::Denied => "denied",
            RequestResult::Patched => "patched",
            RequestResult::Error => "error",
        }
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    certificate_reloads: Family<OutcomeLabels, Counter>,
    policy_valid: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            certificate_reloads: Family::default(),
            policy_valid: Gauge::default(),
        }
    }
}

impl Metrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "poolkeeper_admission_requests",
            "Admission requests, by webhook and result (allowed, denied, patched, error)",
            self.requests.clone(),
        );
        registry.register(
            "poolkeeper_admission_duration_seconds",
            "Time to answer an admission request, by webhook",
            self.duration.clone(),
        );
        registry.register(
            "poolkeeper_webhook_certificate_reloads",
            "Serving certificate reloads, by result (success, error)",
            self.certificate_reloads.clone(),
        );
        registry.register(
            "poolkeeper_placement_policy_valid",
            "1 when the placement policy ConfigMap parses, 0 when it does not",
            self.policy_valid.clone(),
        );
    }

    pub(crate) fn request(&self, webhook: &'static str, result: RequestResult, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                webhook,
                result: result.as_str(),
            })
            .inc();
        self.duration
            .get_or_create(&WebhookLabels { webhook })
            .observe(seconds);
    }

    pub(crate) fn certificate_reload(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.certificate_reloads
            .get_or_create(&OutcomeLabels { result })
            .inc();
    }

    pub(crate) fn policy_valid(&self, valid: bool) {
        self.policy_valid.set(i64::from(valid));
    }

    #[cfg(test)]
    pub(crate) fn requests_total(&self, webhook: &'static str, result: RequestResult) -> u64 {
        self.requests
            .get_or_create(&RequestLabels {
                webhook,
                result: result.as_str(),
            })
            .get()
    }
}
