//! What one reconciliation looks at.

use std::fmt;

use poolkeeper_bus::ObjectKey;

/// A MachineClass, or a Secret of the MachineClasses' namespace. Both go
/// through the same dirty set, passes and per-key requeues; their keys never
/// mix (a Secret may share its name with a class).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Target {
    Class(ObjectKey),
    Secret(ObjectKey),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Class(key) => write!(f, "MachineClass {key}"),
            Target::Secret(key) => write!(f, "Secret {key}"),
        }
    }
}
