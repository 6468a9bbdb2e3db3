//! Requests that are not usable AdmissionReviews: answered with an HTTP
//! error and published as `Invalid`, never a panic.

use std::time::Duration;

use http::{Method, StatusCode};
use poolkeeper_bus::{AdmissionResult, Event, WebhookKind};
use serde_json::{Value, json};

use super::{fixture, pod_review, post, send};

/// Every way a body can fail to be an AdmissionReview for a Pod, with the
/// text the answer must contain and the reason `AdmissionDecided` carries.
fn malformed_cases() -> Vec<(&'static str, Vec<u8>, &'static str, &'static str)> {
    let valid = pod_review("shop-beijing", json!({}));
    let mut cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "empty body",
            Vec::new(),
            "request body is not valid JSON",
            "malformed_json",
        ),
        (
            "garbage",
            b"\x00\xff garbage \x13".to_vec(),
            "request body is not valid JSON",
            "malformed_json",
        ),
        (
            "not an object",
            b"[1, 2, 3]".to_vec(),
            "expected apiVersion admission.k8s.io/v1",
            "wrong_type",
        ),
        (
            "just a string",
            b"\"AdmissionReview\"".to_vec(),
            "expected apiVersion",
            "wrong_type",
        ),
        (
            "deeply nested",
            [b"[".repeat(20_000), b"]".repeat(20_000)].concat(),
            "expected apiVersion admission.k8s.io/v1",
            "wrong_type",
        ),
        (
            "deeply nested, unbalanced",
            b"[".repeat(20_000),
            "request body is not valid JSON",
            "malformed_json",
        ),
    ];
    let edit = |change: &dyn Fn(&mut Value)| {
        let mut review = valid.clone();
        change(&mut review);
        serde_json::to_vec(&review).unwrap()
    };
    let remove = |object: &mut Value, field: &str| {
        object.as_object_mut().unwrap().remove(field);
    };
    cases.extend([
        (
            "wrong apiVersion",
            edit(&|r| r["apiVersion"] = json!("admission.k8s.io/v1beta1")),
            "got apiVersion \"admission.k8s.io/v1beta1\"",
            "wrong_type",
        ),
        (
            "wrong kind",
            edit(&|r| r["kind"] = json!("TokenReview")),
            "kind \"TokenReview\"",
            "wrong_type",
        ),
        (
            "no request",
            edit(&|r| remove(r, "request")),
            "AdmissionReview has no request",
            "missing_request",
        ),
        (
            "null request",
            edit(&|r| r["request"] = Value::Null),
            "AdmissionReview has no request",
            "missing_request",
        ),
        (
            "no object",
            edit(&|r| remove(&mut r["request"], "object")),
            "AdmissionReview request for a Pod CREATE has no object",
            "missing_object",
        ),
        (
            "null object",
            edit(&|r| r["request"]["object"] = Value::Null),
            "has no object",
            "missing_object",
        ),
        (
            "object not a pod",
            edit(&|r| r["request"]["object"]["spec"]["tolerations"] = json!("not a list")),
            "request.object is not a valid Pod",
            "invalid_pod",
        ),
        (
            "no uid",
            edit(&|r| remove(&mut r["request"], "uid")),
            "malformed AdmissionReview: missing field `uid`",
            "malformed_review",
        ),
        (
            "unknown operation",
            edit(&|r| r["request"]["operation"] = json!("EXPLODE")),
            "malformed AdmissionReview",
            "malformed_review",
        ),
    ]);
    // Read fields are decoded in full: a lone surrogate, which a skipped
    // field may carry, is refused in one the decisions read.
    let lone_surrogate = |field: &str, value: &str| {
        let marker = format!("\"{field}\":\"{value}\"");
        let text = String::from_utf8(serde_json::to_vec(&valid).unwrap()).unwrap();
        assert!(text.contains(&marker), "{marker} in {text}");
        text.replace(&marker, &format!("\"{field}\":\"\\uDDDD\""))
            .into_bytes()
    };
    cases.extend([
        (
            "lone surrogate in the uid",
            lone_surrogate("uid", super::UID),
            "malformed AdmissionReview",
            "malformed_review",
        ),
        (
            "lone surrogate in the namespace",
            lone_surrogate("namespace", "shop-beijing"),
            "malformed AdmissionReview",
            "malformed_review",
        ),
    ]);
    let full = serde_json::to_vec(&valid).unwrap();
    let mut not_utf8 = edit(&|review| review["request"]["userInfo"]["username"] = json!("ADMIN"));
    let at = not_utf8.windows(5).position(|w| w == b"ADMIN").unwrap();
    not_utf8[at] = 0xff;
    cases.push((
        "not UTF-8 in a string otherwise skipped",
        not_utf8,
        "request body is not valid JSON: it is not UTF-8 (invalid bytes from offset",
        "malformed_json",
    ));
    cases.push((
        "truncated",
        full[..full.len() / 2].to_vec(),
        "request body is not valid JSON",
        "malformed_json",
    ));
    cases
}

