//! Offline evaluation: an index built from a multi-document YAML file of
//! Kubernetes objects (as `kubectl get -o yaml` prints them), so a policy can
//! be checked without a cluster. The objects go into the index through the
//! same `IndexResource` conversions the watchers use.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use poolkeeper_api::{
    NODE_POOL_GROUP, NodePool, NodePoolType, POOLKEEPER_GROUP, PlacementException,
};
use poolkeeper_index::{Index, IndexResource};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::PlacementError;
use crate::policy::PolicySource;

/// An index filled from an objects file, with what was skipped.
#[derive(Debug)]
pub struct OfflineObjects {
    pub index: Index,
    /// One line per object that was ignored (other kinds, other ConfigMaps)
    /// or read in a way worth knowing (an unknown NodePool type).
    pub notes: Vec<String>,
}

/// Reads Nodes, NodePools (`apps.openyurt.io`, any version),
/// PlacementExceptions (`poolkeeper.io`) and the placement ConfigMap (the
/// one `policy` names) from multi-document YAML
/// into an index grouping nodes by `pool_label`; `v1 List` documents are
/// expanded. Other objects are ignored with a note. A duplicate object or
/// one that does not parse is an error naming its document (1-based).
pub fn build_index_from_objects(
    yaml: &str,
    pool_label: &str,
    policy: &PolicySource,
) -> Result<OfflineObjects, PlacementError> {
    let mut objects = Objects::new(policy);
    for (document, object) in read_documents(yaml)? {
        objects.add(document, object)?;
    }
    Ok(objects.into_index(pool_label))
}

/// Every object of the file with its document number; `List` documents
/// contribute their items.
fn read_documents(yaml: &str) -> Result<Vec<(usize, Value)>, PlacementError> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|error| PlacementError::ObjectsSyntax {
            error: Box::new(error),
        })?;
    let mut objects = Vec::new();
    for (i, document) in documents.into_iter().enumerate() {
        let number = i + 1;
        match document {
            Value::Null => {}
            Value::Object(mut map) if is_list(&map) => match map.remove("items") {
                Some(Value::Array(items)) => {
                    objects.extend(items.into_iter().map(|item| (number, item)));
                }
                None | Some(Value::Null) => {}
                Some(_) => return Err(PlacementError::ListItems { document: number }),
            },
            Value::Object(map) => objects.push((number, Value::Object(map))),
            _ => return Err(PlacementError::NotAnObject { document: number }),
        }
    }
    Ok(objects)
}

fn is_list(map: &serde_json::Map<String, Value>) -> bool {
    map.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind == "List" || (kind.ends_with("List") && map.contains_key("items")))
}

/// The kinds an objects file contributes to the index.
#[derive(Clone, Copy)]
enum Kind {
    Node,
    NodePool,
    ConfigMap,
    PlacementException,
}

impl Kind {
    fn of(api_version: &str, kind: &str) -> Option<Self> {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        match (group, kind) {
            ("", "Node") => Some(Kind::Node),
            (NODE_POOL_GROUP, "NodePool") => Some(Kind::NodePool),
            ("", "ConfigMap") => Some(Kind::ConfigMap),
            (POOLKEEPER_GROUP, "PlacementException") => Some(Kind::PlacementException),
            _ => None,
        }
    }
}

/// The string at `pointer` in `object`, empty when there is none.
fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The objects read so far, by kind, with the notes about the rest.
struct Objects<'p> {
    policy: &'p PolicySource,
    nodes: Vec<Node>,
    pools: Vec<NodePool>,
    config_maps: Vec<ConfigMap>,
    exceptions: Vec<PlacementException>,
    /// The document each `(kind, name)` was first seen in.
    seen: HashMap<(&'static str, String), usize>,
    notes: Vec<String>,
}

impl<'p> Objects<'p> {
    fn new(policy: &'p PolicySource) -> Self {
        Self {
            policy,
            nodes: Vec::new(),
            pools: Vec::new(),
            config_maps: Vec::new(),
            exceptions: Vec::new(),
            seen: HashMap::new(),
            notes: Vec::new(),
        }
    }

