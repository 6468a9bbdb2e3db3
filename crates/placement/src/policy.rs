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
//!   - namespace: shop-east
//!     nodePools: [hangzhou, shanghai]   # the union of several pools
//! edgeTolerations:
//!   - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
//! ```
//!
//! Namespaces bind themselves too, by the labels of
//! `placement.namespaceLabels` ([`PlacementPolicy::load`]): such a binding
//! counts as one of the ConfigMap unless the ConfigMap binds the namespace
//! differently (the ConfigMap's applies) or the namespace is excluded; each
//! label binding that takes no effect is kept as a [`RejectedBinding`].

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::Toleration;
use poolkeeper_bus::{BindingRejection, IntoEnumIterator, RejectedBinding};
use poolkeeper_config::{Constraints, Mode, NamespaceLabels, PlacementConfig};
use poolkeeper_index::{Namespace, ObjectKey, PlacementView};
use serde::Deserialize;

use crate::error::PlacementError;
use crate::names::{is_dns1123_label, label_value_errors, qualified_name_errors};
use crate::pools::PoolSet;
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
    /// Namespaces never bound and never matched by the webhooks:
    /// `placement.excludedNamespaces` and poolkeeper's own namespace, which
    /// is the policy ConfigMap's (`placement.policyConfigMap.namespace`):
    /// whoever may write the policy there runs poolkeeper.
    pub excluded_namespaces: BTreeSet<String>,
    /// `placement.namespaceLabels`, when enabled.
    pub namespace_labels: Option<NamespaceLabels>,
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
            namespace_labels: placement
                .namespace_labels
                .enabled
                .then(|| placement.namespace_labels.clone()),
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

/// Where a namespace's binding was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingOrigin {
    /// An entry of the policy ConfigMap's `bindings`.
    ConfigMap,
    /// The Namespace's own labels (`placement.namespaceLabels`).
    NamespaceLabel,
}

/// A namespace's binding: its pools and how decisions about its Pods take
/// effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub pools: PoolSet,
    /// The binding's own `mode`, else the policy's default mode.
    pub mode: Mode,
    /// The binding's own `constraints`, else the policy's default.
    pub constraints: Constraints,
    pub origin: BindingOrigin,
    /// Whether PlacementExceptions of the namespace take effect
    /// (`exceptions: allowed`; never for a Namespace label binding, which
    /// whoever may label the Namespace writes).
    pub exceptions: Exceptions,
}

/// A binding's `exceptions`: whether the platform team lets the
/// namespace's PlacementExceptions take effect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exceptions {
    Allowed,
    #[default]
    Denied,
}

impl Binding {
    /// Whether both place Pods alike, wherever they were written.
    fn places_like(&self, other: &Binding) -> bool {
        (&self.pools, self.mode, self.constraints) == (&other.pools, other.mode, other.constraints)
    }
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
    /// Namespace label bindings that take no effect, by namespace.
    rejected: Vec<RejectedBinding>,
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
    #[serde(default)]
    node_pool: Option<String>,
    #[serde(default)]
    node_pools: Option<Vec<String>>,
    #[serde(default)]
    mode: Option<Mode>,
    #[serde(default)]
    constraints: Option<Constraints>,
    #[serde(default)]
    exceptions: Exceptions,
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
            rejected: Vec::new(),
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

    /// The policy as the index currently holds it: the ConfigMap's
    /// bindings, then those the labelled Namespaces add.
    pub fn load(view: &PlacementView<'_>, source: &PolicySource) -> Result<Self, PlacementError> {
        let policy = Self::from_config_map_data(view.config_map(&source.config_map_key()), source)?;
        Ok(match &source.namespace_labels {
            Some(labels) => policy.with_namespace_labels(view.namespaces(), labels),
            None => policy,
        })
    }

