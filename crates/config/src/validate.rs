//! Semantic rules: values that parse but cannot work.

use std::net::SocketAddr;
use std::time::Duration;

use crate::schema::Config;

/// One broken rule. `related` names the other fields the rule compares
/// against, so the rule can be skipped when one of them failed to parse.
#[derive(Debug)]
pub(crate) struct Violation {
    pub(crate) path: &'static str,
    pub(crate) related: Vec<&'static str>,
    pub(crate) reason: String,
}

impl Violation {
    pub(crate) fn paths(&self) -> impl Iterator<Item = &'static str> + '_ {
        std::iter::once(self.path).chain(self.related.iter().copied())
    }
}

const MAX_CONCURRENCY: usize = 1024;
const MIN_BODY_BYTES: usize = 1024;
const MIN_BUS_CAPACITY: usize = 16;
const MAX_BUS_CAPACITY: usize = 1 << 20;
const MAX_DEBUG_EVENTS: usize = 1 << 16;
/// More audit LISTs in flight than this would make the audit one of the API
/// server's heaviest clients for a gain the round no longer needs.
const MAX_AUDIT_CONCURRENCY: usize = 32;

pub(crate) fn validate(config: &Config) -> Vec<Violation> {
    let mut v = Rules::default();
    v.check("namespace", dns1123_label(&config.namespace));
    v.positive(
        "apiServer.startupTimeout",
        config.api_server.startup_timeout,
    );
    leader_election(&mut v, config);
    watchers(&mut v, config);
    reconciler(&mut v, config);
    executor(&mut v, config);
    v.check(
        "machineClasses.finalizer",
        qualified_name(&config.machine_classes.finalizer, PrefixRequired::Yes),
    );
    v.check(
        "machineClasses.secretFinalizer",
        qualified_name(
            &config.machine_classes.secret_finalizer,
            PrefixRequired::Yes,
        ),
    );
    placement(&mut v, config);
    audit(&mut v, config);
    webhook(&mut v, config);
    health(&mut v, config);
    let selectors = &config.webhook_selectors;
    v.check(
        "webhookSelectors.configurationName",
        dns1123_subdomain(&selectors.configuration_name),
    );
    v.positive("webhookSelectors.requestTimeout", selectors.request_timeout);
    v.positive("webhookSelectors.retryInitial", selectors.retry_initial);
    v.positive("webhookSelectors.retryMax", selectors.retry_max);
    if selectors.retry_initial > selectors.retry_max {
        v.fail_related(
            "webhookSelectors.retryInitial",
            &["webhookSelectors.retryMax"],
            format!(
                "must not be longer than webhookSelectors.retryMax ({}), got {}",
                show(selectors.retry_max),
                show(selectors.retry_initial)
            ),
        );
    }
    v.positive("events.writeTimeout", config.events.write_timeout);
    v.range(
        "bus.capacity",
        config.bus.capacity,
        MIN_BUS_CAPACITY,
        MAX_BUS_CAPACITY,
    );
    v.positive("shutdown.gracePeriod", config.shutdown.grace_period);
    shutdown(&mut v, config);
    v.check("logging.level", log_filter(&config.logging.level));
    v.violations
}

fn leader_election(v: &mut Rules, config: &Config) {
    let le = &config.leader_election;
    v.check(
        "leaderElection.leaseName",
        dns1123_subdomain(&le.lease_name),
    );
    v.check(
        "leaderElection.leaseNamespace",
        dns1123_label(&le.lease_namespace),
    );
    v.positive("leaderElection.leaseDuration", le.lease_duration);
    v.positive("leaderElection.renewDeadline", le.renew_deadline);
    v.positive("leaderElection.retryPeriod", le.retry_period);
    if le.lease_duration.subsec_nanos() != 0 {
        v.fail(
            "leaderElection.leaseDuration",
            format!(
                "must be a whole number of seconds (a Lease stores seconds), got {}",
                show(le.lease_duration)
            ),
        );
    }
    v.shorter(
        ("leaderElection.renewDeadline", le.renew_deadline),
        ("leaderElection.leaseDuration", le.lease_duration),
    );
    v.shorter(
        ("leaderElection.retryPeriod", le.retry_period),
        ("leaderElection.renewDeadline", le.renew_deadline),
    );
}

