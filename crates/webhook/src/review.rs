//! One AdmissionReview in, one AdmissionReview out: the code path shared by
//! the HTTPS server and the offline `poolkeeper admit`.
//!
//! Only what the decision reads is parsed: the type fields, and of the
//! request its uid, kind, subresource, operation, name, namespace and (for
//! a Pod CREATE) the Pod's [`PodPlacement`]. The rest of the body is
//! skipped without being built.

use std::borrow::Cow;
use std::fmt;

use poolkeeper_bus::{AdmissionResult, WebhookKind};
use poolkeeper_index::PlacementView;
use poolkeeper_placement::{
    Decision, PlacementError, PlacementPolicy, PodPlacement, Reason, Workload, WorkloadKind,
    mutate, mutate_workload, validate, validate_workload,
};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::WebhookError;
use crate::wire::{self, ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND};

/// A reviewed request: its identity and the decision.
#[derive(Clone, Debug)]
pub(crate) struct Reviewed<'a> {
    /// `request.uid`, echoed in the response.
    pub(crate) uid: Cow<'a, str>,
    namespace: Cow<'a, str>,
    name: Cow<'a, str>,
    /// `name` is the object's `generateName`: it has no name yet.
    generated: bool,
    pub(crate) decision: Decision,
}

impl Reviewed<'_> {
    /// What the request came to, as `AdmissionDecided` reports it.
    pub(crate) fn result(&self) -> AdmissionResult {
        match (self.decision.allowed, self.decision.is_patched()) {
            (false, _) => AdmissionResult::Denied,
            (true, true) => AdmissionResult::Patched,
            (true, false) => AdmissionResult::Allowed,
        }
    }

    /// The request's namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `namespace/name` of the object (`generateName*` when it has no name yet).
    pub(crate) fn subject(&self) -> impl fmt::Display + '_ {
        Subject(self)
    }

    /// The AdmissionReview that answers the request, as sent.
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>, WebhookError> {
        wire::encode(&self.uid, &self.decision)
    }
}

struct Subject<'r, 'a>(&'r Reviewed<'a>);

impl fmt::Display for Subject<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reviewed = self.0;
        if !reviewed.namespace.is_empty() {
            write!(f, "{}/", reviewed.namespace)?;
        }
        f.write_str(&reviewed.name)?;
        if reviewed.generated {
            f.write_str("*")?;
        }
        Ok(())
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
    serde_json::from_slice(&reviewed.to_bytes()?).map_err(WebhookError::EncodeResponse)
}

/// [`review_response`] with the decision kept for events and logs.
pub(crate) fn review<'a>(
    webhook: WebhookKind,
    review_json: &'a [u8],
    view: &PlacementView<'_>,
    policy: Result<&PlacementPolicy, &PlacementError>,
) -> Result<Reviewed<'a>, WebhookError> {
    decide(webhook, parse_request(review_json)?, view, policy)
}

fn decide<'a>(
    webhook: WebhookKind,
    request: Request<'a>,
    view: &PlacementView<'_>,
    policy: Result<&PlacementPolicy, &PlacementError>,
) -> Result<Reviewed<'a>, WebhookError> {
    let mut reviewed = Reviewed {
        uid: request.uid.0,
        namespace: request.namespace.map(|text| text.0).unwrap_or_default(),
        name: request.name.map(|text| text.0).unwrap_or_default(),
        generated: false,
        decision: Decision::allow(Reason::NotPod),
    };
    if request
        .sub_resource
        .as_ref()
        .is_some_and(|sub| !sub.0.is_empty())
    {
        return Ok(reviewed);
    }
    if let Some(kind) = request.kind.workload() {
        let submitted = Submitted {
            operation: request.operation,
            object: request.object.and_then(Object::sent),
            old_object: request.old_object,
        };
        return review_workload(webhook, kind, submitted, reviewed, view, policy);
    }
    if !request.kind.is_pod() {
        return Ok(reviewed);
    }
    // Placement is decided when a Pod is created; node constraints are
    // immutable afterwards.
    if request.operation != Operation::Create {
        reviewed.decision = Decision::allow(Reason::OperationIgnored);
        return Ok(reviewed);
    }
    let mut pod = match request.object {
        Some(Object::Pod(pod)) => *pod,
        Some(Object::Raw(object)) => {
            serde_json::from_str(object.get()).map_err(WebhookError::InvalidPod)?
        }
        None => {
            return Err(WebhookError::MissingObject {
                operation: "CREATE",
            });
        }
    };
    if reviewed.namespace.is_empty() {
        reviewed.namespace = Cow::Owned(std::mem::take(&mut pod.namespace));
    }
    if reviewed.name.is_empty() && !pod.generate_name.is_empty() {
        reviewed.name = Cow::Owned(std::mem::take(&mut pod.generate_name));
        reviewed.generated = true;
    }
    reviewed.decision = match policy {
        Err(error) => policy_invalid(webhook, error),
        Ok(policy) => match webhook {
            WebhookKind::Mutate => mutate(&pod, &reviewed.namespace, view, policy),
            WebhookKind::Validate => validate(&pod, &reviewed.namespace, view, policy),
        },
    };
    Ok(reviewed)
}