    fn add(&mut self, document: usize, object: Value) -> Result<(), PlacementError> {
        let name = text(&object, "/metadata/name").to_owned();
        let (api_version, kind) = (text(&object, "/apiVersion"), text(&object, "/kind"));
        let Some(known) = Kind::of(api_version, kind) else {
            self.notes.push(format!(
                "document {document}: ignored {kind} {name:?} ({api_version})"
            ));
            return Ok(());
        };
        match known {
            // Nodes and NodePools are cluster-scoped: a namespace written on
            // one means nothing, as the API server would drop it.
            Kind::Node => {
                let mut node: Node = parse(document, "Node", &name, object)?;
                node.metadata.namespace = None;
                self.check_new(document, "Node", &node.metadata)?;
                self.nodes.push(node);
            }
            Kind::NodePool => {
                let mut pool = parse_node_pool(document, &name, object)?;
                pool.metadata.namespace = None;
                self.check_new(document, "NodePool", &pool.metadata)?;
                self.note_unknown_pool_type(document, &pool);
                self.pools.push(pool);
            }
            Kind::PlacementException => {
                let exception: PlacementException =
                    parse(document, "PlacementException", &name, object)?;
                self.check_new(document, "PlacementException", &exception.metadata)?;
                self.exceptions.push(exception);
            }
            Kind::ConfigMap => {
                let config_map: ConfigMap = parse(document, "ConfigMap", &name, object)?;
                if self.is_policy(document, &config_map) {
                    self.check_new(document, "ConfigMap", &config_map.metadata)?;
                    self.config_maps.push(config_map);
                }
            }
        }
        Ok(())
    }

    /// Fails for an object without a name or one seen before.
    fn check_new(
        &mut self,
        document: usize,
        kind: &'static str,
        meta: &ObjectMeta,
    ) -> Result<(), PlacementError> {
        let name = meta.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            return Err(PlacementError::Unnamed { document, kind });
        }
        let name = match &meta.namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_owned(),
        };
        match self.seen.insert((kind, name.clone()), document) {
            Some(first) => Err(PlacementError::Duplicate {
                document,
                kind,
                name,
                first,
            }),
            None => Ok(()),
        }
    }

    fn note_unknown_pool_type(&mut self, document: usize, pool: &NodePool) {
        if let Some(NodePoolType::Other(other)) = &pool.spec.pool_type
            && !other.is_empty()
        {
            self.notes.push(format!(
                "document {document}: NodePool {:?} has unknown spec.type {other:?}, treated as Edge",
                pool.metadata.name.as_deref().unwrap_or_default()
            ));
        }
    }

    /// Whether `config_map` is the placement ConfigMap; notes it when not.
    fn is_policy(&mut self, document: usize, config_map: &ConfigMap) -> bool {
        let namespace = config_map.metadata.namespace.as_deref().unwrap_or_default();
        let name = config_map.metadata.name.as_deref().unwrap_or_default();
        let is_policy = namespace == self.policy.namespace && name == self.policy.name;
        if !is_policy {
            self.notes.push(format!(
                "document {document}: ignored ConfigMap {namespace}/{name} (the placement policy is {})",
                self.policy
            ));
        }
        is_policy
    }

    /// Each kind as one complete list, the way a watcher's first list
    /// arrives.
    fn into_index(self, pool_label: &str) -> OfflineObjects {
        let index = Index::new(pool_label);
        index.reset(self.nodes);
        index.reset(self.pools);
        index.reset(self.config_maps);
        index.reset(self.exceptions);
        OfflineObjects {
            index,
            notes: self.notes,
        }
    }
}

fn parse<K: DeserializeOwned>(
    document: usize,
    kind: &'static str,
    name: &str,
    object: Value,
) -> Result<K, PlacementError> {
    serde_json::from_value(object).map_err(|error| PlacementError::InvalidObject {
        document,
        kind,
        name: name.to_owned(),
        error,
    })
}

/// A NodePool of any version of the group: every version has `spec.type`,
/// `spec.labels` and `spec.taints`. A missing `spec` is an empty one, as the
/// API server defaults it.
fn parse_node_pool(
    document: usize,
    name: &str,
    mut object: Value,
) -> Result<NodePool, PlacementError> {
    if let Some(fields) = object.as_object_mut() {
        let spec = fields.entry("spec").or_insert(Value::Null);
        if spec.is_null() {
            *spec = Value::Object(serde_json::Map::new());
        }
    }
    parse(document, "NodePool", name, object)
}
