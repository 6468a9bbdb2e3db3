//! One AdmissionReview in, one AdmissionReview out: the code path shared by
//! the HTTPS server and the offline `poolkeeper admit`.

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{
    AdmissionRequest, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use poolkeeper_bus::{AdmissionResult, WebhookKind};
use poolkeeper_index::PlacementView;
use poolkeeper_placement::{Decision, PlacementError, PlacementPolicy, Reason, mutate, validate};
use serde_json::Value;

use crate::error::WebhookError;
use crate::wire::ReviewResponse;

/// A reviewed request: the decision and the AdmissionReview that answers it.
#[derive(Clone, Debug)]
pub(crate) struct Reviewed {
    /// `request.uid`, echoed in the response.
    pub(crate) uid: String,
    /// `namespace/name` of the object (`generateName*` when it has no name yet).
    pub(crate) subject: String,
    pub(crate) decision: Decision,
    pub(crate) response: ReviewResponse,
}

impl Reviewed {
    /// What the request came to, as `AdmissionDecided` reports it.
    pub(crate) fn result(&self) -> AdmissionResult {
        match (self.decision.allowed, self.decision.is_patched()) {
            (false, _) => AdmissionResult::Denied,
            (true, true) => AdmissionResult::Patched,
            (true, false) => AdmissionResult::Allowed,
        }
    }
}

/// Decides `review_json` and returns the AdmissionReview response, exactly
/// as the server sends it (the patch as a base64 string).
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
) -> Result<Value, WebhookError> {
    let reviewed = review(webhook, review_json, view, policy)?;
    serde_json::to_value(&reviewed.response).map_err(WebhookError::EncodeResponse)
}

/// [`review_response`] with the decision kept for events and logs.
pub(crate) fn review(
    webhook: WebhookKind,
    review_json: &[u8],
    view: &PlacementView<'_>,
    policy: Result<&PlacementPolicy, &PlacementError>,
) -> Result<Reviewed, WebhookError> {
    let request = parse_request(review_json)?;
    let decision = decide(webhook, &request, view, policy)?;
    Ok(Reviewed {
        uid: request.uid.clone(),
        subject: subject(&request),
        response: ReviewResponse::new(&request.uid, &decision)?,
        decision,
    })
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
            Err(error) => return Err(WebhookError::MalformedJson(error)),
        },
    };
    if api_version != META_API_VERSION_V1 || kind != META_KIND {
        return Err(WebhookError::WrongType { api_version, kind });
    }
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(WebhookError::MalformedReview)?;
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
            operation: operation_name(&request.operation),
        })?;
    let pod: Pod = serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(WebhookError::InvalidPod)?;
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
    Ok(match webhook {
        WebhookKind::Mutate => mutate(&pod, namespace, view, policy),
        WebhookKind::Validate => validate(&pod, namespace, view, policy),
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
