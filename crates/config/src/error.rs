use std::fmt;
use std::path::PathBuf;

/// A position in the YAML text, both 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Formats ` (at line L, column C)` when the location is known.
struct At(Option<Location>);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(location) => write!(f, " (at {location})"),
            None => Ok(()),
        }
    }
}

/// One problem with a configuration file.
///
/// `path` is the dotted path of the offending key (`reconciler.debounceInterval`);
/// it is empty for problems with the document as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read configuration file: {reason}", file.display())]
    Io { file: PathBuf, reason: String },

    /// The text is not well-formed YAML (or holds more than one document).
    #[error("malformed YAML at {}: {reason}", OrUnknown(*location))]
    Syntax {
        location: Option<Location>,
        reason: String,
    },

    /// The YAML does not fit the schema: unknown key, wrong type, unparsable value.
    #[error("{}: {reason}{}", PathOrDocument(path), At(*location))]
    Schema {
        path: String,
        reason: String,
        location: Option<Location>,
    },

    /// The value parsed but is not acceptable (out of range, inconsistent with another field).
    /// The location is that of the key, when the document spells it out.
    #[error("{}: {reason}{}", PathOrDocument(path), At(*location))]
    Invalid {
        path: String,
        reason: String,
        location: Option<Location>,
    },
}

impl ConfigError {
    /// Dotted path of the offending key; empty when the problem is not tied to one.
    pub fn path(&self) -> &str {
        match self {
            Self::Schema { path, .. } | Self::Invalid { path, .. } => path,
            Self::Io { .. } | Self::Syntax { .. } => "",
        }
    }

    /// What is wrong, without the path or location.
    pub fn reason(&self) -> &str {
        match self {
            Self::Io { reason, .. }
            | Self::Syntax { reason, .. }
            | Self::Schema { reason, .. }
            | Self::Invalid { reason, .. } => reason,
        }
    }

    /// Where in the YAML text the problem was found, when known.
    pub fn location(&self) -> Option<Location> {
        match self {
            Self::Syntax { location, .. }
            | Self::Schema { location, .. }
            | Self::Invalid { location, .. } => *location,
            Self::Io { .. } => None,
        }
    }
}

struct OrUnknown(Option<Location>);

impl fmt::Display for OrUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(location) => location.fmt(f),
            None => f.write_str("unknown position"),
        }
    }
}

struct PathOrDocument<'a>(&'a str);

impl fmt::Display for PathOrDocument<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(document)")
        } else {
            f.write_str(self.0)
        }
    }
}

/// Every problem found in a configuration file, in document order where known.
///
/// Displays one problem per line as `path: reason`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    errors: Vec<ConfigError>,
}

impl ConfigErrors {
    pub(crate) fn new(errors: Vec<ConfigError>) -> Self {
        debug_assert!(
            !errors.is_empty(),
            "an error report needs at least one error"
        );
        Self { errors }
    }

    pub fn errors(&self) -> &[ConfigError] {
        &self.errors
    }

    pub fn into_errors(self) -> Vec<ConfigError> {
        self.errors
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> Self {
        Self::new(vec![error])
    }
}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.into_iter()
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}