fn watchers(v: &mut Rules, config: &Config) {
    let watchers = &config.watchers;
    if watchers.page_size == 0 {
        v.fail("watchers.pageSize", "must be at least 1".to_owned());
    }
    v.positive("watchers.syncTimeout", watchers.sync_timeout);
}

fn reconciler(v: &mut Rules, config: &Config) {
    let reconciler = &config.reconciler;
    v.positive("reconciler.debounceInterval", reconciler.debounce_interval);
    v.positive("reconciler.maxDelay", reconciler.max_delay);
    v.at_least(
        ("reconciler.maxDelay", reconciler.max_delay),
        ("reconciler.debounceInterval", reconciler.debounce_interval),
    );
}

fn executor(v: &mut Rules, config: &Config) {
    let executor = &config.executor;
    v.range(
        "executor.concurrency",
        executor.concurrency,
        1,
        MAX_CONCURRENCY,
    );
    v.positive("executor.shortRetry", executor.short_retry);
    v.positive("executor.longRetry", executor.long_retry);
    v.positive("executor.conflictRetry", executor.conflict_retry);
    v.positive("executor.writeTimeout", executor.write_timeout);
    v.at_least(
        ("executor.longRetry", executor.long_retry),
        ("executor.shortRetry", executor.short_retry),
    );
}

fn placement(v: &mut Rules, config: &Config) {
    let placement = &config.placement;
    v.check(
        "placement.poolLabel",
        qualified_name(&placement.pool_label, PrefixRequired::No),
    );
    let policy = &placement.policy_config_map;
    v.check(
        "placement.policyConfigMap.namespace",
        dns1123_label(&policy.namespace),
    );
    v.check(
        "placement.policyConfigMap.name",
        dns1123_subdomain(&policy.name),
    );
    v.check("placement.policyConfigMap.key", config_map_key(&policy.key));
    let labels = &placement.namespace_labels;
    for (field, key) in [
        ("placement.namespaceLabels.pool", &labels.pool),
        ("placement.namespaceLabels.mode", &labels.mode),
        ("placement.namespaceLabels.constraints", &labels.constraints),
    ] {
        v.check(field, qualified_name(key, PrefixRequired::No));
    }
    if labels.mode == labels.pool || labels.constraints == labels.pool {
        v.fail(
            "placement.namespaceLabels.pool",
            "must differ from namespaceLabels.mode and namespaceLabels.constraints".to_owned(),
        );
    }
    for (i, namespace) in placement.excluded_namespaces.iter().enumerate() {
        if let Err(reason) = dns1123_label(namespace) {
            v.fail(
                "placement.excludedNamespaces",
                format!("entry {i} ({namespace:?}): {reason}"),
            );
        }
    }
}

