use std::time::Duration;

use poolkeeper_bus::ObjectKey;

/// Why one Event was not written. Events are best-effort: these are logged,
/// never fatal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("looking up the UID of MachineClass {key}: {source}")]
    Lookup {
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
    #[error("writing the Event: {0}")]
    Write(#[source] kube::Error),
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
}
