//! The placement policy: namespace -> NodePool bindings and the tolerations
//! every Pod on an Edge pool must carry, read from one key of the placement
//! ConfigMap.
//!
//! ```yaml
//! bindings:
//!   - namespace: shop-hangzhou
//!     nodePool: hangzhou
//!     mode: warn          # enforce | warn | dryrun; placement.defaultMode when absent
//!     constraints: narrow # judge | narrow; placement.defaultConstraints when absent
//! edgeTolerations:
//!   - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
//! ```

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::Toleration;
use poolkeeper_config::{Constraints, Mode, PlacementConfig};
use poolkeeper_index::{ObjectKey, PlacementView};
use serde::Deserialize;

use crate::error::PlacementError;
use crate::names::{is_dns1123_label, label_value_errors, qualified_name_errors};
use crate::tolerations::TAINT_EFFECTS;

/// Where the placement policy lives: one data key of one ConfigMap
/// (`placement.policyConfigMap`), and the mode of a binding that names
/// none (`placement.defaultMode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicySource {
    pub namespace: String,
    pub name: String,
    pub key: String,
    pub default_mode: Mode,
    pub default_constraints: Constraints,
    /// Namespaces never bound: `placement.excludedNamespaces` and the
    /// policy ConfigMap's own namespace.
    pub excluded_namespaces: BTreeSet<String>,
}

impl From<&PlacementConfig> for PolicySource {
    fn from(placement: &PlacementConfig) -> Self {
        let config_map = &placement.policy_config_map;
        Self {
            namespace: config_map.namespace.clone(),
            name: config_map.name.clone(),
            key: config_map.key.clone(),
            default_mode: placement.default_mode,
            default_constraints: placement.default_constraints,
            excluded_namespaces: placement
                .excluded_namespaces
                .iter()
                .chain([&config_map.namespace])
                .cloned()
                .collect(),
        }
    }
}

impl PolicySource {
    pub fn config_map_key(&self) -> ObjectKey {
        ObjectKey::namespaced(&self.namespace, &self.name)
    }
}

impl fmt::Display for PolicySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConfigMap {}/{} key {}",
            self.namespace, self.name, self.key
        )
    }
}

/// A namespace's binding: its pool and how decisions about its Pods take
/// effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub pool: String,
    /// The binding's own `mode`, else the policy's default mode.
    pub mode: Mode,
    /// The binding's own `constraints`, else the policy's default.
    pub constraints: Constraints,
}

/// A parsed, validated placement policy. The default is the empty policy:
/// no namespace is bound, Edge pools need no tolerations, the default mode
/// is `enforce`.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementPolicy {
    bindings: BTreeMap<String, Binding>,
    edge_tolerations: Vec<Toleration>,
    default_mode: Mode,
    default_constraints: Constraints,
    excluded_namespaces: BTreeSet<String>,
}

