//! `poolkeeper admit`: one AdmissionReview decided offline against objects
//! from a file, exactly as the webhook would decide it.

use std::path::Path;
use std::process::ExitCode;

use base64::Engine as _;
use poolkeeper_bus::WebhookKind;
use poolkeeper_config::Config;
use poolkeeper_placement::{PlacementPolicy, build_index_from_objects};
use serde_json::Value;

use crate::cli::EXIT_INVALID_INPUT;
use crate::controller::placement_settings;

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
        Err(message) => {
            eprintln!("poolkeeper admit: {message}");
            ExitCode::from(EXIT_INVALID_INPUT)
        }
    }
}

/// The pretty-printed response JSON, or why the input cannot be used.
pub fn respond(
    objects: &Path,
    review: &Path,
    webhook: WebhookKind,
    config: Option<&Path>,
) -> Result<String, String> {
    let config = match config {
        Some(path) => Config::load(path)
            .map_err(|errors| format!("{}: invalid configuration:\n{errors}", path.display()))?,
        None => Config::default(),
    };
    let settings = placement_settings(&config);
    let objects_yaml = read(objects)?;
    let review_json = std::fs::read(review).map_err(|e| format!("{}: {e}", review.display()))?;

    let offline = build_index_from_objects(&objects_yaml, &settings)
        .map_err(|e| format!("{}: {e}", objects.display()))?;
    for note in &offline.notes {
        eprintln!("{}: {note}", objects.display());
    }
    let view = offline.index.placement();
    let policy = PlacementPolicy::load(&view, &settings.policy);
    let mut response = poolkeeper_webhook::review_response(
        webhook,
        &review_json,
        &view,
        policy.as_ref(),
        &settings,
    )
    .map_err(|e| format!("{}: {e}", review.display()))?;
    if let Some(patch) = encode_patch(&mut response) {
        eprintln!("JSON patch: {patch}");
    }
    serde_json::to_string_pretty(&response).map_err(|e| format!("cannot print the response: {e}"))
}

/// Rewrites `response.patch` from a byte array into base64, the form
/// Kubernetes itself uses for it, and returns the patch as text for people.
fn encode_patch(review: &mut Value) -> Option<String> {
    let patch = review.pointer_mut("/response/patch")?;
    let bytes: Vec<u8> = serde_json::from_value(patch.clone()).ok()?;
    *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(&bytes));
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}