/// A workload on CREATE, or on an UPDATE that changes its Pod template (an
/// update of anything else, such as a controller scaling a ReplicaSet, is
/// not judged again).
fn review_workload<'a>(
    webhook: WebhookKind,
    kind: WorkloadKind,
    request: Submitted<'a>,
    mut reviewed: Reviewed<'a>,
    view: &PlacementView<'_>,
    policy: Result<&PlacementPolicy, &PlacementError>,
) -> Result<Reviewed<'a>, WebhookError> {
    let operation = match request.operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete | Operation::Connect => {
            reviewed.decision = Decision::allow(Reason::OperationIgnored);
            return Ok(reviewed);
        }
    };
    let object = request
        .object
        .ok_or(WebhookError::MissingObject { operation })?;
    let workload =
        Workload::from_json(kind, object.get()).map_err(WebhookError::InvalidWorkload)?;
    if request.operation == Operation::Update {
        let old = request
            .old_object
            .map(|old| Workload::from_json(kind, old.get()))
            .transpose()
            .map_err(WebhookError::InvalidWorkload)?;
        if old.is_some_and(|old| old.same_template(&workload)) {
            reviewed.decision = Decision::allow(Reason::OperationIgnored);
            return Ok(reviewed);
        }
    }
    if reviewed.namespace.is_empty() {
        reviewed.namespace = Cow::Owned(workload.namespace.clone());
    }
    if reviewed.name.is_empty() {
        reviewed.name = Cow::Owned(workload.name.clone());
        reviewed.generated = true;
    }
    reviewed.decision = match policy {
        Err(error) => policy_invalid(webhook, error),
        Ok(policy) => match webhook {
            WebhookKind::Mutate => mutate_workload(&workload, &reviewed.namespace, view, policy),
            WebhookKind::Validate => {
                validate_workload(&workload, &reviewed.namespace, view, policy)
            }
        },
    };
    Ok(reviewed)
}

/// What a request submits: the operation and the object, before and after.
struct Submitted<'a> {
    operation: Operation,
    object: Option<&'a RawValue>,
    old_object: Option<&'a RawValue>,
}

/// A string field, borrowed from the body unless it holds escapes.
#[derive(Debug, Default, Deserialize)]
#[serde(transparent)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// The AdmissionReview with its request left unparsed until the type
/// fields are known to be right.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeFieldsFirst<'a> {
    #[serde(default)]
    api_version: Option<Value>,
    #[serde(default)]
    kind: Option<Value>,
    #[serde(default, borrow)]
    request: Option<&'a RawValue>,
}

struct Request<'a> {
    uid: Text<'a>,
    kind: Kind<'a>,
    sub_resource: Option<Text<'a>>,
    name: Option<Text<'a>>,
    namespace: Option<Text<'a>>,
    operation: Operation,
    object: Option<Object<'a>>,
    old_object: Option<&'a RawValue>,
}

/// `request.object`: a Pod's [`PodPlacement`] read in the same pass as the
/// request when its `kind` came first (as the API server writes it), else
/// the object as sent.
enum Object<'a> {
    Pod(Box<PodPlacement>),
    Raw(&'a RawValue),
}

impl<'a> Object<'a> {
    /// The object as sent; only a Pod request's is ever read on the way.
    fn sent(self) -> Option<&'a RawValue> {
        match self {
            Object::Raw(object) => Some(object),
            Object::Pod(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Request<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RequestVisitor { pod_in_pass: false })
    }
}

