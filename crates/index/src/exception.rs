//! What the index keeps of a PlacementException, and label selectors.

use std::collections::BTreeMap;

use poolkeeper_api as api;

/// A label selector's requirement operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

/// A label selector, as Kubernetes matches it: every `match_labels` pair
/// and every requirement must hold; an empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
            && self.requirements.iter().all(|requirement| {
                let value = labels.get(&requirement.key);
                match requirement.operator {
                    SelectorOperator::In => value.is_some_and(|v| requirement.values.contains(v)),
                    SelectorOperator::NotIn => {
                        !value.is_some_and(|v| requirement.values.contains(v))
                    }
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// What the index keeps of a PlacementException.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exception {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub selector: LabelSelector,
    pub reason: String,
    /// Seconds since the Unix epoch from which it no longer applies.
    pub expires_at: Option<i64>,
    pub skip_mutation: bool,
    pub skip_validation: bool,
    pub pools: Vec<String>,
    /// Why it cannot apply at all (a selector operator the schema would
    /// have refused): such an exception matches no Pod.
    pub invalid: Option<String>,
}

impl Exception {
    /// Whether it applies to Pods with `labels` at `now` (Unix seconds).
    pub fn selects(&self, labels: &BTreeMap<String, String>, now: i64) -> bool {
        self.invalid.is_none() && !self.expired(now) && self.selector.matches(labels)
    }

    pub fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

impl From<&api::PlacementException> for Exception {
    fn from(exception: &api::PlacementException) -> Self {
        let meta = &exception.metadata;
        let spec = &exception.spec;
        let mut invalid = None;
        let requirements = spec
            .selector
            .match_expressions
            .iter()
            .flatten()
            .map(|expression| {
                let operator = match expression.operator.as_str() {
                    "In" => SelectorOperator::In,
                    "NotIn" => SelectorOperator::NotIn,
                    "Exists" => SelectorOperator::Exists,
                    "DoesNotExist" => SelectorOperator::DoesNotExist,
                    other => {
                        invalid = Some(format!(
                            "spec.selector.matchExpressions: unknown operator {other:?}"
                        ));
                        SelectorOperator::In
                    }
                };
                Requirement {
                    key: expression.key.clone(),
                    operator,
                    values: expression.values.clone().unwrap_or_default(),
                }
            })
            .collect();
        Self {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            selector: LabelSelector {
                match_labels: spec.selector.match_labels.clone().unwrap_or_default(),
                requirements,
            },
            reason: spec.reason.clone(),
            expires_at: spec.expires_at.as_ref().map(|time| time.0.as_second()),
            skip_mutation: spec.allow.skip_mutation,
            skip_validation: spec.allow.skip_validation,
            pools: spec.allow.pools.clone(),
            invalid,
        }
    }
}