#[tokio::test]
async fn malformed_requests_get_400() {
    let f = fixture();
    let cases = malformed_cases();
    let mut expected = Vec::new();
    for (name, body, text, reason) in &cases {
        for (path, webhook) in [
            ("/mutate-pods", WebhookKind::Mutate),
            ("/validate-pods", WebhookKind::Validate),
        ] {
            let (status, answer) = post(&f.router, path, body.clone()).await;
            let answer = String::from_utf8_lossy(&answer);
            assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {answer}");
            assert!(answer.contains(text), "{name}: {answer:?} lacks {text:?}");
            expected.push((webhook, AdmissionResult::Invalid, *reason));
        }
    }
    f.assert_decided(&expected).await;
    // Invalid requests are timed like the others.
    for event in f.recorder.events() {
        if let Event::AdmissionDecided { duration, .. } = event {
            assert!(duration > Duration::ZERO && duration < Duration::from_secs(10));
        }
    }
}

#[tokio::test]
async fn every_truncation_is_answered() {
    let f = fixture();
    let full = serde_json::to_vec(&pod_review(
        "shop-hangzhou",
        json!({"nodeSelector": {"zone": "a"}}),
    ))
    .unwrap();
    for end in (0..full.len()).step_by(7) {
        let (status, _) = post(&f.router, "/validate-pods", full[..end].to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "prefix of {end} bytes");
    }
    let (status, _) = post(&f.router, "/validate-pods", full).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn scrambled_bodies_never_panic() {
    let f = fixture();
    let full = serde_json::to_vec(&pod_review("shop-hangzhou", json!({}))).unwrap();
    // A deterministic xorshift walk that overwrites single bytes.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut body = full.clone();
        let at = (state % body.len() as u64) as usize;
        body[at] = (state >> 32) as u8;
        let (status, _) = post(&f.router, "/validate-pods", body).await;
        assert!(
            status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
            "unexpected {status}"
        );
    }
    assert_eq!(
        f.decided(300).await.len(),
        300,
        "every request is published"
    );
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let f = fixture();
    let mut review = pod_review("shop-beijing", json!({}));
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(100 * 1024)});
    let (status, _) = post(
        &f.router,
        "/validate-pods",
        serde_json::to_vec(&review).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // Just under the limit is fine.
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(60 * 1024)});
    let (status, _) = post(
        &f.router,
        "/validate-pods",
        serde_json::to_vec(&review).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    f.assert_decided(&[
        (
            WebhookKind::Validate,
            AdmissionResult::Invalid,
            "body_too_large",
        ),
        (
            WebhookKind::Validate,
            AdmissionResult::Denied,
            "outside_pool",
        ),
    ])
    .await;
}

#[tokio::test]
async fn wrong_method_and_path() {
    let f = fixture();
    let (status, _) = send(&f.router, Method::GET, "/validate-pods", "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = post(&f.router, "/mutate", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Only the webhook paths decide: the next event is the next admission.
    let (status, _) = post(&f.router, "/mutate-pods", "{").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    f.assert_decided(&[(
        WebhookKind::Mutate,
        AdmissionResult::Invalid,
        "malformed_json",
    )])
    .await;
}
