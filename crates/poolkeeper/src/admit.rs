//! `poolkeeper admit`: one AdmissionReview decided offline against objects
//! from a file, exactly as the webhook would decide it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use base64::Engine as _;
use poolkeeper_bus::WebhookKind;
use poolkeeper_placement::{PlacementPolicy, PolicySource};
use serde_json::Value;

use crate::input::{EXIT_INVALID_INPUT, InputError, load_config, offline_index, read_bytes};

/// Why `admit` could not decide.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error(transparent)]
    Input(#[from] InputError),
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
    let index = offline_index(objects, &config, &source)?;
    let review_json = read_bytes(review)?;
    let view = index.placement();
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