impl Default for PlacementPolicy {
    fn default() -> Self {
        Self::empty(Mode::Enforce)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyDocument {
    #[serde(default)]
    bindings: Option<Vec<BindingEntry>>,
    #[serde(default)]
    edge_tolerations: Option<Vec<TolerationEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BindingEntry {
    namespace: String,
    node_pool: String,
    #[serde(default)]
    mode: Option<Mode>,
    #[serde(default)]
    constraints: Option<Constraints>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TolerationEntry {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    operator: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    effect: Option<String>,
    #[serde(default)]
    toleration_seconds: Option<i64>,
}

impl PlacementPolicy {
    /// Parses a policy document whose bindings default to `enforce`. Empty
    /// input (or only comments) is the empty policy.
    pub fn parse(yaml: &str) -> Result<Self, PlacementError> {
        Self::parse_with_default_mode(yaml, Mode::Enforce)
    }

    /// Parses a policy document whose bindings without a `mode` get
    /// `default_mode`.
    pub fn parse_with_default_mode(yaml: &str, default_mode: Mode) -> Result<Self, PlacementError> {
        let defaults = PolicySource {
            default_mode,
            ..PolicySource::from(&PlacementConfig::default())
        };
        Self::parse_from(yaml, "placement policy", &defaults)
    }

    /// No binding, no edge toleration.
    pub fn empty(default_mode: Mode) -> Self {
        Self {
            bindings: BTreeMap::new(),
            edge_tolerations: Vec::new(),
            default_mode,
            default_constraints: Constraints::Judge,
            excluded_namespaces: PolicySource::from(&PlacementConfig::default())
                .excluded_namespaces,
        }
    }

    /// The policy in `data[key]` of a ConfigMap; a missing ConfigMap or key
    /// is the empty policy. Bindings default to `source.default_mode`.
    pub fn from_config_map_data(
        data: Option<&BTreeMap<String, String>>,
        source: &PolicySource,
    ) -> Result<Self, PlacementError> {
        match data.and_then(|data| data.get(&source.key)) {
            Some(yaml) => Self::parse_from(yaml, &source.to_string(), source),
            None => Ok(Self::empty_from(source)),
        }
    }

    /// The policy as the index currently holds it.
    pub fn load(view: &PlacementView<'_>, source: &PolicySource) -> Result<Self, PlacementError> {
        Self::from_config_map_data(view.config_map(&source.config_map_key()), source)
    }

    /// No binding, no edge toleration, the defaults of `source`.
    fn empty_from(source: &PolicySource) -> Self {
        Self {
            default_constraints: source.default_constraints,
            excluded_namespaces: source.excluded_namespaces.clone(),
            ..Self::empty(source.default_mode)
        }
    }

    fn parse_from(yaml: &str, origin: &str, source: &PolicySource) -> Result<Self, PlacementError> {
        let document: Option<PolicyDocument> =
            serde_saphyr::from_str(yaml).map_err(|error| PlacementError::PolicySyntax {
                origin: origin.to_owned(),
                error: Box::new(error),
            })?;
        let Some(document) = document else {
            return Ok(Self::empty_from(source));
        };

        let mut problems = Vec::new();
        let bindings = read_bindings(
            document.bindings.as_deref().unwrap_or_default(),
            source,
            &mut problems,
        );
        let edge_tolerations =
            read_edge_tolerations(document.edge_tolerations.unwrap_or_default(), &mut problems);
        if problems.is_empty() {
            Ok(Self {
                bindings,
                edge_tolerations,
                default_mode: source.default_mode,
                default_constraints: source.default_constraints,
                excluded_namespaces: source.excluded_namespaces.clone(),
            })
        } else {
            Err(PlacementError::PolicyInvalid {
                origin: origin.to_owned(),
                problems,
            })
        }
    }

    /// The pool `namespace` is bound to.
    pub fn pool_for_namespace(&self, namespace: &str) -> Option<&str> {
        self.bindings
            .get(namespace)
            .map(|binding| binding.pool.as_str())
    }

    /// The binding of `namespace`.
    pub fn binding(&self, namespace: &str) -> Option<&Binding> {
        self.bindings.get(namespace)
    }

    /// The mode of decisions about Pods of `namespace`: its binding's mode,
    /// else the default mode (for Pods that pick their pool by label in a
    /// namespace without a binding).
    pub fn mode_for_namespace(&self, namespace: &str) -> Mode {
        self.bindings
            .get(namespace)
            .map_or(self.default_mode, |binding| binding.mode)
    }

    /// Whether `namespace` is never bound, whatever a binding or a Pod's
    /// label says.
    pub fn is_excluded(&self, namespace: &str) -> bool {
        self.excluded_namespaces.contains(namespace)
    }

    /// What decisions about Pods of `namespace` do with their own node
    /// constraints: its binding's, else the default.
    pub fn constraints_for_namespace(&self, namespace: &str) -> Constraints {
        self.bindings
            .get(namespace)
            .map_or(self.default_constraints, |binding| binding.constraints)
    }

    /// The mode of a binding that names none (`placement.defaultMode`).
    pub fn default_mode(&self) -> Mode {
        self.default_mode
    }

    /// `(namespace, binding)` pairs, by namespace.
    pub fn bindings(&self) -> impl Iterator<Item = (&str, &Binding)> {
        self.bindings
            .iter()
            .map(|(ns, binding)| (ns.as_str(), binding))
    }

    /// The tolerations a Pod needs to run on an Edge pool, in policy order.
    pub fn edge_tolerations(&self) -> &[Toleration] {
        &self.edge_tolerations
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty() && self.edge_tolerations.is_empty()
    }
}

/// The namespace -> pool map of `entries`; every broken rule goes to
/// `problems` as `bindings[i].field: reason`.
fn read_bindings(
    entries: &[BindingEntry],
    source: &PolicySource,
    problems: &mut Vec<String>,
) -> BTreeMap<String, Binding> {
    let (default_mode, default_constraints) = (source.default_mode, source.default_constraints);
    let mut bindings = BTreeMap::new();
    let mut first_seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("bindings[{i}]");
        problems.extend(binding_problems(entry, &path));
        if source.excluded_namespaces.contains(&entry.namespace) {
            problems.push(format!(
                "{path}.namespace: {:?} is excluded from placement (placement.excludedNamespaces \
                 and poolkeeper's own namespace) and can never be bound",
                entry.namespace
            ));
        }
        match first_seen.entry(&entry.namespace) {
            Entry::Occupied(first) => problems.push(format!(
                "{path}.namespace: duplicate binding for namespace {:?} (first bound at bindings[{}])",
                entry.namespace,
                first.get()
            )),
            Entry::Vacant(slot) => {
                slot.insert(i);
                bindings.insert(
                    entry.namespace.clone(),
                    Binding {
                        pool: entry.node_pool.clone(),
                        mode: entry.mode.unwrap_or(default_mode),
                        constraints: entry.constraints.unwrap_or(default_constraints),
                    },
                );
            }
        }
    }
    bindings
}

/// A binding needs a namespace name and a pool that can be a label value.
fn binding_problems(entry: &BindingEntry, path: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !is_dns1123_label(&entry.namespace) {
        problems.push(format!(
            "{path}.namespace: {:?} is not a valid namespace name (lowercase RFC 1123 label)",
            entry.namespace
        ));
    }
    if entry.node_pool.is_empty() {
        problems.push(format!("{path}.nodePool: must not be empty"));
    } else {
        let errors = label_value_errors(&entry.node_pool);
        if !errors.is_empty() {
            problems.push(format!(
                "{path}.nodePool: {:?} cannot be a pool label value: {}",
                entry.node_pool,
                errors.join("; ")
            ));
        }
    }
    problems
}

/// The tolerations of `entries`, empty strings read as absent; every broken
/// rule goes to `problems` as `edgeTolerations[i].field: reason`.
fn read_edge_tolerations(
    entries: Vec<TolerationEntry>,
    problems: &mut Vec<String>,
) -> Vec<Toleration> {
    let mut tolerations = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let toleration = Toleration {
            key: entry.key.filter(|k| !k.is_empty()),
            operator: entry.operator.filter(|o| !o.is_empty()),
            value: entry.value.filter(|v| !v.is_empty()),
            effect: entry.effect.filter(|e| !e.is_empty()),
            toleration_seconds: entry.toleration_seconds,
        };
        problems.extend(toleration_problems(
            &toleration,
            &format!("edgeTolerations[{i}]"),
        ));
        tolerations.push(toleration);
    }
    tolerations
}

/// The API server's `ValidateTolerations`, so that a toleration the policy
/// adds to a Pod never makes the Pod invalid.
fn toleration_problems(toleration: &Toleration, path: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or_default();
    let value = toleration.value.as_deref().unwrap_or_default();
    let effect = toleration.effect.as_deref().unwrap_or_default();

    if !key.is_empty() {
        let errors = qualified_name_errors(key);
        if !errors.is_empty() {
            problems.push(format!("{path}.key: {key:?}: {}", errors.join("; ")));
        }
    } else if operator != "Exists" {
        problems.push(format!(
            "{path}.operator: must be Exists when `key` is empty, which means \"match all values and all keys\""
        ));
    }
    if toleration.toleration_seconds.is_some() && effect != "NoExecute" {
        problems.push(format!(
            "{path}.effect: must be 'NoExecute' when `tolerationSeconds` is set"
        ));
    }
    match operator {
        "" | "Equal" => {
            let errors = label_value_errors(value);
            if !errors.is_empty() {
                problems.push(format!("{path}.value: {value:?}: {}", errors.join("; ")));
            }
        }
        "Exists" => {
            if !value.is_empty() {
                problems.push(format!(
                    "{path}.value: must be empty when `operator` is 'Exists'"
                ));
            }
        }
        other => problems.push(format!(
            "{path}.operator: unsupported value {other:?}: supported values: \"Equal\", \"Exists\""
        )),
    }
    if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
        problems.push(format!(
            "{path}.effect: unsupported value {effect:?}: supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\""
        ));
    }
    problems
}
