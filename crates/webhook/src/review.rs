//! One AdmissionReview in, one AdmissionReview out: the code path shared by
//! the HTTPS server and the offline `poolkeeper admit`.

use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use kube::core::{DynamicObject, Status};
use poolkeeper_bus::WebhookKind;
use poolkeeper_index::PlacementView;
use poolkeeper_placement::{
    Decision, PlacementError, PlacementPolicy, PlacementSettings, Reason, mutate, validate,
};
use serde_json::Value;

use crate::error::WebhookError;

/// The denial sent while the index is not synchronized.
pub const NOT_READY_MESSAGE: &str = "poolkeeper is not ready (index not synchronized), retry";

/// A reviewed request: the decision and the AdmissionReview that answers it.
#[derive(Clone, Debug)]
pub struct Reviewed {
    /// `request.uid`, echoed in the response.
    pub uid: String,
    /// `namespace/name` of the object (`generateName*` when it has no name yet).
    pub subject: String,
    pub decision: Decision,
    /// The complete `admission.k8s.io/v1` AdmissionReview response.
    pub response: Value,
}

/// Decides `review_json` and returns the AdmissionReview response.
///
/// `policy` is the placement policy as read from the ConfigMap, or why it
/// could not be read: then validation denies every Pod (fail closed, the
/// message names the ConfigMap problem) and mutation lets Pods through
/// unchanged with a warning.
pub fn review_response(
    webhook: WebhookKind,
    review_json: &[u8],
    view: &PlacementView<'_>,
    policy: Result<&PlacementPolicy, &PlacementError>,
    settings: &PlacementSettings,
) -> Result<Value, WebhookError> {
    review(webhook, review_json, view, policy, settings).map(|reviewed| reviewed.response)
}

/// [`review_response`] with the decision kept for metrics and logs.
pub fn review(
    webhook: WebhookKind,
    review_json: &[u8],
    view: &PlacementView<'_>,
    policy: Result<&PlacementPolicy, &PlacementError>,
    settings: &PlacementSettings,
) -> Result<Reviewed, WebhookError> {
    let request = parse_request(review_json)?;
    let decision = decide(webhook, &request, view, policy, settings)?;
    render(&request, decision)
}

/// The answer while the index is not synchronized: every well-formed
/// request is denied with status code 503 so the client retries.
pub fn not_ready_review(review_json: &[u8]) -> Result<Reviewed, WebhookError> {
    let request = parse_request(review_json)?;
    render(
        &request,
        Decision::deny(Reason::NotReady, NOT_READY_MESSAGE),
    )
}

fn parse_request(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, WebhookError> {
    /// Only the type fields; the rest of the body is skipped without being
    /// built, so checking the type first costs little beside the full parse.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TypeFields {
        #[serde(default)]
        api_version: Option<Value>,
        #[serde(default)]
        kind: Option<Value>,
    }
    let text = |field: Option<Value>| match field {
        Some(Value::String(text)) => text,
        _ => String::new(),
    };
    let (api_version, kind) = match serde_json::from_slice::<TypeFields>(body) {
        Ok(types) => (text(types.api_version), text(types.kind)),
        // Not an object, or not JSON at all: the slow path tells which.
        Err(_) => match serde_json::from_slice::<Value>(body) {
            Ok(_) => (String::new(), String::new()),
            Err(error) => return Err(WebhookError::MalformedJson(error.to_string())),
        },
    };
    if api_version != META_API_VERSION_V1 || kind != META_KIND {
        return Err(WebhookError::WrongType { api_version, kind });
    }
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| WebhookError::MalformedReview(e.to_string()))?;
    review.try_into().map_err(|_| WebhookError::MissingRequest)
}