    /// Adds the binding each of `namespaces` makes by `labels`, unless the
    /// namespace is excluded, its labels do not parse, or the ConfigMap binds
    /// it differently; those are kept as [`Self::rejected_bindings`].
    pub fn with_namespace_labels<'a>(
        mut self,
        namespaces: impl IntoIterator<Item = &'a Namespace>,
        labels: &NamespaceLabels,
    ) -> Self {
        for namespace in namespaces {
            let Some(read) = self.label_binding(namespace, labels) else {
                continue;
            };
            let rejection = match read {
                Err(message) => Some((BindingRejection::Invalid, message)),
                Ok(_) if self.is_excluded(&namespace.name) => Some((
                    BindingRejection::Excluded,
                    format!(
                        "namespace {:?} is excluded from placement and can never be bound",
                        namespace.name
                    ),
                )),
                Ok(binding) => match self.bindings.get(&namespace.name) {
                    Some(existing) if existing.places_like(&binding) => None,
                    Some(existing) => Some((
                        BindingRejection::Conflict,
                        conflict_message(&namespace.name, existing, &binding),
                    )),
                    None => {
                        self.bindings.insert(namespace.name.clone(), binding);
                        None
                    }
                },
            };
            if let Some((reason, message)) = rejection {
                self.rejected.push(RejectedBinding {
                    namespace: namespace.name.clone(),
                    uid: namespace.uid.clone(),
                    reason,
                    message,
                    // The policy has no memory: its reader knows what it reported before.
                    first_found: true,
                });
            }
        }
        self
    }

    /// The binding `namespace`'s labels make; `None` without the pool label.
    fn label_binding(
        &self,
        namespace: &Namespace,
        labels: &NamespaceLabels,
    ) -> Option<Result<Binding, String>> {
        let value = namespace.labels.get(&labels.pool)?;
        Some(self.read_label_binding(namespace, value, labels))
    }

    /// The binding of a Namespace whose pool label is `value`, or why its
    /// labels make none.
    fn read_label_binding(
        &self,
        namespace: &Namespace,
        value: &str,
        labels: &NamespaceLabels,
    ) -> Result<Binding, String> {
        let pools = PoolSet::from_label_value(value)
            .ok_or_else(|| format!("label {}={value:?} names no node pool", labels.pool))?;
        let mode = label_choice(namespace, &labels.mode, Mode::iter(), Mode::as_str)?
            .unwrap_or(self.default_mode);
        let constraints = label_choice(
            namespace,
            &labels.constraints,
            Constraints::iter(),
            Constraints::as_str,
        )?
        .unwrap_or(self.default_constraints);
        Ok(Binding {
            pools,
            mode,
            constraints,
            origin: BindingOrigin::NamespaceLabel,
            exceptions: Exceptions::Denied,
        })
    }

    /// Namespace label bindings that take no effect, in namespace order.
    pub fn rejected_bindings(&self) -> &[RejectedBinding] {
        &self.rejected
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
                rejected: Vec::new(),
            })
        } else {
            Err(PlacementError::PolicyInvalid {
                origin: origin.to_owned(),
                problems,
            })
        }
    }

    /// The pools `namespace` is bound to.
    pub fn pools_for_namespace(&self, namespace: &str) -> Option<&PoolSet> {
        self.bindings.get(namespace).map(|binding| &binding.pools)
    }

    /// The binding of `namespace`.
    /// The namespaces whose binding lets PlacementExceptions take effect
    /// (`exceptions: allowed`), in name order: the CEL engine leaves their
    /// Pods to the webhooks, which read the exceptions.
    pub fn exception_namespaces(&self) -> impl Iterator<Item = &str> {
        self.bindings
            .iter()
            .filter(|(_, binding)| binding.exceptions == Exceptions::Allowed)
            .map(|(namespace, _)| namespace.as_str())
    }

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

    /// What a binding that names none does with a Pod's own constraints
    /// (`placement.defaultConstraints`).
    pub fn default_constraints(&self) -> Constraints {
        self.default_constraints
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
        let pools = binding_pools(entry, &path, problems);
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
                let Some(pools) = pools else { continue };
                bindings.insert(
                    entry.namespace.clone(),
                    Binding {
                        pools,
                        mode: entry.mode.unwrap_or(default_mode),
                        constraints: entry.constraints.unwrap_or(default_constraints),
                        origin: BindingOrigin::ConfigMap,
                        exceptions: entry.exceptions,
                    },
                );
            }
        }
    }
    bindings
}

/// A binding needs a namespace name and exactly one of `nodePool` and
/// `nodePools`, whose pools can each be a label value. The pools, when the
/// entry names some.
fn binding_pools(entry: &BindingEntry, path: &str, problems: &mut Vec<String>) -> Option<PoolSet> {
    if !is_dns1123_label(&entry.namespace) {
        problems.push(format!(
            "{path}.namespace: {:?} is not a valid namespace name (lowercase RFC 1123 label)",
            entry.namespace
        ));
    }
    let (field, pools): (&str, Vec<&String>) = match (&entry.node_pool, &entry.node_pools) {
        (Some(pool), None) => ("nodePool", vec![pool]),
        (None, Some(pools)) => ("nodePools", pools.iter().collect()),
        (Some(_), Some(_)) => {
            problems.push(format!(
                "{path}: names both nodePool and nodePools; use one of them"
            ));
            return None;
        }
        (None, None) => {
            problems.push(format!("{path}: names no pool: add nodePool or nodePools"));
            return None;
        }
    };
    if pools.is_empty() {
        problems.push(format!("{path}.{field}: must not be empty"));
    }
    for (i, pool) in pools.iter().enumerate() {
        let at = match field {
            "nodePools" => format!("{path}.{field}[{i}]"),
            _ => format!("{path}.{field}"),
        };
        if pool.is_empty() {
            problems.push(format!("{at}: must not be empty"));
            continue;
        }
        let errors = label_value_errors(pool);
        if !errors.is_empty() {
            problems.push(format!(
                "{at}: {pool:?} cannot be a pool label value: {}",
                errors.join("; ")
            ));
        }
    }
    PoolSet::new(pools.into_iter().cloned())
}

/// The value of label `key` on `namespace` among `choices`; `None` without
/// the label.
fn label_choice<T: Copy>(
    namespace: &Namespace,
    key: &str,
    choices: impl Iterator<Item = T>,
    name: impl Fn(T) -> &'static str,
) -> Result<Option<T>, String> {
    let Some(value) = namespace.labels.get(key) else {
        return Ok(None);
    };
    let choices: Vec<T> = choices.collect();
    match choices.iter().find(|choice| name(**choice) == value) {
        Some(choice) => Ok(Some(*choice)),
        None => {
            let names: Vec<&str> = choices.into_iter().map(name).collect();
            Err(format!(
                "label {key}={value:?} is not one of {}",
                names.join(", ")
            ))
        }
    }
}

fn conflict_message(namespace: &str, config_map: &Binding, label: &Binding) -> String {
    format!(
        "namespace {namespace:?} is bound by the policy ConfigMap to {} (mode {}, constraints {}), \
         which applies; its labels would bind it to {} (mode {}, constraints {})",
        config_map.pools,
        config_map.mode,
        config_map.constraints,
        label.pools,
        label.mode,
        label.constraints
    )
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
