//! The offline path of `poolkeeper admit`: the same review, no server.

use http::StatusCode;
use poolkeeper_bus::WebhookKind;
use poolkeeper_placement::{PlacementError, PlacementPolicy};
use serde_json::json;

use super::{UID, cluster, fixture, patch_of, pod_review, policy, post};
use crate::review_response;

#[tokio::test]
async fn review_response_is_what_the_server_sends() {
    let index = cluster();
    let view = index.placement();
    let policy = PlacementPolicy::load(&view, policy().source());
    let body = serde_json::to_vec(&pod_review("shop-beijing", json!({}))).unwrap();
    let offline = review_response(WebhookKind::Mutate, &body, &view, policy.as_ref()).unwrap();
    assert_eq!(offline["response"]["uid"], UID);
    assert_eq!(offline["response"]["allowed"], true);
    assert_eq!(patch_of(&offline["response"]).0.len(), 2);

    let f = fixture();
    let (_, served) = post(&f.router, "/mutate-pods", body).await;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&served).unwrap(),
        offline
    );
}

#[test]
fn review_response_fails_closed_and_reports_bad_input() {
    let index = cluster();
    let view = index.placement();
    let body = serde_json::to_vec(&pod_review("shop-beijing", json!({}))).unwrap();
    let broken: Result<PlacementPolicy, PlacementError> = PlacementPolicy::parse("x: y");
    let response = review_response(WebhookKind::Validate, &body, &view, broken.as_ref()).unwrap();
    assert_eq!(response["response"]["allowed"], false);
    assert_eq!(response["response"]["status"]["code"], 500);

    let policy = PlacementPolicy::load(&view, policy().source());
    let error =
        review_response(WebhookKind::Validate, b"nope", &view, policy.as_ref()).unwrap_err();
    assert_eq!(error.status_code(), StatusCode::BAD_REQUEST);
    assert_eq!(error.reason(), "malformed_json");
}
