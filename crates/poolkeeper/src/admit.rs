//! `poolkeeper admit`: one AdmissionReview decided offline against objects
//! from a file, exactly as the webhook would decide it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use base64::Engine as _;
use poolkeeper_bus::WebhookKind;
use poolkeeper_config::{Config, ConfigErrors};
use poolkeeper_placement::{
    PlacementError, PlacementPolicy, PolicySource, build_index_from_objects,
};
use serde_json::Value;

use crate::cli::EXIT_INVALID_INPUT;

/// Why `admit` could not decide.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
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
    #[error("{}: {source}", file.display())]
    Review {
        file: PathBuf,
        #[source]
        source: poolkeeper_webhook::WebhookError,
    },
    #[error("cannot print the response: {0}")]
    Print(#[source] serde_json::Error),
}

/// Prints the AdmissionReview response; exit 0 for any decision, 2 for
/// input that cannot be read.
pub fn execute(
    objects: &Path,
    review: &Path,
    webhook: WebhookKind,
    config: Option<&Path>,
) -> ExitCode {
    match respond(objects, review, webhook, config) {
        Ok(response) => {
            println!("{response}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("poolkeeper admit: {error}");
            ExitCode::from(EXIT_INVALID_INPUT)
        }
    }
}

/// The configuration of `--config`, or the defaults.
pub fn load_config(config: Option<&Path>) -> Result<Config, AdmitError> {
    match config {
        Some(path) => Config::load(path).map_err(|errors| AdmitError::Config {
            file: path.to_owned(),
            errors,
        }),
        None => Ok(Config::default()),
    }
}

/// The pretty-printed response JSON, as Kubernetes sends it (the patch in
/// base64); the patch itself goes to stderr for people.
pub fn respond(
    objects: &Path,
    review: &Path,
    webhook: WebhookKind,
    config: Option<&Path>,
) -> Result<String, AdmitError> {
    let config = load_config(config)?;
    let source = PolicySource::from(&config.placement);
    let objects_yaml = read(objects)?;
    let review_json = std::fs::read(review).map_err(|source| AdmitError::Read {
        file: review.to_owned(),
        source,
    })?;
    let offline = build_index_from_objects(&objects_yaml, &config.placement.pool_label, &source)
        .map_err(|source| AdmitError::Objects {
            file: objects.to_owned(),
            source,
        })?;
    for note in &offline.notes {
        eprintln!("{}: {note}", objects.display());
    }
    let view = offline.index.placement();
    let policy = PlacementPolicy::load(&view, &source);
    let response =
        poolkeeper_webhook::review_response(webhook, &review_json, &view, policy.as_ref())
            .map_err(|source| AdmitError::Review {
                file: review.to_owned(),
                source,
            })?;
    if let Some(patch) = decoded_patch(&response) {
        eprintln!("JSON patch: {patch}");
    }
    serde_json::to_string_pretty(&response).map_err(AdmitError::Print)
}

/// The response's JSON patch as text, decoded from its base64.
fn decoded_patch(review: &Value) -> Option<String> {
    let patch = review.pointer("/response/patch")?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

pub(crate) fn read(path: &Path) -> Result<String, AdmitError> {
    std::fs::read_to_string(path).map_err(|source| AdmitError::Read {
        file: path.to_owned(),
        source,
    })
}
