//! What the placement decisions read of a Pod: [`PodPlacement`].
//!
//! It deserializes straight from a Pod's JSON (`metadata` and `spec`; every
//! other field is skipped without being built), so the webhook need not
//! build a whole `k8s_openapi` Pod per request, and it is built from a
//! `k8s_openapi` Pod for the audit's LIST, `admit` and `explain`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, Pod, Toleration};
use serde::Deserialize;
use serde_json::Value;

use crate::error::PlacementError;

/// The Pod fields placement decides on. Fields absent from the Pod are
/// empty strings, empty maps or `None`; a `None` keeps the difference
/// between "absent" and "empty" wherever a JSON patch path depends on it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "PodDocument")]
pub struct PodPlacement {
    /// `metadata.namespace` (often empty on CREATE: the AdmissionRequest
    /// names the namespace).
    pub namespace: String,
    /// `metadata.name` (empty on CREATE when the Pod uses `generateName`).
    pub name: String,
    /// `metadata.generateName`.
    pub generate_name: String,
    /// `metadata.uid` (empty before the Pod is created).
    pub uid: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Whether `metadata.annotations` is present, and the value of
    /// [`PLACEMENT_ANNOTATION`] in it; no other annotation is kept.
    pub annotations: Option<Annotations>,
    /// `spec`, `None` when the Pod has none.
    pub spec: Option<PlacementSpec>,
}

/// The annotation a mutation records its decision in: pool, what bound the
/// object to it, mode and what was done with the object's own constraints,
/// so `kubectl get -o yaml` shows why it was placed.
pub const PLACEMENT_ANNOTATION: &str = "poolkeeper.io/placement";

/// `metadata.annotations`, as far as placement reads it: the value of
/// [`PLACEMENT_ANNOTATION`]. Other annotations (`kubectl`'s last applied
/// configuration among them) are skipped without being built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    pub placement: Option<String>,
    /// `kubernetes.io/config.mirror` is present: the Pod mirrors a static Pod.
    pub mirror: bool,
}

/// The annotation the kubelet gives the mirror Pod of a static Pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

impl Annotations {
    /// What placement reads of a Pod's `metadata.annotations`.
    pub fn of(all: &BTreeMap<String, String>) -> Self {
        Self {
            placement: all.get(PLACEMENT_ANNOTATION).cloned(),
            mirror: all.contains_key(MIRROR_ANNOTATION),
        }
    }
}

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Annotations;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Annotations, A::Error> {
                let mut seen = Annotations::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == PLACEMENT_ANNOTATION {
                        seen.placement = map.next_value()?;
                    } else if key == MIRROR_ANNOTATION {
                        seen.mirror = true;
                        map.next_value::<serde::de::IgnoredAny>()?;
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(seen)
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// The node constraints and tolerations of a Pod's `spec`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// `spec.nodeName`: set when the Pod is scheduled (or pinned).
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `spec.affinity`, `None` when absent. Only its presence and its node
    /// affinity are read: podAffinity and podAntiAffinity stay out of
    /// every decision and every patch.
    #[serde(default)]
    pub affinity: Option<PlacementAffinity>,
    #[serde(default)]
    pub tolerations: Option<Vec<Toleration>>,
}

/// `spec.affinity`, as far as placement reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementAffinity {
    /// `spec.affinity.nodeAffinity`, `None` when absent.
    #[serde(default)]
    pub node_affinity: Option<PlacementNodeAffinity>,
}

/// `spec.affinity.nodeAffinity`: only the required part filters nodes.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PlacementNodeAffinity {
    /// `requiredDuringSchedulingIgnoredDuringExecution`, `None` when absent.
    #[serde(default, rename = "requiredDuringSchedulingIgnoredDuringExecution")]
    pub required: Option<NodeSelector>,
}

