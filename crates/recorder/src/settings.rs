use std::time::Duration;

use poolkeeper_config::Config;

/// Settings of the event recorder, from the configuration file (which also
/// holds their defaults and rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecorderSettings {
    /// The finalizer the MachineClass Events talk about
    /// (`machineClasses.finalizer`).
    pub finalizer: String,
    /// The finalizer the Secret Events talk about
    /// (`machineClasses.secretFinalizer`).
    pub secret_finalizer: String,
    /// Longest one Event write may take before it is given up
    /// (`events.writeTimeout`).
    pub write_timeout: Duration,
}

impl From<&Config> for RecorderSettings {
    fn from(config: &Config) -> Self {
        Self {
            finalizer: config.machine_classes.finalizer.clone(),
            secret_finalizer: config.machine_classes.secret_finalizer.clone(),
            write_timeout: config.events.write_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_comes_from_the_config() {
        let mut config = Config::default();
        config.machine_classes.finalizer = "example.com/protect".to_owned();
        config.machine_classes.secret_finalizer = "example.com/keep".to_owned();
        config.events.write_timeout = Duration::from_secs(4);
        assert_eq!(
            RecorderSettings::from(&config),
            RecorderSettings {
                finalizer: "example.com/protect".to_owned(),
                secret_finalizer: "example.com/keep".to_owned(),
                write_timeout: Duration::from_secs(4),
            }
        );
    }
}
