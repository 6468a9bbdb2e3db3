use std::time::Duration;

use poolkeeper_config::Config;
use poolkeeper_placement::PolicyCache;

/// Name of the webhook entry, in each configuration, for the Pods of bound
/// namespaces (`deploy/webhooks`).
pub const MUTATE_BOUND_NAMESPACES: &str = "mutate-pods.poolkeeper.io";
/// Name of the webhook entry, in each configuration, for the Pods that
/// carry the pool label outside the bound namespaces (`deploy/webhooks`).
pub const MUTATE_POOL_LABELLED: &str = "mutate-labelled-pods.poolkeeper.io";
pub const VALIDATE_BOUND_NAMESPACES: &str = "validate-pods.poolkeeper.io";
pub const VALIDATE_POOL_LABELLED: &str = "validate-labelled-pods.poolkeeper.io";

/// The namespace of Kubernetes' own components: never in poolkeeper's
/// admission path, so the control plane can always recover.
pub const KUBE_SYSTEM: &str = "kube-system";

/// Which admission registration kind a configuration is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfigurationKind {
    Mutating,
    Validating,
}

impl ConfigurationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigurationKind::Mutating => "MutatingWebhookConfiguration",
            ConfigurationKind::Validating => "ValidatingWebhookConfiguration",
        }
    }
}

/// One webhook configuration whose selectors poolkeeper keeps, and the
/// names of the two entries in it that it manages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedConfiguration {
    pub kind: ConfigurationKind,
    pub name: String,
    /// The entry that matches the Pods of the bound namespaces.
    pub bound_namespaces_entry: String,
    /// The entry that matches the Pods carrying the pool label elsewhere.
    pub pool_labelled_entry: String,
}

/// Settings of the selector keeper, from the configuration file (which
/// also holds their defaults and rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorSettings {
    pub mutating: ManagedConfiguration,
    pub validating: ManagedConfiguration,
    /// The label a Pod names its pool with (`placement.poolLabel`).
    pub pool_label: String,
    /// Namespaces no webhook entry ever matches: `kube-system` and
    /// poolkeeper's own (`leaderElection.leaseNamespace`).
    pub excluded_namespaces: Vec<String>,
    /// The bindings (`placement.*`: the policy ConfigMap and the labelled
    /// Namespaces), parsed once per policy generation and shared with the
    /// other readers given the same cache.
    pub policy: PolicyCache,
    /// Longest one read or patch of a configuration may take
    /// (`webhookSelectors.requestTimeout`).
    pub request_timeout: Duration,
    /// First retry delay after a failed update, doubled on each further
    /// failure (`webhookSelectors.retryInitial`).
    pub retry_initial: Duration,
    /// Longest retry delay (`webhookSelectors.retryMax`).
    pub retry_max: Duration,
}

impl From<&Config> for SelectorSettings {
    fn from(config: &Config) -> Self {
        // The configurations are named like the installation's other
        // cluster objects (its Lease) until the configuration has a
        // `webhook.configurationName` of its own.
        let name = &config.leader_election.lease_name;
        Self {
            mutating: ManagedConfiguration {
                kind: ConfigurationKind::Mutating,
                name: name.clone(),
                bound_namespaces_entry: MUTATE_BOUND_NAMESPACES.to_owned(),
                pool_labelled_entry: MUTATE_POOL_LABELLED.to_owned(),
            },
            validating: ManagedConfiguration {
                kind: ConfigurationKind::Validating,
                name: name.clone(),
                bound_namespaces_entry: VALIDATE_BOUND_NAMESPACES.to_owned(),
                pool_labelled_entry: VALIDATE_POOL_LABELLED.to_owned(),
            },
            pool_label: config.placement.pool_label.clone(),
            excluded_namespaces: vec![
                KUBE_SYSTEM.to_owned(),
                config.leader_election.lease_namespace.clone(),
            ],
            policy: PolicyCache::from(&config.placement),
            request_timeout: config.webhook_selectors.request_timeout,
            retry_initial: config.webhook_selectors.retry_initial,
            retry_max: config.webhook_selectors.retry_max,
        }
    }
}

impl SelectorSettings {
    /// Both managed configurations, mutating first.
    pub fn configurations(&self) -> [&ManagedConfiguration; 2] {
        [&self.mutating, &self.validating]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_comes_from_the_config() {
        let mut config = Config::default();
        config.leader_election.lease_name = "pk-blue".to_owned();
        config.leader_election.lease_namespace = "pk-system".to_owned();
        config.placement.pool_label = "example.com/pool".to_owned();
        config.placement.policy_config_map.namespace = "pk-config".to_owned();
        config.placement.policy_config_map.name = "bindings".to_owned();
        config.webhook_selectors.request_timeout = Duration::from_secs(7);
        config.webhook_selectors.retry_initial = Duration::from_millis(50);
        config.webhook_selectors.retry_max = Duration::from_secs(3);

        let settings = SelectorSettings::from(&config);
        assert_eq!(
            settings,
            SelectorSettings {
                mutating: ManagedConfiguration {
                    kind: ConfigurationKind::Mutating,
                    name: "pk-blue".to_owned(),
                    bound_namespaces_entry: "mutate-pods.poolkeeper.io".to_owned(),
                    pool_labelled_entry: "mutate-labelled-pods.poolkeeper.io".to_owned(),
                },
                validating: ManagedConfiguration {
                    kind: ConfigurationKind::Validating,
                    name: "pk-blue".to_owned(),
                    bound_namespaces_entry: "validate-pods.poolkeeper.io".to_owned(),
                    pool_labelled_entry: "validate-labelled-pods.poolkeeper.io".to_owned(),
                },
                pool_label: "example.com/pool".to_owned(),
                excluded_namespaces: vec!["kube-system".to_owned(), "pk-system".to_owned()],
                policy: PolicyCache::from(&config.placement),
                request_timeout: Duration::from_secs(7),
                retry_initial: Duration::from_millis(50),
                retry_max: Duration::from_secs(3),
            }
        );
        assert_eq!(settings.policy.source().namespace, "pk-config");
        assert_eq!(settings.policy.source().name, "bindings");
    }

    #[test]
    fn the_defaults_name_the_shipped_configurations() {
        let settings = SelectorSettings::from(&Config::default());
        assert_eq!(settings.mutating.name, "poolkeeper");
        assert_eq!(settings.validating.name, "poolkeeper");
        assert_eq!(
            settings.excluded_namespaces,
            ["kube-system", "poolkeeper-system"]
        );
    }
}
