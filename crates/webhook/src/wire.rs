//! The AdmissionReview response as the API server reads it.
//!
//! kube's `AdmissionResponse` serializes its `patch: Vec<u8>` as an array of
//! numbers (kube-rs issue 1781), about four bytes per patch byte; the
//! Kubernetes API defines `[]byte` fields as base64 strings. This answer is
//! written for the wire: the patch is base64, and an allowed response
//! carries no `status`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use poolkeeper_placement::{Decision, Reason};
use serde::Serialize;

use crate::error::WebhookError;

pub(crate) const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub(crate) const ADMISSION_REVIEW_KIND: &str = "AdmissionReview";

/// The `metav1.Status` of a denial; the API server shows `message` to the
/// client and answers with `code`.
#[derive(Debug, Serialize)]
struct DenialStatus<'a> {
    status: &'static str,
    message: &'a str,
    reason: &'static str,
    code: u16,
}

/// The only patch type Kubernetes accepts: RFC 6902.
const JSON_PATCH: &str = "JSONPatch";

/// The JSON body that answers request `uid`: allowed or denied as
/// `decision` says, with its patch and warnings.
///
/// Written field by field rather than through a serialized struct: the
/// patch's base64 text needs no escaping, and escaping it byte by byte was
/// the largest part of a mutation's answer.
pub(crate) fn encode(uid: &str, decision: &Decision) -> Result<Vec<u8>, WebhookError> {
    let patch = match decision.patch.as_ref().filter(|patch| !patch.0.is_empty()) {
        Some(patch) => {
            let json = serde_json::to_vec(patch).map_err(WebhookError::EncodeResponse)?;
            Some(STANDARD.encode(json))
        }
        None => None,
    };
    let mut out = Vec::with_capacity(256 + patch.as_ref().map_or(0, String::len));
    out.extend_from_slice(b"{\"apiVersion\":\"");
    out.extend_from_slice(ADMISSION_API_VERSION.as_bytes());
    out.extend_from_slice(b"\",\"kind\":\"");
    out.extend_from_slice(ADMISSION_REVIEW_KIND.as_bytes());
    out.extend_from_slice(b"\",\"response\":{\"uid\":");
    write_json(&mut out, uid)?;
    out.extend_from_slice(if decision.allowed {
        b",\"allowed\":true"
    } else {
        b",\"allowed\":false"
    });
    if !decision.allowed {
        let (code, reason) = denial_status(decision.reason);
        out.extend_from_slice(b",\"status\":");
        write_json(
            &mut out,
            &DenialStatus {
                status: "Failure",
                message: decision.message.as_deref().unwrap_or("denied"),
                reason,
                code,
            },
        )?;
    }
    if let Some(patch) = patch {
        out.extend_from_slice(b",\"patch\":\"");
        out.extend_from_slice(patch.as_bytes());
        out.extend_from_slice(b"\",\"patchType\":\"");
        out.extend_from_slice(JSON_PATCH.as_bytes());
        out.push(b'"');
    }
    if !decision.warnings.is_empty() {
        out.extend_from_slice(b",\"warnings\":");
        write_json(&mut out, &decision.warnings)?;
    }
    out.extend_from_slice(b"}}");
    Ok(out)
}

fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), WebhookError> {
    serde_json::to_writer(out, value).map_err(WebhookError::EncodeResponse)
}

/// HTTP-style status code and reason carried inside a denial.
fn denial_status(reason: Reason) -> (u16, &'static str) {
    match reason {
        Reason::PolicyInvalid => (500, "InternalError"),
        _ => (403, "Forbidden"),
    }
}