fn webhook(v: &mut Rules, config: &Config) {
    let webhook = &config.webhook;
    v.fixed_port("webhook.listen", webhook.listen);
    if webhook.cert_dir.as_os_str().is_empty() {
        v.fail("webhook.certDir", "must not be empty".to_owned());
    }
    v.positive("webhook.certReloadInterval", webhook.cert_reload_interval);
    v.positive("webhook.certificateTimeout", webhook.certificate_timeout);
    v.positive("webhook.shutdownTimeout", webhook.shutdown_timeout);
    v.positive("webhook.tlsHandshakeTimeout", webhook.tls_handshake_timeout);
    v.positive("webhook.headerReadTimeout", webhook.header_read_timeout);
    v.positive("webhook.bodyReadTimeout", webhook.body_read_timeout);
    v.positive("webhook.idleTimeout", webhook.idle_timeout);
    v.range(
        "webhook.maxConnections",
        webhook.max_connections,
        1,
        1 << 20,
    );
    v.shorter(
        ("webhook.shutdownTimeout", webhook.shutdown_timeout),
        ("shutdown.gracePeriod", config.shutdown.grace_period),
    );
    v.check("webhook.mutatePath", http_path(&webhook.mutate_path));
    v.check("webhook.validatePath", http_path(&webhook.validate_path));
    if webhook.mutate_path == webhook.validate_path {
        v.fail_related(
            "webhook.validatePath",
            &["webhook.mutatePath"],
            format!(
                "must differ from webhook.mutatePath (both are {:?})",
                webhook.validate_path
            ),
        );
    }
    if webhook.max_body_bytes < MIN_BODY_BYTES {
        v.fail(
            "webhook.maxBodyBytes",
            format!(
                "must be at least {MIN_BODY_BYTES}, got {}",
                webhook.max_body_bytes
            ),
        );
    }
    certificate(v, config);
}

/// A serving certificate is renewed before it expires, and a CA lives long
/// enough to sign one leaf after another: it is replaced `leafValidity +
/// renewBefore` before it expires, which must leave it time to be used.
fn certificate(v: &mut Rules, config: &Config) {
    let certificate = &config.webhook.certificate;
    v.check(
        "webhook.certificate.secretName",
        dns1123_subdomain(&certificate.secret_name),
    );
    v.check(
        "webhook.certificate.serviceName",
        dns1123_label(&certificate.service_name),
    );
    v.positive("webhook.certificate.caValidity", certificate.ca_validity);
    v.positive(
        "webhook.certificate.leafValidity",
        certificate.leaf_validity,
    );
    v.positive("webhook.certificate.renewBefore", certificate.renew_before);
    v.shorter(
        ("webhook.certificate.renewBefore", certificate.renew_before),
        (
            "webhook.certificate.leafValidity",
            certificate.leaf_validity,
        ),
    );
    let needed = certificate
        .leaf_validity
        .saturating_add(certificate.renew_before);
    if !certificate.leaf_validity.is_zero()
        && certificate.renew_before < certificate.leaf_validity
        && certificate.ca_validity <= needed
    {
        v.fail_related(
            "webhook.certificate.caValidity",
            &[
                "webhook.certificate.leafValidity",
                "webhook.certificate.renewBefore",
            ],
            format!(
                "must be longer than webhook.certificate.leafValidity plus renewBefore ({}), got {}",
                show(needed),
                show(certificate.ca_validity)
            ),
        );
    }
}

fn audit(v: &mut Rules, config: &Config) {
    let audit = &config.audit;
    if audit.page_size == 0 {
        v.fail("audit.pageSize", "must be at least 1".to_owned());
    }
    v.range(
        "audit.concurrency",
        audit.concurrency,
        1,
        MAX_AUDIT_CONCURRENCY,
    );
    v.range("audit.maxReported", audit.max_reported, 1, MAX_DEBUG_EVENTS);
}

/// The drain and the webhook's own drain both fit in the grace period.
fn shutdown(v: &mut Rules, config: &Config) {
    let (shutdown, webhook) = (&config.shutdown, &config.webhook);
    if shutdown.drain_delay >= shutdown.grace_period && !shutdown.grace_period.is_zero() {
        v.fail_related(
            "shutdown.drainDelay",
            &["shutdown.gracePeriod"],
            format!(
                "must be shorter than shutdown.gracePeriod ({}), got {}",
                show(shutdown.grace_period),
                show(shutdown.drain_delay)
            ),
        );
        return;
    }
    let needed = shutdown.drain_delay + webhook.shutdown_timeout;
    // A shutdownTimeout that alone exceeds the grace period is reported as such.
    if needed > shutdown.grace_period && webhook.shutdown_timeout < shutdown.grace_period {
        v.fail_related(
            "shutdown.drainDelay",
            &["shutdown.gracePeriod", "webhook.shutdownTimeout"],
            format!(
                "{} plus webhook.shutdownTimeout ({}) exceeds shutdown.gracePeriod ({})",
                show(shutdown.drain_delay),
                show(webhook.shutdown_timeout),
                show(shutdown.grace_period)
            ),
        );
    }
}