/// Reads a request; `pod_in_pass` reads a Pod object as [`PodPlacement`]
/// on the way. A Pod that does not read so fails the whole pass, which
/// [`parse_request`] then reads again without it.
struct RequestVisitor {
    pod_in_pass: bool,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum RequestField {
    Uid,
    Kind,
    SubResource,
    Name,
    Namespace,
    Operation,
    Object,
    OldObject,
    #[serde(other)]
    Other,
}

impl<'de> serde::de::Visitor<'de> for RequestVisitor {
    type Value = Request<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct Request")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Request<'de>, A::Error> {
        use serde::de::Error;
        fn once<T, E: Error>(slot: &mut Option<T>, field: &'static str, value: T) -> Result<(), E> {
            if slot.replace(value).is_some() {
                return Err(E::duplicate_field(field));
            }
            Ok(())
        }
        let (mut uid, mut kind, mut operation) = (None, None, None);
        let (mut sub_resource, mut name, mut namespace) = (None, None, None);
        let (mut object, mut old_object) = (None, None);
        while let Some(field) = map.next_key()? {
            match field {
                RequestField::Uid => once(&mut uid, "uid", map.next_value()?)?,
                RequestField::Kind => once(&mut kind, "kind", map.next_value::<Kind<'de>>()?)?,
                RequestField::SubResource => {
                    once(&mut sub_resource, "subResource", map.next_value()?)?;
                }
                RequestField::Name => once(&mut name, "name", map.next_value()?)?,
                RequestField::Namespace => once(&mut namespace, "namespace", map.next_value()?)?,
                RequestField::Operation => once(&mut operation, "operation", map.next_value()?)?,
                RequestField::Object => {
                    let value = if self.pod_in_pass && kind.as_ref().is_some_and(Kind::is_pod) {
                        map.next_value::<Option<PodPlacement>>()?
                            .map(|pod| Object::Pod(Box::new(pod)))
                    } else {
                        map.next_value::<Option<&'de RawValue>>()?.map(Object::Raw)
                    };
                    once(&mut object, "object", value)?;
                }
                RequestField::OldObject => once(&mut old_object, "oldObject", map.next_value()?)?,
                RequestField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Request {
            uid: uid.ok_or_else(|| A::Error::missing_field("uid"))?,
            kind: kind.ok_or_else(|| A::Error::missing_field("kind"))?,
            sub_resource: sub_resource.flatten(),
            name: name.flatten(),
            namespace: namespace.flatten(),
            operation: operation.ok_or_else(|| A::Error::missing_field("operation"))?,
            object: object.flatten(),
            old_object: old_object.flatten(),
        })
    }
}

/// [`Review::request`], read with the Pod on the way.
fn request_in_one_pass<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Request<'de>>, D::Error> {
    deserializer
        .deserialize_map(RequestVisitor { pod_in_pass: true })
        .map(Some)
}

#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(default, borrow)]
    group: Text<'a>,
    #[serde(borrow)]
    version: Text<'a>,
    #[serde(borrow)]
    kind: Text<'a>,
}

impl Kind<'_> {
    /// A core `v1` Pod.
    fn is_pod(&self) -> bool {
        self.group.0.is_empty() && self.version.0 == "v1" && self.kind.0 == "Pod"
    }

    /// A kind that carries a Pod template.
    fn workload(&self) -> Option<WorkloadKind> {
        WorkloadKind::from_type(&self.group.0, &self.version.0, &self.kind.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// The AdmissionReview read in one pass, for a body that is what the API
/// server sends; anything else goes through [`TypeFieldsFirst`] to tell what is
/// wrong with it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    #[serde(default, borrow)]
    api_version: Option<Text<'a>>,
    #[serde(default, borrow)]
    kind: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "request_in_one_pass")]
    request: Option<Request<'a>>,
}

fn parse_request(body: &[u8]) -> Result<Request<'_>, WebhookError> {
    // JSON is UTF-8 (RFC 8259). Checked once for the whole body, the strings
    // are then read without a check of their own, as from a `&str`.
    let body = std::str::from_utf8(body).map_err(WebhookError::NotUtf8)?;
    if let Ok(Review {
        api_version: Some(api_version),
        kind: Some(kind),
        request: Some(request),
    }) = serde_json::from_str::<Review<'_>>(body)
        && api_version.0 == ADMISSION_API_VERSION
        && kind.0 == ADMISSION_REVIEW_KIND
    {
        return Ok(request);
    }
    parse_type_fields_first(body)
}