/// The wire shape of a Pod, reduced to the fields read.
#[derive(Deserialize)]
struct PodDocument {
    #[serde(default)]
    metadata: Option<MetadataDocument>,
    #[serde(default)]
    spec: Option<PlacementSpec>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataDocument {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<Annotations>,
}

impl From<PodDocument> for PodPlacement {
    fn from(document: PodDocument) -> Self {
        let metadata = document.metadata.unwrap_or_default();
        Self {
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name.unwrap_or_default(),
            generate_name: metadata.generate_name.unwrap_or_default(),
            uid: metadata.uid.unwrap_or_default(),
            labels: metadata.labels.unwrap_or_default(),
            annotations: metadata.annotations,
            spec: document.spec,
        }
    }
}

impl From<&Pod> for PodPlacement {
    fn from(pod: &Pod) -> Self {
        Self::from(pod.clone())
    }
}

/// Moves the fields out of `pod` (no copies), for the audit's LIST.
impl From<Pod> for PodPlacement {
    fn from(pod: Pod) -> Self {
        let metadata = pod.metadata;
        let spec = pod.spec.map(|spec| PlacementSpec {
            node_name: spec.node_name,
            node_selector: spec.node_selector,
            affinity: spec.affinity.map(|affinity| PlacementAffinity {
                node_affinity: affinity.node_affinity.map(|node| PlacementNodeAffinity {
                    required: node.required_during_scheduling_ignored_during_execution,
                }),
            }),
            tolerations: spec.tolerations,
        });
        Self {
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name.unwrap_or_default(),
            generate_name: metadata.generate_name.unwrap_or_default(),
            uid: metadata.uid.unwrap_or_default(),
            labels: metadata.labels.unwrap_or_default(),
            annotations: metadata.annotations.as_ref().map(Annotations::of),
            spec,
        }
    }
}

/// The one document of a manifest.
pub(crate) fn single_document(yaml: &str) -> Result<Value, PlacementError> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|error| PlacementError::PodSyntax {
            error: Box::new(error),
        })?;
    let mut documents: Vec<Value> = documents.into_iter().filter(|d| !d.is_null()).collect();
    match documents.len() {
        1 => Ok(documents.remove(0)),
        n => Err(PlacementError::NotAPod {
            found: format!("{n} documents"),
        }),
    }
}

impl PodPlacement {
    /// The Pod of a manifest (`kubectl get pod -o yaml`, or one written by
    /// hand): exactly one document, `apiVersion: v1`, `kind: Pod`.
    pub fn from_yaml(yaml: &str) -> Result<Self, PlacementError> {
        let document = single_document(yaml)?;
        let text = |pointer: &str| document.pointer(pointer).and_then(Value::as_str);
        match (text("/apiVersion"), text("/kind")) {
            (Some("v1"), Some("Pod")) => {}
            (api_version, kind) => {
                return Err(PlacementError::NotAPod {
                    found: format!(
                        "kind {:?}, apiVersion {:?}",
                        kind.unwrap_or_default(),
                        api_version.unwrap_or_default()
                    ),
                });
            }
        }
        serde_json::from_value(document).map_err(|error| PlacementError::InvalidPod { error })
    }

    /// Whether the Pod mirrors a static Pod (its kubelet created it).
    pub fn is_mirror(&self) -> bool {
        self.annotations.as_ref().is_some_and(|a| a.mirror)
    }

    /// `spec.nodeName` when not empty: the node a scheduled Pod runs on.
    pub fn node_name(&self) -> Option<&str> {
        self.spec
            .as_ref()?
            .node_name
            .as_deref()
            .filter(|name| !name.is_empty())
    }

    /// `spec.tolerations`, empty when absent.
    pub fn tolerations(&self) -> &[Toleration] {
        self.spec
            .as_ref()
            .and_then(|spec| spec.tolerations.as_deref())
            .unwrap_or_default()
    }

    /// `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub fn required_node_affinity(&self) -> Option<&NodeSelector> {
        self.spec
            .as_ref()?
            .affinity
            .as_ref()?
            .node_affinity
            .as_ref()?
            .required
            .as_ref()
    }

    /// `namespace/name`, or `namespace/generateName*` before the API server
    /// names the Pod.
    pub fn display_name(&self, namespace: &str) -> String {
        let name = if self.name.is_empty() && !self.generate_name.is_empty() {
            format!("{}*", self.generate_name)
        } else {
            self.name.clone()
        };
        if namespace.is_empty() {
            name
        } else {
            format!("{namespace}/{name}")
        }
    }
}
