use std::time::Duration;

use poolkeeper_config::{CertificateSource, Config};

/// How long certificates live and when they are replaced
/// (`webhook.certificate.{caValidity,leafValidity,renewBefore}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub ca: Duration,
    pub leaf: Duration,
    pub renew_before: Duration,
}

/// The longest a new CA waits in the bundle before it signs a serving
/// certificate: the API servers load a changed caBundle within a second or so.
const MAX_SETTLE: Duration = Duration::from_secs(60);

impl Lifetimes {
    /// A CA is replaced this long before it expires: the last serving
    /// certificate it signs, renewed `renew_before` early, lives `leaf`.
    pub fn ca_rotation_lead(&self) -> Duration {
        self.leaf.saturating_add(self.renew_before)
    }

    /// How long a new CA is in the published bundle before it signs a
    /// serving certificate: a quarter of `renew_before`, at most a minute.
    /// The serving certificate it replaces is still valid meanwhile.
    pub fn settle(&self) -> Duration {
        (self.renew_before / 4).min(MAX_SETTLE)
    }
}

/// Settings of the certificate component, from the configuration (which
/// holds the defaults and the rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateSettings {
    /// `webhook.certificate.source`: the component issues for `self`, and
    /// only publishes the Secret's CA for `secret`.
    pub source: CertificateSource,
    /// poolkeeper's namespace: the placement policy ConfigMap's.
    pub namespace: String,
    /// `webhook.certificate.secretName`.
    pub secret_name: String,
    /// The Service's DNS names (`webhook.certificate.serviceName`).
    pub dns_names: Vec<String>,
    pub lifetimes: Lifetimes,
    /// Both webhook configurations' name (`webhookSelectors.configurationName`).
    pub configuration_name: String,
    /// Per request; the backoff too is the webhook selectors'
    /// (`webhookSelectors.requestTimeout`, `.retryInitial`, `.retryMax`).
    pub request_timeout: Duration,
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl From<&Config> for CertificateSettings {
    fn from(config: &Config) -> Self {
        let certificate = &config.webhook.certificate;
        let namespace = config.placement.policy_config_map.namespace.clone();
        Self {
            source: certificate.source,
            dns_names: service_dns_names(&certificate.service_name, &namespace),
            namespace,
            secret_name: certificate.secret_name.clone(),
            lifetimes: Lifetimes {
                ca: certificate.ca_validity,
                leaf: certificate.leaf_validity,
                renew_before: certificate.renew_before,
            },
            configuration_name: config.webhook_selectors.configuration_name.clone(),
            request_timeout: config.webhook_selectors.request_timeout,
            retry_initial: config.webhook_selectors.retry_initial,
            retry_max: config.webhook_selectors.retry_max,
        }
    }
}

/// The names the API server checks a Service's serving certificate against.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_comes_from_the_config() {
        let mut config = Config::default();
        config.placement.policy_config_map.namespace = "pk".to_owned();
        config.webhook.certificate.source = CertificateSource::SelfManaged;
        config.webhook.certificate.service_name = "hooks".to_owned();
        config.webhook.certificate.secret_name = "hooks-tls".to_owned();
        config.webhook_selectors.configuration_name = "pk-blue".to_owned();
        let settings = CertificateSettings::from(&config);
        assert_eq!(settings.source, CertificateSource::SelfManaged);
        assert_eq!(settings.namespace, "pk");
        assert_eq!(settings.secret_name, "hooks-tls");
        assert_eq!(
            settings.dns_names,
            ["hooks.pk.svc", "hooks.pk.svc.cluster.local"]
        );
        assert_eq!(settings.configuration_name, "pk-blue");
        const DAY: u64 = 86_400;
        assert_eq!(
            settings.lifetimes,
            Lifetimes {
                ca: Duration::from_secs(365 * DAY),
                leaf: Duration::from_secs(150 * DAY),
                renew_before: Duration::from_secs(15 * DAY),
            }
        );
        assert_eq!(settings.lifetimes.settle(), Duration::from_secs(60));
        assert_eq!(
            settings.lifetimes.ca_rotation_lead(),
            Duration::from_secs(165 * DAY)
        );
    }
}