/// A Pod itself, not one of its subresources (`pods/binding`, `pods/status`, ...).
fn is_pod(request: &AdmissionRequest<DynamicObject>) -> bool {
    request.kind.group.is_empty()
        && request.kind.version == "v1"
        && request.kind.kind == "Pod"
        && request
            .sub_resource
            .as_deref()
            .unwrap_or_default()
            .is_empty()
}

fn operation_name(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn decide(
    webhook: WebhookKind,
    request: &AdmissionRequest<DynamicObject>,
    view: &PlacementView<'_>,
    policy: Result<&PlacementPolicy, &PlacementError>,
    settings: &PlacementSettings,
) -> Result<Decision, WebhookError> {
    if !is_pod(request) {
        return Ok(Decision::allow(Reason::NotPod));
    }
    // Placement is decided when a Pod is created; node constraints are
    // immutable afterwards.
    if request.operation != Operation::Create {
        return Ok(Decision::allow(Reason::OperationIgnored));
    }
    let object = request
        .object
        .as_ref()
        .ok_or_else(|| WebhookError::MissingObject {
            operation: operation_name(&request.operation).to_owned(),
        })?;
    let pod: Pod = serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| WebhookError::InvalidPod(e.to_string()))?;
    let namespace = request
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .or(pod.metadata.namespace.as_deref())
        .unwrap_or_default();

    let policy = match policy {
        Ok(policy) => policy,
        Err(error) => return Ok(policy_invalid(webhook, error)),
    };
    let pool_label = settings.pool_label.as_str();
    Ok(match webhook {
        WebhookKind::Mutate => mutate(&pod, namespace, view, policy, pool_label),
        WebhookKind::Validate => validate(&pod, namespace, view, policy, pool_label),
    })
}

fn policy_invalid(webhook: WebhookKind, error: &PlacementError) -> Decision {
    match webhook {
        WebhookKind::Mutate => Decision::allow(Reason::PolicyInvalid).with_warning(format!(
            "pod not mutated: the placement policy is invalid: {error}"
        )),
        WebhookKind::Validate => Decision::deny(
            Reason::PolicyInvalid,
            format!("pods cannot be admitted while the placement policy is invalid: {error}"),
        ),
    }
}

/// HTTP-style status code and reason carried inside a denial.
fn denial_status(reason: Reason) -> (u16, &'static str) {
    match reason {
        Reason::NotReady => (503, "ServiceUnavailable"),
        Reason::PolicyInvalid => (500, "InternalError"),
        _ => (403, "Forbidden"),
    }
}

fn render(
    request: &AdmissionRequest<DynamicObject>,
    decision: Decision,
) -> Result<Reviewed, WebhookError> {
    let mut response = AdmissionResponse::from(request);
    if !decision.allowed {
        let (code, reason) = denial_status(decision.reason);
        let message = decision.message.as_deref().unwrap_or("denied");
        response.allowed = false;
        response.result = Status::failure(message, reason).with_code(code);
    }
    if let Some(patch) = decision.patch.clone().filter(|patch| !patch.0.is_empty()) {
        response = response
            .with_patch(patch)
            .map_err(|e| WebhookError::EncodeResponse(e.to_string()))?;
    }
    if !decision.warnings.is_empty() {
        response.warnings = Some(decision.warnings.clone());
    }
    let response = serde_json::to_value(response.into_review())
        .map_err(|e| WebhookError::EncodeResponse(e.to_string()))?;
    Ok(Reviewed {
        uid: request.uid.clone(),
        subject: subject(request),
        decision,
        response,
    })
}

fn subject(request: &AdmissionRequest<DynamicObject>) -> String {
    let name = if request.name.is_empty() {
        request
            .object
            .as_ref()
            .and_then(|object| object.metadata.generate_name.as_deref())
            .map(|prefix| format!("{prefix}*"))
            .unwrap_or_default()
    } else {
        request.name.clone()
    };
    match request.namespace.as_deref() {
        Some(namespace) if !namespace.is_empty() => format!("{namespace}/{name}"),
        _ => name,
    }
}