/// The type fields checked before the request is read, so that a body of
/// another type is refused as such whatever its `request` holds.
fn parse_type_fields_first(body: &str) -> Result<Request<'_>, WebhookError> {
    let text = |field: Option<Value>| match field {
        Some(Value::String(text)) => text,
        _ => String::new(),
    };
    let review = match serde_json::from_str::<TypeFieldsFirst<'_>>(body) {
        Ok(review) => review,
        // Not an object, or not JSON at all: the slow path tells which.
        Err(_) => {
            return Err(match serde_json::from_str::<IgnoredAny>(body) {
                Ok(_) => WebhookError::WrongType {
                    api_version: String::new(),
                    kind: String::new(),
                },
                Err(error) => WebhookError::MalformedJson(error),
            });
        }
    };
    let (api_version, kind) = (text(review.api_version), text(review.kind));
    if api_version != ADMISSION_API_VERSION || kind != ADMISSION_REVIEW_KIND {
        return Err(WebhookError::WrongType { api_version, kind });
    }
    let request = review.request.ok_or(WebhookError::MissingRequest)?;
    serde_json::from_str(request.get()).map_err(WebhookError::MalformedReview)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass read answers exactly as reading the type fields first.
    #[test]
    fn one_pass_and_type_fields_first_agree() {
        let request = r#"{"uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{"metadata":{}}}"#;
        let bodies = [
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request}}}"#
            ),
            format!(
                r#"{{"request":{request},"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}}"#
            ),
            format!(
                r#"{{"apiVersion":"admission.k8s.io\/v1","kind":"Admission\u0052eview","request":{request}}}"#
            ),
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{request}}}"#
            ),
            format!(r#"{{"apiVersion":1,"kind":"AdmissionReview","request":{request}}}"#),
            format!(r#"{{"kind":"AdmissionReview","request":{request}}}"#),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#
                .to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":1}}"#
                .to_owned(),
            r#"{"apiVersion":"v1","kind":"Pod","request":{"uid":1}}"#.to_owned(),
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request},"request":{request}}}"#
            ),
            r#"[1,2]"#.to_owned(),
            r#"{"apiVersion":"#.to_owned(),
        ];
        let outcome = |read: Result<Request<'_>, WebhookError>| {
            read.map(|request| request.uid.0.into_owned())
                .map_err(|error| error.to_string())
        };
        for body in &bodies {
            assert_eq!(
                outcome(parse_request(body.as_bytes())),
                outcome(parse_type_fields_first(body)),
                "{body}"
            );
        }
        assert_eq!(
            outcome(parse_request(bodies[1].as_bytes())),
            Ok("u-1".to_owned())
        );
    }

    /// A Pod read on the way is decided as the Pod read after the request,
    /// and the API server's field order gets the one pass.
    #[test]
    fn a_pod_read_on_the_way_is_decided_as_one_read_after() {
        use crate::tests::{cluster, policy, review as admission_review};
        use serde_json::json;

        let index = cluster();
        let view = index.placement();
        let policy = PlacementPolicy::load(&view, policy().source());
        let pod = |spec: Value| json!({"metadata": {"generateName": "web-"}, "spec": spec});
        let pinned = pod(json!({"nodeName": "bj-1"}));
        let as_sent = |operation: &str, object: Value| {
            admission_review("Pod", operation, "shop-beijing", object).to_string()
        };
        let object_first = {
            let sent = as_sent("CREATE", pinned.clone());
            let (head, request) = sent.split_once(r#""request":{"#).unwrap();
            let object = serde_json::to_string(&pinned).unwrap();
            let request = request.replacen(&format!(r#""object":{object},"#), "", 1);
            assert_ne!(request, sent, "the object was moved");
            format!(r#"{head}"request":{{"object":{object},{request}"#)
        };
        let cases = [
            (as_sent("CREATE", pod(json!({}))), true),
            (as_sent("CREATE", pinned.clone()), true),
            (
                as_sent("CREATE", pod(json!({"nodeSelector": {"zone": "a"}}))),
                true,
            ),
            (as_sent("CREATE", pod(json!({"tolerations": 5}))), false),
            (as_sent("UPDATE", pod(json!({"tolerations": 5}))), false),
            (as_sent("CREATE", Value::Null), false),
            (as_sent("DELETE", pinned.clone()), true),
            (object_first, false),
            (
                admission_review("Deployment", "CREATE", "shop-beijing", json!({})).to_string(),
                false,
            ),
        ];
        for (body, read_on_the_way) in cases {
            for webhook in [WebhookKind::Mutate, WebhookKind::Validate] {
                let decided = |request: Result<Request<'_>, WebhookError>| {
                    format!(
                        "{:?}",
                        request.and_then(|r| decide(webhook, r, &view, policy.as_ref()))
                    )
                };
                assert_eq!(
                    decided(parse_request(body.as_bytes())),
                    decided(parse_type_fields_first(&body)),
                    "{body}"
                );
            }
            let one_pass = parse_request(body.as_bytes())
                .is_ok_and(|request| matches!(request.object, Some(Object::Pod(_))));
            assert_eq!(one_pass, read_on_the_way, "{body}");
        }
    }
}
