//! What the server takes from the configuration file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use poolkeeper_config::Config;
use poolkeeper_placement::PolicySource;

/// Settings of the webhook server (`webhook.*` and
/// `placement.policyConfigMap` in the configuration file). The
/// configuration holds the defaults and the rules: a value it accepts is one
/// the server can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// `webhook.listen`.
    pub listen: SocketAddr,
    /// `webhook.certDir`: holds `tls.crt` and `tls.key`.
    pub cert_dir: PathBuf,
    /// `webhook.certReloadInterval`: how often the certificate files are
    /// checked for a change (and, before the first one, for existence).
    pub cert_reload_interval: Duration,
    /// `webhook.mutatePath`.
    pub mutate_path: String,
    /// `webhook.validatePath`.
    pub validate_path: String,
    /// `webhook.maxBodyBytes`: larger requests get HTTP 413.
    pub max_body_bytes: usize,
    /// `webhook.shutdownTimeout`: how long in-flight requests may take to
    /// finish on shutdown.
    pub shutdown_timeout: Duration,
    /// `placement.policyConfigMap`: where the placement policy lives.
    pub policy: PolicySource,
}

impl From<&Config> for WebhookSettings {
    fn from(config: &Config) -> Self {
        let webhook = &config.webhook;
        Self {
            listen: webhook.listen,
            cert_dir: webhook.cert_dir.clone(),
            cert_reload_interval: webhook.cert_reload_interval,
            mutate_path: webhook.mutate_path.clone(),
            validate_path: webhook.validate_path.clone(),
            max_body_bytes: webhook.max_body_bytes,
            shutdown_timeout: webhook.shutdown_timeout,
            policy: PolicySource::from(&config.placement),
        }
    }
}
