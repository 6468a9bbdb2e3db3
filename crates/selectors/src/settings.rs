use std::time::Duration;

use poolkeeper_config::Config;

/// Name of the webhook entry, in each configuration, for the Pods of bound
/// namespaces (`deploy/webhooks`).
pub const MUTATE_BOUND_NAMESPACES: &str = "mutate-pods.poolkeeper.io";
/// Name of the webhook entry, in each configuration, for the Pods that
/// carry the pool label outside the bound namespaces (`deploy/webhooks`).
pub const MUTATE_POOL_LABELLED: &str = "mutate-labelled-pods.poolkeeper.io";
pub const VALIDATE_BOUND_NAMESPACES: &str = "validate-pods.poolkeeper.io";
pub const VALIDATE_POOL_LABELLED: &str = "validate-labelled-pods.poolkeeper.io";

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
/// also holds their defaults and rules). The bindings and the namespaces no
/// entry may match come from the placement policy's holder, not from here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorSettings {
    /// Both named `webhookSelectors.configurationName`.
    pub mutating: ManagedConfiguration,
    pub validating: ManagedConfiguration,
    /// The label a Pod names its pool with (`placement.poolLabel`).
    pub pool_label: String,
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
        let name = &config.webhook_selectors.configuration_name;
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
        config.webhook_selectors.configuration_name = "pk-blue".to_owned();
        config.placement.pool_label = "example.com/pool".to_owned();
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
                request_timeout: Duration::from_secs(7),
                retry_initial: Duration::from_millis(50),
                retry_max: Duration::from_secs(3),
            }
        );
    }

    #[test]
    fn the_defaults_name_the_shipped_configurations() {
        let mut config = Config::default();
        // Not the Lease's name: each object has its own setting.
        config.leader_election.lease_name = "pk-lease".to_owned();
        let settings = SelectorSettings::from(&config);
        assert_eq!(settings.mutating.name, "poolkeeper");
        assert_eq!(settings.validating.name, "poolkeeper");
    }
}
