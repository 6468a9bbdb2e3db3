//! The bytes on the wire: Kubernetes' AdmissionReview encoding, with the
//! patch as a base64 string (`[]byte` in the Kubernetes API).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::StatusCode;
use json_patch::Patch;
use serde_json::json;

use super::{POOL_LABEL, UID, fixture, pod_review, post};

/// The placement annotation's text for a Pod bound through its namespace.
const RECORD: &str =
    r#"{"pool":"beijing","binding":"namespace","mode":"enforce","constraints":"judge"}"#;

/// The RFC 6902 patch that binds a plain Pod to the Cloud pool `beijing`,
/// and records the decision.
fn beijing_patch() -> String {
    let record = serde_json::to_string(RECORD).unwrap();
    format!(
        r#"[{{"op":"add","path":"/spec/affinity","value":{{"nodeAffinity":{{"requiredDuringSchedulingIgnoredDuringExecution":{{"nodeSelectorTerms":[{{"matchExpressions":[{{"key":"{POOL_LABEL}","operator":"In","values":["beijing"]}}]}}]}}}}}}}},{{"op":"add","path":"/metadata/annotations","value":{{"poolkeeper.io/placement":{record}}}}}]"#
    )
}

#[tokio::test]
async fn a_mutate_response_carries_the_patch_as_base64() {
    let f = fixture();
    let body = serde_json::to_vec(&pod_review("shop-beijing", json!({}))).unwrap();
    let (status, wire) = post(&f.router, "/mutate-pods", body).await;
    assert_eq!(status, StatusCode::OK);

    let encoded = STANDARD.encode(beijing_patch());
    let expected = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{UID}","allowed":true,"patch":"{encoded}","patchType":"JSONPatch"}}}}"#
    );
    assert_eq!(String::from_utf8_lossy(&wire), expected);

    // What the API server does with it: decode, then apply as RFC 6902.
    let decoded = STANDARD.decode(&encoded).unwrap();
    let patch: Patch = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!([{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": ["beijing"]}]}
            ]}
        }}}, {"op": "add", "path": "/metadata/annotations", "value": {"poolkeeper.io/placement": RECORD}}])
    );
}

#[tokio::test]
async fn allowed_and_denied_responses_on_the_wire() {
    let f = fixture();
    let unbound = serde_json::to_vec(&pod_review("default", json!({}))).unwrap();
    let (_, wire) = post(&f.router, "/validate-pods", unbound).await;
    assert_eq!(
        String::from_utf8_lossy(&wire),
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{UID}","allowed":true}}}}"#
        )
    );

    let outside =
        serde_json::to_vec(&pod_review("shop-beijing", json!({"nodeName": "hz-1"}))).unwrap();
    let (_, wire) = post(&f.router, "/validate-pods", outside).await;
    let answer: serde_json::Value = serde_json::from_slice(&wire).unwrap();
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&wire),
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{UID}","allowed":false,"status":{{"status":"Failure","message":{},"reason":"Forbidden","code":403}}}}}}"#,
            serde_json::to_string(message).unwrap()
        )
    );
}

#[tokio::test]
async fn warnings_on_the_wire() {
    let f = fixture();
    let gone = serde_json::to_vec(&pod_review("shop-gone", json!({}))).unwrap();
    let (_, wire) = post(&f.router, "/mutate-pods", gone).await;
    assert_eq!(
        String::from_utf8_lossy(&wire),
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{UID}","allowed":true,"warnings":["node pool \"gone\" (bound through namespace \"shop-gone\") does not exist; the pod is not restricted to a node pool"]}}}}"#
        )
    );
}

/// Every part of an answer at once, with a uid and texts that need escaping.
#[test]
fn the_answer_is_json_whatever_its_texts_hold() {
    use poolkeeper_placement::{Decision, Reason};

    let patch: Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "\"é\"\n"}}]),
    )
    .unwrap();
    let mut patched = Decision::allow(Reason::InPool).with_warning("a \"quoted\"\\ warning");
    patched.patch = Some(patch.clone());
    let denied = Decision::deny(Reason::PolicyInvalid, "bad \u{1} \"policy\"");
    let uid = "u-\"1\"\\";
    let answer = |decision: &Decision| -> serde_json::Value {
        serde_json::from_slice(&crate::wire::encode(uid, decision).unwrap()).unwrap()
    };
    let encoded = STANDARD.encode(serde_json::to_vec(&patch).unwrap());
    assert_eq!(
        answer(&patched),
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": uid, "allowed": true, "patch": encoded, "patchType": "JSONPatch",
            "warnings": ["a \"quoted\"\\ warning"]
        }})
    );
    assert_eq!(
        answer(&denied),
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": uid, "allowed": false, "status": {
                "status": "Failure", "message": "bad \u{1} \"policy\"", "reason": "InternalError", "code": 500
            }
        }})
    );
}
