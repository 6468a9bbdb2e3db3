use std::io::IsTerminal;

use poolkeeper_config::{LogFormat, LoggingConfig};
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG`, when set, wins over the
/// configured level so one run can be made verbose without editing the file.
pub fn init(config: &LoggingConfig) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(config.level.as_str()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second init (tests running the controller in-process) keeps the first.
    let _ = match config.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
