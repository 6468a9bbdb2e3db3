//! The Kubernetes protobuf encoding of a Pod LIST
//! (`application/vnd.kubernetes.protobuf`), read only as far as placement
//! reads a Pod.
//!
//! The API server encodes a page of Pods in protobuf for about half the CPU
//! it spends on JSON, in a third of the bytes (docs/benchmarks-log.md, "Audit
//! round: the protobuf encoding"); at 150,000 Pods that is the round's cost. The
//! messages below declare only the fields a [`PodPlacement`] holds, under
//! their numbers in `k8s.io/api/core/v1/generated.proto`; every other field
//! is skipped without being built.

use std::collections::BTreeMap;

use bytes::Bytes;
use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Toleration,
};
use kube::core::Status;
use poolkeeper_placement::{
    Annotations, PlacementAffinity, PlacementNodeAffinity, PlacementSpec, PodPlacement,
};
use prost::Message;

use super::PodPage;

/// The media type the API server encodes built-in types in for a client that
/// accepts it.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf-encoded object starts with, before its
/// `runtime.Unknown` envelope.
const PREFIX: &[u8] = b"k8s\0";

/// Why a protobuf body is not the object it should be.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the response does not start with the Kubernetes protobuf prefix \"k8s\\0\"")]
    Prefix,
    #[error("the response is not valid protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("the response holds kind {found:?}, not {expected}")]
    Kind {
        expected: &'static str,
        found: String,
    },
    #[error("the response's content encoding {0:?} is not supported")]
    ContentEncoding(String),
    /// A body cut short before the object: never read as an empty one.
    #[error("the response's envelope holds no object")]
    NoObject,
}

/// `runtime.Unknown`: the envelope of every object.
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    raw: Option<Bytes>,
    #[prost(string, optional, tag = "3")]
    content_encoding: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PodList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    items: Vec<Pod>,
}

