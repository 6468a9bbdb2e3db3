//! The two admission endpoints, as plain HTTP (the server wraps them in TLS).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::Response;
use axum::routing::post;
use poolkeeper_bus::WebhookKind;

use crate::handler::AppState;
use crate::settings::WebhookSettings;

/// POST `mutate_path` and `validate_path`; anything else is 404 or 405.
///
/// The paths are taken literally: the configuration admits only plain
/// paths (no `{capture}`, no `*wildcard`), which is what makes this safe.
pub(crate) fn router(settings: &WebhookSettings, state: Arc<AppState>) -> Router {
    Router::new()
        .route(&settings.mutate_path, post(mutate_handler))
        .route(&settings.validate_path, post(validate_handler))
        .layer(DefaultBodyLimit::max(settings.max_body_bytes))
        .with_state(state)
}

async fn mutate_handler(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.handle_request(WebhookKind::Mutate, body)
}

async fn validate_handler(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.handle_request(WebhookKind::Validate, body)
}
