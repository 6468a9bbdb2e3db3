//! What the server takes from the configuration file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use poolkeeper_config::{CertificateSource, Config};

/// Settings of the webhook server (`webhook.*` in the configuration file).
/// The configuration holds the defaults and the rules: a value it accepts is
/// one the server can use. The placement policy is not a setting: the server
/// reads it from the process's one `PolicyCache`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// `webhook.listen`.
    pub listen: SocketAddr,
    /// `webhook.certificate.source`: `files` reads `cert_dir`; `secret`
    /// and `self` watch the Secret `secret_name` in `secret_namespace`.
    pub certificate_source: CertificateSource,
    /// `webhook.certDir`: holds `tls.crt` and `tls.key`.
    pub cert_dir: PathBuf,
    /// `webhook.certificate.secretName`.
    pub secret_name: String,
    /// poolkeeper's namespace (`placement.policyConfigMap.namespace`).
    pub secret_namespace: String,
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
    /// `webhook.tlsHandshakeTimeout`: from accepting a connection to a
    /// completed TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// `webhook.headerReadTimeout`: from the first byte of a request (the
    /// handshake, for a connection's first request) to its complete headers.
    pub header_read_timeout: Duration,
    /// `webhook.bodyReadTimeout`: from a request's headers to its complete
    /// body; slower bodies get HTTP 408.
    pub body_read_timeout: Duration,
    /// `webhook.idleTimeout`: a connection with no request in flight and
    /// nothing received for this long is closed (HTTP/2: GOAWAY).
    pub idle_timeout: Duration,
    /// `webhook.maxConnections`: open connections, handshakes included;
    /// more wait in the listen backlog.
    pub max_connections: usize,
}

impl From<&Config> for WebhookSettings {
    fn from(config: &Config) -> Self {
        let webhook = &config.webhook;
        Self {
            listen: webhook.listen,
            certificate_source: webhook.certificate.source,
            cert_dir: webhook.cert_dir.clone(),
            secret_name: webhook.certificate.secret_name.clone(),
            secret_namespace: config.placement.policy_config_map.namespace.clone(),
            cert_reload_interval: webhook.cert_reload_interval,
            mutate_path: webhook.mutate_path.clone(),
            validate_path: webhook.validate_path.clone(),
            max_body_bytes: webhook.max_body_bytes,
            shutdown_timeout: webhook.shutdown_timeout,
            tls_handshake_timeout: webhook.tls_handshake_timeout,
            header_read_timeout: webhook.header_read_timeout,
            body_read_timeout: webhook.body_read_timeout,
            idle_timeout: webhook.idle_timeout,
            max_connections: webhook.max_connections,
        }
    }
}