fn health(v: &mut Rules, config: &Config) {
    let (health, webhook) = (&config.health, &config.webhook);
    v.fixed_port("health.listen", health.listen);
    if webhook.enabled
        && webhook.listen.port() != 0
        && addresses_collide(webhook.listen, health.listen)
    {
        v.fail_related(
            "health.listen",
            &["webhook.listen", "webhook.enabled"],
            format!(
                "{} collides with webhook.listen {}: the two servers need different ports",
                health.listen, webhook.listen
            ),
        );
    }
    v.positive("health.stallTimeout", health.stall_timeout);
    v.range(
        "health.debugEvents",
        health.debug_events,
        1,
        MAX_DEBUG_EVENTS,
    );
}

/// A duration field with its path, for the rules that compare two.
type Field = (&'static str, Duration);

#[derive(Default)]
struct Rules {
    violations: Vec<Violation>,
}

impl Rules {
    fn fail(&mut self, path: &'static str, reason: String) {
        self.fail_related(path, &[], reason);
    }

    fn fail_related(&mut self, path: &'static str, related: &[&'static str], reason: String) {
        self.violations.push(Violation {
            path,
            related: related.to_vec(),
            reason,
        });
    }

    fn check(&mut self, path: &'static str, result: Result<(), String>) {
        if let Err(reason) = result {
            self.fail(path, reason);
        }
    }

    fn positive(&mut self, path: &'static str, value: Duration) {
        if value.is_zero() {
            self.fail(path, "must be greater than 0".to_owned());
        }
    }

    /// `value` must be shorter than `bound` (skipped when either is zero:
    /// `positive` reports that).
    fn shorter(&mut self, (path, value): Field, (bound_path, bound): Field) {
        if !value.is_zero() && !bound.is_zero() && value >= bound {
            self.fail_related(
                path,
                &[bound_path],
                format!(
                    "must be shorter than {bound_path} ({}), got {}",
                    show(bound),
                    show(value)
                ),
            );
        }
    }

    /// `value` must be at least `bound` (skipped when `value` is zero).
    fn at_least(&mut self, (path, value): Field, (bound_path, bound): Field) {
        if !value.is_zero() && value < bound {
            self.fail_related(
                path,
                &[bound_path],
                format!(
                    "must be at least {bound_path} ({}), got {}",
                    show(bound),
                    show(value)
                ),
            );
        }
    }

    fn range(&mut self, path: &'static str, value: usize, min: usize, max: usize) {
        if value < min {
            self.fail(path, format!("must be at least {min}, got {value}"));
        } else if value > max {
            self.fail(path, format!("must be at most {max}, got {value}"));
        }
    }

    /// Probes, Services and webhook configurations point at a known port, so
    /// an OS-chosen one (0) cannot be reached.
    fn fixed_port(&mut self, path: &'static str, addr: SocketAddr) {
        if addr.port() == 0 {
            self.fail(
                path,
                format!("port must not be 0 in {addr}: probes and Services need a fixed port"),
            );
        }
    }
}

fn show(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(duration)
}

