//! What the offline commands (`admit`, `audit`, `explain`) read from files:
//! the configuration, text files and the objects file, and the exit code
//! for input they cannot read.

use std::path::{Path, PathBuf};

use poolkeeper_config::{Config, ConfigErrors};
use poolkeeper_index::Index;
use poolkeeper_placement::{PlacementError, PolicySource, build_index_from_objects};

/// Exit code for invalid configuration or unreadable input.
pub const EXIT_INVALID_INPUT: u8 = 2;

/// A file the command was given that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{}: invalid configuration:\n{errors}", file.display())]
    Config { file: PathBuf, errors: ConfigErrors },
    #[error("{}: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", file.display())]
    Objects {
        file: PathBuf,
        #[source]
        source: PlacementError,
    },
}

/// The configuration of `--config`, or the defaults.
pub fn load_config(config: Option<&Path>) -> Result<Config, InputError> {
    match config {
        Some(path) => Config::load(path).map_err(|errors| InputError::Config {
            file: path.to_owned(),
            errors,
        }),
        None => Ok(Config::default()),
    }
}

/// The whole of a text file.
pub fn read(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|source| InputError::Read {
        file: path.to_owned(),
        source,
    })
}

/// The whole of a file, as bytes.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, InputError> {
    std::fs::read(path).map_err(|source| InputError::Read {
        file: path.to_owned(),
        source,
    })
}

/// The index of the Nodes, NodePools and placement ConfigMap of an objects
/// file; the notes about skipped objects go to stderr.
pub fn offline_index(
    objects: &Path,
    config: &Config,
    source: &PolicySource,
) -> Result<Index, InputError> {
    let offline = build_index_from_objects(&read(objects)?, &config.placement.pool_label, source)
        .map_err(|source| InputError::Objects {
        file: objects.to_owned(),
        source,
    })?;
    for note in &offline.notes {
        eprintln!("{}: {note}", objects.display());
    }
    Ok(offline.index)
}
