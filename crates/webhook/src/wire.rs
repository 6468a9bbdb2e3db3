//! The AdmissionReview response as the API server reads it.
//!
//! kube's `AdmissionResponse` serializes its `patch: Vec<u8>` as an array of
//! numbers (kube-rs issue 1781), about four bytes per patch byte; the
//! Kubernetes API defines `[]byte` fields as base64 strings. This type is
//! written for the wire: the patch is base64, and an allowed response
//! carries no `status`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use poolkeeper_placement::{Decision, Reason};
use serde::{Serialize, Serializer};

use crate::error::WebhookError;

pub(crate) const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub(crate) const ADMISSION_REVIEW_KIND: &str = "AdmissionReview";

/// An `admission.k8s.io/v1` AdmissionReview carrying a response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewResponse<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: AdmissionResponse<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<DenialStatus<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Base64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// The `metav1.Status` of a denial; the API server shows `message` to the
/// client and answers with `code`.
#[derive(Debug, Serialize)]
struct DenialStatus<'a> {
    status: &'static str,
    message: &'a str,
    reason: &'static str,
    code: u16,
}

/// Bytes sent as a base64 string, as Kubernetes encodes `[]byte`.
#[derive(Debug)]
struct Base64(Vec<u8>);

impl Serialize for Base64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(&self.0))
    }
}

/// The only patch type Kubernetes accepts: RFC 6902.
const JSON_PATCH: &str = "JSONPatch";

/// The JSON body that answers request `uid`: allowed or denied as
/// `decision` says, with its patch and warnings.
pub(crate) fn encode(uid: &str, decision: &Decision) -> Result<Vec<u8>, WebhookError> {
    let patch = match decision.patch.as_ref().filter(|patch| !patch.0.is_empty()) {
        Some(patch) => Some(Base64(
            serde_json::to_vec(patch).map_err(WebhookError::EncodeResponse)?,
        )),
        None => None,
    };
    let status = (!decision.allowed).then(|| {
        let (code, reason) = denial_status(decision.reason);
        DenialStatus {
            status: "Failure",
            message: decision.message.as_deref().unwrap_or("denied"),
            reason,
            code,
        }
    });
    let review = ReviewResponse {
        api_version: ADMISSION_API_VERSION,
        kind: ADMISSION_REVIEW_KIND,
        response: AdmissionResponse {
            uid,
            allowed: decision.allowed,
            status,
            patch_type: patch.as_ref().map(|_| JSON_PATCH),
            patch,
            warnings: &decision.warnings,
        },
    };
    let mut bytes = Vec::with_capacity(
        256 + review
            .response
            .patch
            .as_ref()
            .map_or(0, |p| p.0.len() * 4 / 3),
    );
    serde_json::to_writer(&mut bytes, &review).map_err(WebhookError::EncodeResponse)?;
    Ok(bytes)
}

/// HTTP-style status code and reason carried inside a denial.
fn denial_status(reason: Reason) -> (u16, &'static str) {
    match reason {
        Reason::PolicyInvalid => (500, "InternalError"),
        _ => (403, "Forbidden"),
    }
}