#[derive(Clone, PartialEq, Message)]
struct ListMeta {
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    continue_token: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Pod {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<PodSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
}

#[derive(Clone, PartialEq, Message)]
struct PodSpec {
    #[prost(btree_map = "string, string", tag = "7")]
    node_selector: BTreeMap<String, String>,
    #[prost(string, optional, tag = "10")]
    node_name: Option<String>,
    #[prost(message, optional, tag = "18")]
    affinity: Option<Affinity>,
    #[prost(message, repeated, tag = "22")]
    tolerations: Vec<ProtoToleration>,
}

#[derive(Clone, PartialEq, Message)]
struct Affinity {
    #[prost(message, optional, tag = "1")]
    node_affinity: Option<NodeAffinity>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeAffinity {
    #[prost(message, optional, tag = "1")]
    required: Option<ProtoNodeSelector>,
}

#[derive(Clone, PartialEq, Message)]
struct ProtoNodeSelector {
    #[prost(message, repeated, tag = "1")]
    terms: Vec<ProtoNodeSelectorTerm>,
}

#[derive(Clone, PartialEq, Message)]
struct ProtoNodeSelectorTerm {
    #[prost(message, repeated, tag = "1")]
    match_expressions: Vec<Requirement>,
    #[prost(message, repeated, tag = "2")]
    match_fields: Vec<Requirement>,
}

#[derive(Clone, PartialEq, Message)]
struct Requirement {
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    operator: Option<String>,
    #[prost(string, repeated, tag = "3")]
    values: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ProtoToleration {
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    operator: Option<String>,
    #[prost(string, optional, tag = "3")]
    value: Option<String>,
    #[prost(string, optional, tag = "4")]
    effect: Option<String>,
    #[prost(int64, optional, tag = "5")]
    toleration_seconds: Option<i64>,
}

/// `meta.v1.Status`, as far as kube reports a failed request.
#[derive(Clone, PartialEq, Message)]
struct ProtoStatus {
    #[prost(string, optional, tag = "3")]
    message: Option<String>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    code: Option<i32>,
}

/// The page of Pods in a protobuf `PodList` body.
pub fn decode_pod_page(body: Bytes) -> Result<PodPage, ProtobufError> {
    let list = PodList::decode(unwrap_envelope(body, "PodList")?)?;
    let metadata = list.metadata.unwrap_or_default();
    Ok(PodPage {
        continue_token: present(metadata.continue_token),
        resource_version: present(metadata.resource_version),
        pods: list.items.into_iter().map(PodPlacement::from).collect(),
    })
}

/// The `Status` of a failed request in a protobuf body, with the HTTP
/// status `code` where the body gives none.
pub fn decode_status(body: Bytes, code: u16) -> Result<Status, ProtobufError> {
    let status = ProtoStatus::decode(unwrap_envelope(body, "Status")?)?;
    let code = status
        .code
        .and_then(|code| u16::try_from(code).ok())
        .filter(|code| *code != 0)
        .unwrap_or(code);
    Ok(Status::failure(
        status.message.as_deref().unwrap_or_default(),
        status.reason.as_deref().unwrap_or_default(),
    )
    .with_code(code))
}

/// The encoded object inside the envelope of `body`, which must be of `kind`.
fn unwrap_envelope(mut body: Bytes, kind: &'static str) -> Result<Bytes, ProtobufError> {
    if !body.starts_with(PREFIX) {
        return Err(ProtobufError::Prefix);
    }
    let envelope = Unknown::decode(body.split_off(PREFIX.len()))?;
    let found = envelope
        .type_meta
        .and_then(|type_meta| type_meta.kind)
        .unwrap_or_default();
    if found != kind {
        return Err(ProtobufError::Kind {
            expected: kind,
            found,
        });
    }
    match envelope.content_encoding.filter(|e| !e.is_empty()) {
        None => envelope.raw.ok_or(ProtobufError::NoObject),
        Some(encoding) => Err(ProtobufError::ContentEncoding(encoding)),
    }
}

/// The API server writes every string field, empty or not, where JSON leaves
/// an empty one out: an empty string is read as an absent one, so both
/// encodings give the same projection.
fn present(text: Option<String>) -> Option<String> {
    text.filter(|text| !text.is_empty())
}

/// An empty list or map is left out of JSON as well.
fn non_empty<C: Default + PartialEq>(items: C) -> Option<C> {
    (items != C::default()).then_some(items)
}

impl From<Pod> for PodPlacement {
    fn from(pod: Pod) -> Self {
        let metadata = pod.metadata.unwrap_or_default();
        let annotations = non_empty(metadata.annotations)
            .as_ref()
            .map(Annotations::of);
        Self {
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name.unwrap_or_default(),
            generate_name: metadata.generate_name.unwrap_or_default(),
            uid: metadata.uid.unwrap_or_default(),
            labels: metadata.labels,
            annotations,
            spec: pod.spec.map(PlacementSpec::from),
        }
    }
}

impl From<PodSpec> for PlacementSpec {
    fn from(spec: PodSpec) -> Self {
        Self {
            node_name: present(spec.node_name),
            node_selector: non_empty(spec.node_selector),
            affinity: spec.affinity.map(|affinity| PlacementAffinity {
                node_affinity: affinity.node_affinity.map(|node| PlacementNodeAffinity {
                    required: node.required.map(NodeSelector::from),
                }),
            }),
            tolerations: non_empty(spec.tolerations)
                .map(|tolerations| tolerations.into_iter().map(Toleration::from).collect()),
        }
    }
}

impl From<ProtoNodeSelector> for NodeSelector {
    fn from(selector: ProtoNodeSelector) -> Self {
        let requirements = |requirements: Vec<Requirement>| {
            non_empty(requirements).map(|all| {
                all.into_iter()
                    .map(|requirement| NodeSelectorRequirement {
                        key: requirement.key.unwrap_or_default(),
                        operator: requirement.operator.unwrap_or_default(),
                        values: non_empty(requirement.values),
                    })
                    .collect()
            })
        };
        Self {
            node_selector_terms: selector
                .terms
                .into_iter()
                .map(|term| NodeSelectorTerm {
                    match_expressions: requirements(term.match_expressions),
                    match_fields: requirements(term.match_fields),
                })
                .collect(),
        }
    }
}

impl From<ProtoToleration> for Toleration {
    fn from(toleration: ProtoToleration) -> Self {
        Self {
            key: present(toleration.key),
            operator: present(toleration.operator),
            value: present(toleration.value),
            effect: present(toleration.effect),
            toleration_seconds: toleration.toleration_seconds,
        }
    }
}
