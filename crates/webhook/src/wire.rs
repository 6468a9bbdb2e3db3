//! The AdmissionReview response as the API server reads it.
//!
//! kube's `AdmissionResponse` serializes its `patch: Vec<u8>` as an array of
//! numbers (kube-rs issue 1781), about four bytes per patch byte; the
//! Kubernetes API defines `[]byte` fields as base64 strings. This type is
//! written for the wire: the patch is base64, and an allowed response
//! carries no `status`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::core::admission::{META_API_VERSION_V1, META_KIND};
use poolkeeper_placement::{Decision, Reason};
use serde::{Serialize, Serializer};

use crate::error::WebhookError;

/// An `admission.k8s.io/v1` AdmissionReview carrying a response.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReviewResponse {
    api_version: &'static str,
    kind: &'static str,
    response: AdmissionResponse,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionResponse {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<DenialStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Base64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// The `metav1.Status` of a denial; the API server shows `message` to the
/// client and answers with `code`.
#[derive(Clone, Debug, PartialEq, Serialize)]
struct DenialStatus {
    status: &'static str,
    message: String,
    reason: &'static str,
    code: u16,
}

/// Bytes sent as a base64 string, as Kubernetes encodes `[]byte`.
#[derive(Clone, Debug, PartialEq)]
struct Base64(Vec<u8>);

impl Serialize for Base64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(&self.0))
    }
}

/// The only patch type Kubernetes accepts: RFC 6902.
const JSON_PATCH: &str = "JSONPatch";

impl ReviewResponse {
    /// The answer to request `uid`: allowed or denied as `decision` says,
    /// with its patch and warnings.
    pub(crate) fn new(uid: &str, decision: &Decision) -> Result<Self, WebhookError> {
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
                message: decision
                    .message
                    .clone()
                    .unwrap_or_else(|| "denied".to_owned()),
                reason,
                code,
            }
        });
        Ok(Self {
            api_version: META_API_VERSION_V1,
            kind: META_KIND,
            response: AdmissionResponse {
                uid: uid.to_owned(),
                allowed: decision.allowed,
                status,
                patch_type: patch.as_ref().map(|_| JSON_PATCH),
                patch,
                warnings: decision.warnings.clone(),
            },
        })
    }

    /// The JSON body sent to the API server.
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>, WebhookError> {
        serde_json::to_vec(self).map_err(WebhookError::EncodeResponse)
    }
}

/// HTTP-style status code and reason carried inside a denial.
fn denial_status(reason: Reason) -> (u16, &'static str) {
    match reason {
        Reason::PolicyInvalid => (500, "InternalError"),
        _ => (403, "Forbidden"),
    }
}
