//! Offline evaluation: an index built from a multi-document YAML file of
//! Kubernetes objects (as `kubectl get -o yaml` prints them), so a policy can
//! be checked without a cluster.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node as K8sNode};
use poolkeeper_api::projection;
use poolkeeper_index::{Index, NodePool};
use serde::Deserialize;
use serde_json::Value;

use crate::error::PlacementError;
use crate::policy::{PlacementSettings, yaml_error_message};

/// OpenYurt's API group for NodePools (every version has `spec.type`,
/// `spec.labels` and `spec.taints`).
pub const NODE_POOL_GROUP: &str = poolkeeper_api::NODE_POOL_GROUP;

/// The index projection of an OpenYurt NodePool object given as JSON, of
/// any version of the group. A missing `spec` is an empty one, as the API
/// server defaults it.
pub fn node_pool_projection(object: &Value) -> Result<NodePool, String> {
    let mut object = object.clone();
    if let Some(fields) = object.as_object_mut() {
        let spec = fields.entry("spec").or_insert(Value::Null);
        if spec.is_null() {
            *spec = Value::Object(serde_json::Map::new());
        }
    }
    let pool = poolkeeper_api::NodePool::deserialize(&object)
        .map_err(|e| format!("invalid NodePool: {e}"))?;
    if pool.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err("NodePool without metadata.name".to_owned());
    }
    Ok(projection::node_pool(&pool))
}

/// An index filled from an objects file, with what was skipped.
#[derive(Debug)]
pub struct OfflineObjects {
    pub index: Index,
    /// One line per object that was ignored (other kinds, other ConfigMaps).
    pub notes: Vec<String>,
}

/// Reads Nodes, NodePools and the placement ConfigMap (the one named by
/// `settings.policy`) from multi-document YAML; `v1 List` documents are
/// expanded. Other objects are ignored with a note. A duplicate object or
/// one that does not parse is an error naming its document (1-based).
pub fn build_index_from_objects(
    yaml: &str,
    settings: &PlacementSettings,
) -> Result<OfflineObjects, PlacementError> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| PlacementError::ObjectsSyntax {
            message: yaml_error_message(&e),
        })?;
    let index = Index::new(&settings.pool_label);
    let mut notes = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    let policy_key = settings.policy.config_map_key();

    let mut objects = Vec::new();
    for (i, document) in documents.into_iter().enumerate() {
        let number = i + 1;
        match document {
            Value::Null => {}
            Value::Object(ref map) if is_list(map) => match map.get("items") {
                Some(Value::Array(items)) => {
                    objects.extend(items.iter().cloned().map(|item| (number, item)))
                }
                None | Some(Value::Null) => {}
                Some(_) => {
                    return Err(PlacementError::Object {
                        document: number,
                        message: "List items must be a sequence".to_owned(),
                    });
                }
            },
            Value::Object(_) => objects.push((number, document)),
            _ => {
                return Err(PlacementError::Object {
                    document: number,
                    message: "not a Kubernetes object (expected a mapping)".to_owned(),
                });
            }
        }
    }

    for (document, object) in objects {
        let error = |message: String| PlacementError::Object { document, message };
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);

        let identity = match (group, kind) {
            ("", "Node") => "Node",
            (NODE_POOL_GROUP, "NodePool") => "NodePool",
            ("", "ConfigMap") => "ConfigMap",
            _ => {
                notes.push(format!(
                    "document {document}: ignored {kind} {name:?} ({api_version})"
                ));
                continue;
            }
        };
        match identity {
            "Node" => {
                let node: K8sNode = serde_json::from_value(object)
                    .map_err(|e| error(format!("invalid Node {name:?}: {e}")))?;
                let projection = projection::node(&node);
                if projection.name.is_empty() {
                    return Err(error("Node without metadata.name".to_owned()));
                }
                check_duplicate(&mut seen, "Node", &projection.name, document)?;
                index.upsert_node(projection);
            }
            "NodePool" => {
                let pool = node_pool_projection(&object).map_err(error)?;
                let declared = object.pointer("/spec/type").and_then(Value::as_str);
                if let Some(other) = declared.filter(|t| !matches!(*t, "" | "Edge" | "Cloud")) {
                    notes.push(format!(
                        "document {document}: NodePool {:?} has unknown spec.type {other:?}, treated as Edge",
                        pool.name
                    ));
                }
                check_duplicate(&mut seen, "NodePool", &pool.name, document)?;
                index.upsert_node_pool(pool);
            }
            _ => {
                let config_map: ConfigMap = serde_json::from_value(object)
                    .map_err(|e| error(format!("invalid ConfigMap {name:?}: {e}")))?;
                let namespace = config_map.metadata.namespace.clone().unwrap_or_default();
                if namespace != policy_key.namespace.clone().unwrap_or_default()
                    || name != policy_key.name
                {
                    notes.push(format!(
                        "document {document}: ignored ConfigMap {namespace}/{name} (the placement policy is {})",
                        settings.policy
                    ));
                    continue;
                }
                check_duplicate(
                    &mut seen,
                    "ConfigMap",
                    &format!("{namespace}/{name}"),
                    document,
                )?;
                index.upsert_config_map(policy_key.clone(), config_map.data.unwrap_or_default());
            }
        }
    }
    Ok(OfflineObjects { index, notes })
}

fn is_list(map: &serde_json::Map<String, Value>) -> bool {
    map.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind == "List" || (kind.ends_with("List") && map.contains_key("items")))
}

fn check_duplicate(
    seen: &mut HashMap<(String, String), usize>,
    kind: &str,
    name: &str,
    document: usize,
) -> Result<(), PlacementError> {
    match seen.insert((kind.to_owned(), name.to_owned()), document) {
        Some(first) => Err(PlacementError::Object {
            document,
            message: format!("duplicate {kind} {name:?} (first in document {first})"),
        }),
        None => Ok(()),
    }
}