/// Two listeners on the same port conflict unless both bind distinct specific IPs.
fn addresses_collide(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn is_label_text(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

pub(crate) fn dns1123_label(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if value.len() > DNS1123_LABEL_MAX {
        return Err(format!(
            "{value:?} is longer than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !is_label_text(value) {
        return Err(format!(
            "{value:?} is not a valid DNS-1123 label: lowercase letters, digits and '-', \
             starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

pub(crate) fn dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        return Err(format!(
            "{value:?} is longer than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    if !value.split('.').all(is_label_text) {
        return Err(format!(
            "{value:?} is not a valid DNS-1123 subdomain: lowercase letters, digits, '-' and '.', \
             each dot-separated part starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PrefixRequired {
    Yes,
    No,
}

const QUALIFIED_NAME_MAX: usize = 63;

/// A Kubernetes qualified name (label key, finalizer): `[prefix/]name`.
fn qualified_name(value: &str, prefix_required: PrefixRequired) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    match prefix {
        Some(prefix) => dns1123_subdomain(prefix)
            .map_err(|reason| format!("{value:?} has an invalid prefix: {reason}"))?,
        None if prefix_required == PrefixRequired::Yes => {
            return Err(format!(
                "{value:?} must be domain-qualified, e.g. example.com/{value}"
            ));
        }
        None => {}
    }
    let bytes = name.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= QUALIFIED_NAME_MAX
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        return Err(format!(
            "{value:?} is not a valid qualified name: the name part must be 1-{QUALIFIED_NAME_MAX} \
             letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

const CONFIG_MAP_KEY_MAX: usize = 253;

fn config_map_key(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if value.len() > CONFIG_MAP_KEY_MAX {
        return Err(format!(
            "{value:?} is longer than {CONFIG_MAP_KEY_MAX} characters"
        ));
    }
    if value == "." || value == ".." {
        return Err(format!("{value:?} is not a valid ConfigMap key"));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(format!(
            "{value:?} is not a valid ConfigMap key: letters, digits, '-', '_' and '.' only"
        ));
    }
    Ok(())
}

/// A plain URL path: what the webhook's router can serve as it is (no
/// captures such as `{id}` or `*rest`, no query, nothing to escape).
pub(crate) fn http_path(value: &str) -> Result<(), String> {
    if !value.starts_with('/') {
        return Err(format!("{value:?} must start with '/'"));
    }
    if let Some(c) = value
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '.' | '_' | '~')))
    {
        return Err(format!(
            "{value:?} must be a plain path of letters, digits, '/', '-', '.', '_' and '~', not {c:?}"
        ));
    }
    Ok(())
}

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// A level, or comma-separated `tracing` directives `[target=]level`.
fn log_filter(value: &str) -> Result<(), String> {
    let is_level = |s: &str| {
        LEVELS
            .iter()
            .any(|level| level.eq_ignore_ascii_case(s.trim()))
    };
    if value.trim().is_empty() {
        return Err(format!(
            "must not be empty; use one of {}",
            LEVELS.join(", ")
        ));
    }
    for directive in value.split(',').map(str::trim) {
        let ok = match directive.rsplit_once('=') {
            Some((target, level)) => !target.trim().is_empty() && is_level(level),
            None => is_level(directive),
        };
        if !ok {
            return Err(format!(
                "{directive:?} is not a log level or a target=level directive; levels: {}",
                LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_lifetimes_and_names() {
        // (yaml under webhook.certificate, the paths of the errors)
        let cases: [(&str, &[&str]); 8] = [
            ("{source: self}", &[]),
            (
                "{source: self, caValidity: 30s, leafValidity: 10s, renewBefore: 5s}",
                &[],
            ),
            (
                "{leafValidity: 10s, renewBefore: 10s}",
                &["webhook.certificate.renewBefore"],
            ),
            (
                "{caValidity: 15s, leafValidity: 10s, renewBefore: 5s}",
                &["webhook.certificate.caValidity"],
            ),
            ("{renewBefore: 0s}", &["webhook.certificate.renewBefore"]),
            (
                "{secretName: Bad_Name}",
                &["webhook.certificate.secretName"],
            ),
            ("{serviceName: a.b}", &["webhook.certificate.serviceName"]),
            ("{source: vault}", &["webhook.certificate.source"]),
        ];
        for (yaml, paths) in cases {
            let document = format!("webhook:\n  certificate: {yaml}\n");
            let found: Vec<String> = match Config::from_yaml_str(&document) {
                Ok(_) => Vec::new(),
                Err(errors) => errors
                    .errors()
                    .iter()
                    .map(|e| e.path().to_owned())
                    .collect(),
            };
            assert_eq!(found, paths, "{yaml}");
        }
        let config = Config::from_yaml_str("webhook: {certificate: {source: self}}").unwrap();
        assert_eq!(
            config.webhook.certificate.source,
            crate::CertificateSource::SelfManaged
        );
    }

    #[test]
    fn dns1123_labels() {
        for ok in ["a", "machine-system", "x1", &"a".repeat(63)] {
            assert_eq!(dns1123_label(ok), Ok(()), "{ok}");
        }
        for bad in ["", "Machine", "-a", "a-", "a.b", "a_b", &"a".repeat(64)] {
            assert!(dns1123_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dns1123_subdomains() {
        for ok in ["poolkeeper", "a.b-c.d", "poolkeeper-placement"] {
            assert_eq!(dns1123_subdomain(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a..b", ".a", "a.", "A.b", "a_b", &"a".repeat(254)] {
            assert!(dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qualified_names() {
        let ok = [
            ("apps.openyurt.io/nodepool", PrefixRequired::No),
            ("nodepool", PrefixRequired::No),
            ("Node_Pool.v1", PrefixRequired::No),
            (
                "machine.sapcloud.io/machine-controller-manager",
                PrefixRequired::Yes,
            ),
        ];
        for (value, prefix) in ok {
            assert_eq!(qualified_name(value, prefix), Ok(()), "{value}");
        }
        let bad = [
            ("", PrefixRequired::No),
            ("a/", PrefixRequired::No),
            ("/a", PrefixRequired::No),
            ("Example.com/a", PrefixRequired::No),
            ("a/b/c", PrefixRequired::No),
            ("-a", PrefixRequired::No),
            ("a b", PrefixRequired::No),
            ("finalizer", PrefixRequired::Yes),
        ];
        for (value, prefix) in bad {
            assert!(qualified_name(value, prefix).is_err(), "{value}");
        }
        let long_name = "a".repeat(64);
        assert!(qualified_name(&long_name, PrefixRequired::No).is_err());
    }

    #[test]
    fn config_map_keys() {
        for ok in ["placement.yaml", "a", "_x-y.z"] {
            assert_eq!(config_map_key(ok), Ok(()), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b"] {
            assert!(config_map_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn http_paths() {
        assert_eq!(http_path("/mutate-pods"), Ok(()));
        assert_eq!(http_path("/v1/validate_pods.x~y"), Ok(()));
        for bad in [
            "mutate",
            "",
            "/a b",
            "/a?b",
            "/a#b",
            "/mutate:pods",
            "/a/{id}",
            "/a/*rest",
            "/ä",
        ] {
            assert!(http_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn log_filters() {
        for ok in [
            "info",
            "DEBUG",
            "info,kube=warn",
            "poolkeeper=trace, kube_runtime=off",
        ] {
            assert_eq!(log_filter(ok), Ok(()), "{ok}");
        }
        for bad in ["", "verbose", "info,", "kube=loud", "=info"] {
            assert!(log_filter(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listener_collisions() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(addresses_collide(addr("0.0.0.0:80"), addr("127.0.0.1:80")));
        assert!(addresses_collide(
            addr("127.0.0.1:80"),
            addr("127.0.0.1:80")
        ));
        assert!(!addresses_collide(
            addr("127.0.0.1:80"),
            addr("10.0.0.1:80")
        ));
        assert!(!addresses_collide(addr("0.0.0.0:80"), addr("0.0.0.0:81")));
    }
}
