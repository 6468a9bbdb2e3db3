//! The Node as the watchers decode it: only what the index projects.
//!
//! A kubelet rewrites its Node's status every few seconds (heartbeats,
//! images, nodeInfo, addresses, capacity, managedFields: some 10 KB of JSON),
//! and every such write is a watch event whose projection is unchanged.
//! Decoding those into k8s-openapi's full `Node` allocates every string and
//! every managedFields tree only to drop them; [`NodeSummary`] names just the
//! projected fields, so serde skips the rest without allocating.
//!
//! Decoding is as lenient as k8s-openapi's for the fields it keeps (a missing
//! or null `type`, `status`, `key` or `effect` is empty, unknown fields are
//! ignored, `apiVersion` and `kind` must be `v1` and `Node` when present), so
//! an object decodes into a summary exactly when its projected parts decode
//! into a full `Node`; what a full `Node` would reject among the skipped
//! fields no longer stops the watch.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A Node reduced to its name, resourceVersion, labels, taints and
/// conditions' types and statuses. The watchers watch Nodes as this type;
/// a full `Node` (the offline objects file, a one-off list) converts into it
/// with `From`, so both reach the index through the same projection.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "wire::Node")]
pub struct NodeSummary {
    /// `name`, `resourceVersion` (the watch resumes from it) and `labels`
    /// only: no annotations, no managedFields.
    pub metadata: ObjectMeta,
    /// `spec.taints`.
    pub taints: Vec<core::Taint>,
    /// `status.conditions`.
    pub conditions: Vec<NodeConditionSummary>,
}

/// A Node condition's `type` and `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeConditionSummary {
    pub type_: String,
    pub status: String,
}

impl NodeSummary {
    /// The summary's metadata: what the index and the watch read of it.
    fn kept_metadata(
        name: Option<String>,
        resource_version: Option<String>,
        labels: Option<BTreeMap<String, String>>,
    ) -> ObjectMeta {
        ObjectMeta {
            name,
            resource_version,
            labels,
            ..ObjectMeta::default()
        }
    }
}

/// Moves the kept fields out of a full Node; the rest is dropped.
impl From<core::Node> for NodeSummary {
    fn from(node: core::Node) -> Self {
        let core::Node {
            metadata,
            spec,
            status,
        } = node;
        let conditions = status
            .and_then(|status| status.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|condition| NodeConditionSummary {
                type_: condition.type_,
                status: condition.status,
            })
            .collect();
        Self {
            metadata: Self::kept_metadata(
                metadata.name,
                metadata.resource_version,
                metadata.labels,
            ),
            taints: spec.and_then(|spec| spec.taints).unwrap_or_default(),
            conditions,
        }
    }
}

impl k8s_openapi::Resource for NodeSummary {
    const API_VERSION: &'static str = <core::Node as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <core::Node as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <core::Node as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <core::Node as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <core::Node as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <core::Node as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for NodeSummary {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The JSON shape of a Node, with only the kept fields named. serde skips
/// every other field as `IgnoredAny`, which allocates nothing. Each field
/// is an `Option`: missing and `null` are both absent, as in k8s-openapi.
mod wire {
    use super::*;

    #[derive(Deserialize)]
    pub(super) struct Node {
        #[serde(rename = "apiVersion", default, deserialize_with = "api_version")]
        _api_version: (),
        #[serde(rename = "kind", default, deserialize_with = "kind")]
        _kind: (),
        metadata: Option<Metadata>,
        spec: Option<Spec>,
        status: Option<Status>,
    }

    #[derive(Deserialize)]
    struct Metadata {
        name: Option<String>,
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
        labels: Option<BTreeMap<String, String>>,
    }

    #[derive(Deserialize)]
    struct Spec {
        /// k8s-openapi's own Taint: a `timeAdded` that is no time fails as
        /// it did.
        taints: Option<Vec<core::Taint>>,
    }

    #[derive(Deserialize)]
    struct Status {
        conditions: Option<Vec<Condition>>,
    }

    #[derive(Deserialize)]
    struct Condition {
        #[serde(rename = "type")]
        type_: Option<String>,
        status: Option<String>,
    }

    impl From<Node> for super::NodeSummary {
        fn from(node: Node) -> Self {
            let metadata = node.metadata.map_or_else(ObjectMeta::default, |meta| {
                Self::kept_metadata(meta.name, meta.resource_version, meta.labels)
            });
            let conditions = node
                .status
                .and_then(|status| status.conditions)
                .unwrap_or_default()
                .into_iter()
                .map(|condition| NodeConditionSummary {
                    type_: condition.type_.unwrap_or_default(),
                    status: condition.status.unwrap_or_default(),
                })
                .collect();
            Self {
                metadata,
                taints: node.spec.and_then(|spec| spec.taints).unwrap_or_default(),
                conditions,
            }
        }
    }

    fn api_version<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(Expect(<core::Node as k8s_openapi::Resource>::API_VERSION))
    }

    fn kind<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(Expect(<core::Node as k8s_openapi::Resource>::KIND))
    }

    /// A string that must equal the given one; compared where it lies, not
    /// copied.
    struct Expect(&'static str);

    impl Visitor<'_> for Expect {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
            if value == self.0 {
                Ok(())
            } else {
                Err(E::invalid_value(de::Unexpected::Str(value), &self))
            }
        }
    }
}
