//! What the selectors of the managed entries must be for a set of bindings:
//! pure, no I/O.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::MatchCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use poolkeeper_config::Engine;

/// The label the API server puts on every namespace, with its name.
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What the bound-namespaces entry lists when nothing is bound: `In` needs
/// a value, and this one is a valid label value but no namespace's name (a
/// namespace name has no dots), so the entry matches no Pod.
pub(crate) const NO_NAMESPACE: &str = "no-binding.poolkeeper.io";

/// The two selectors of one webhook entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EntrySelectors {
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
}

/// The selectors of both managed entries of a configuration (the same in
/// the mutating and the validating one).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DesiredSelectors {
    /// Every Pod of a bound namespace.
    pub bound_namespaces: EntrySelectors,
    /// Pods carrying the pool label in the other namespaces, so that no
    /// Pod is decided twice.
    pub pool_labelled: EntrySelectors,
    /// The bound namespaces the first entry lists: sorted, each once.
    pub namespaces: Vec<String>,
    /// Every managed entry's `matchConditions` named
    /// [`ENGINE_CONDITION_PREFIX`]`*` (none under the webhook engine).
    pub engine_conditions: Vec<MatchCondition>,
}

/// The prefix of the `matchConditions` this keeper owns; the others (the
/// installer's `poolkeeper.io/not-excluded`) are left as they are.
pub(crate) const ENGINE_CONDITION_PREFIX: &str = "poolkeeper.io/engine-";

/// The `matchConditions` the placement engine needs of every managed entry:
/// under `cel`, one that calls poolkeeper only for what the admission
/// policies cannot decide (a Pod with a `nodeName`, a `nodeSelector` or a
/// required node affinity other than exactly `pool_label In [...]`, and
/// every other object: workloads, subresources). Mirrors the policies'
/// variable `celDecides` (crates/cel/policies/variables.yaml).
pub(crate) fn engine_conditions(
    engine: Engine,
    pool_label: &str,
    exception_namespaces: &[String],
) -> Vec<MatchCondition> {
    if engine == Engine::Webhook {
        return Vec::new();
    }
    let escaped = |text: &str| text.replace('\\', "\\\\").replace('\'', "\\'");
    let label = escaped(pool_label);
    let excepted = if exception_namespaces.is_empty() {
        String::new()
    } else {
        let quoted: Vec<String> = exception_namespaces
            .iter()
            .map(|ns| format!("'{}'", escaped(ns)))
            .collect();
        format!("request.namespace in [{}] || ", quoted.join(", "))
    };
    let required =
        "object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    let term = format!("{required}.nodeSelectorTerms[0]");
    let expression = format!(
        "{excepted}request.resource.resource != 'pods' || \
         (has(request.subResource) && request.subResource != '') || \
         object == null || !has(object.spec) || \
         (has(object.spec.nodeName) && object.spec.nodeName != '') || \
         (has(object.spec.nodeSelector) && size(object.spec.nodeSelector) > 0) || \
         (has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && \
          has({required}) && !(\
            has({required}.nodeSelectorTerms) && size({required}.nodeSelectorTerms) == 1 && \
            !has({term}.matchFields) && has({term}.matchExpressions) && \
            size({term}.matchExpressions) == 1 && \
            {term}.matchExpressions[0].key == '{label}' && \
            {term}.matchExpressions[0].operator == 'In'))"
    );
    vec![MatchCondition {
        name: format!("{ENGINE_CONDITION_PREFIX}cel-cannot-decide"),
        expression,
    }]
}

impl DesiredSelectors {
    /// These selectors with the `matchConditions` `engine` needs; every
    /// Pod of the `exception_namespaces` (bindings that allow
    /// PlacementExceptions, which only the webhooks read) goes to poolkeeper.
    #[must_use]
    pub(crate) fn with_engine(
        mut self,
        engine: Engine,
        pool_label: &str,
        exception_namespaces: &[String],
    ) -> Self {
        self.engine_conditions = engine_conditions(engine, pool_label, exception_namespaces);
        self
    }
}

/// The selectors for the namespaces in `bound` (in any order, repeats
/// allowed), Pods naming their pool with `pool_label`, and the namespaces
/// in `excluded` that no entry may match (the policy never binds one; were
/// it to, the entry would still not list it).
pub(crate) fn desired_selectors<'a>(
    bound: impl IntoIterator<Item = &'a str>,
    pool_label: &str,
    excluded: &BTreeSet<String>,
) -> DesiredSelectors {
    let excluded: BTreeSet<&str> = excluded.iter().map(String::as_str).collect();
    let namespaces: BTreeSet<&str> = bound
        .into_iter()
        .filter(|namespace| !excluded.contains(namespace))
        .collect();

    let listed: Vec<String> = if namespaces.is_empty() {
        vec![NO_NAMESPACE.to_owned()]
    } else {
        namespaces.iter().map(|ns| (*ns).to_owned()).collect()
    };
    let not_decided_by_namespace: BTreeSet<&str> = namespaces.union(&excluded).copied().collect();

    DesiredSelectors {
        bound_namespaces: EntrySelectors {
            namespace_selector: namespace_requirement("In", listed),
            object_selector: LabelSelector::default(),
        },
        pool_labelled: EntrySelectors {
            namespace_selector: namespace_requirement(
                "NotIn",
                not_decided_by_namespace
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            ),
            object_selector: LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: pool_label.to_owned(),
                    operator: "Exists".to_owned(),
                    values: None,
                }]),
                match_labels: None,
            },
        },
        namespaces: namespaces.into_iter().map(str::to_owned).collect(),
        engine_conditions: Vec::new(),
    }
}

fn namespace_requirement(operator: &str, values: Vec<String>) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: NAMESPACE_NAME_LABEL.to_owned(),
            operator: operator.to_owned(),
            values: Some(values),
        }]),
        match_labels: None,
    }
}

/// `selector` as the API server stores it, for comparison: absent is the
/// empty selector (the API server defaults both selectors to `{}`), and
/// empty lists and maps are absent.
pub(crate) fn canonical(selector: Option<&LabelSelector>) -> LabelSelector {
    let Some(selector) = selector else {
        return LabelSelector::default();
    };
    let match_expressions = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|requirement| LabelSelectorRequirement {
            values: requirement.values.clone().filter(|v| !v.is_empty()),
            ..requirement.clone()
        })
        .collect::<Vec<_>>();
    LabelSelector {
        match_expressions: Some(match_expressions).filter(|e| !e.is_empty()),
        match_labels: selector.match_labels.clone().filter(|m| !m.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const POOL_LABEL: &str = "apps.openyurt.io/nodepool";

    /// The default excluded namespaces, as the placement policy's holder
    /// gives them.
    fn excluded() -> BTreeSet<String> {
        let placement = poolkeeper_config::PlacementConfig::default();
        poolkeeper_placement::PolicyCache::from(&placement)
            .excluded_namespaces()
            .clone()
    }

    const EXCLUDED: [&str; 4] = [
        "kube-node-lease",
        "kube-public",
        "kube-system",
        "poolkeeper-system",
    ];

    fn as_json(selector: &LabelSelector) -> Value {
        serde_json::to_value(selector).unwrap()
    }

    struct Case {
        what: &'static str,
        bound: &'static [&'static str],
        /// Listed by the bound-namespaces entry.
        listed: &'static [&'static str],
        /// Excluded by the pool-labelled entry.
        not_in: &'static [&'static str],
    }

    #[test]
    fn selectors_follow_the_bindings() {
        let cases = [
            Case {
                what: "no binding: the first entry matches no namespace",
                bound: &[],
                listed: &[NO_NAMESPACE],
                not_in: &EXCLUDED,
            },
            Case {
                what: "one binding",
                bound: &["shop"],
                listed: &["shop"],
                not_in: &[
                    "kube-node-lease",
                    "kube-public",
                    "kube-system",
                    "poolkeeper-system",
                    "shop",
                ],
            },
            Case {
                what: "many, sorted and deduplicated",
                bound: &["zoo", "alpha", "shop", "alpha", "zoo"],
                listed: &["alpha", "shop", "zoo"],
                not_in: &[
                    "alpha",
                    "kube-node-lease",
                    "kube-public",
                    "kube-system",
                    "poolkeeper-system",
                    "shop",
                    "zoo",
                ],
            },
            Case {
                what: "excluded namespaces are never listed",
                bound: &["kube-system", "shop", "kube-public", "poolkeeper-system"],
                listed: &["shop"],
                not_in: &[
                    "kube-node-lease",
                    "kube-public",
                    "kube-system",
                    "poolkeeper-system",
                    "shop",
                ],
            },
            Case {
                what: "only excluded namespaces bound",
                bound: &["kube-system"],
                listed: &[NO_NAMESPACE],
                not_in: &EXCLUDED,
            },
        ];
        for Case {
            what,
            bound,
            listed,
            not_in,
        } in cases
        {
            let desired = desired_selectors(bound.iter().copied(), POOL_LABEL, &excluded());
            assert_eq!(
                as_json(&desired.bound_namespaces.namespace_selector),
                json!({"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": listed},
                ]}),
                "{what}: bound-namespaces entry"
            );
            assert_eq!(
                as_json(&desired.bound_namespaces.object_selector),
                json!({}),
                "{what}: every Pod of a bound namespace"
            );
            assert_eq!(
                as_json(&desired.pool_labelled.namespace_selector),
                json!({"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": not_in},
                ]}),
                "{what}: pool-labelled entry"
            );
            assert_eq!(
                as_json(&desired.pool_labelled.object_selector),
                json!({"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]}),
                "{what}: only Pods with the pool label"
            );
            let expected_namespaces: Vec<&str> = listed
                .iter()
                .copied()
                .filter(|ns| *ns != NO_NAMESPACE)
                .collect();
            assert_eq!(desired.namespaces, expected_namespaces, "{what}");
        }
    }

    #[test]
    fn the_pool_label_is_the_configured_one() {
        let desired = desired_selectors(["shop"], "example.com/pool", &BTreeSet::new());
        assert_eq!(
            as_json(&desired.pool_labelled.object_selector),
            json!({"matchExpressions": [{"key": "example.com/pool", "operator": "Exists"}]})
        );
        assert_eq!(
            as_json(&desired.pool_labelled.namespace_selector),
            json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["shop"]},
            ]})
        );
    }

    #[test]
    fn the_placeholder_cannot_be_a_namespace_name() {
        // A namespace name is an RFC 1123 label: no dots, at most 63 characters.
        assert!(NO_NAMESPACE.contains('.'));
        // It is a valid label value, as `In` requires.
        assert!(NO_NAMESPACE.len() <= 63);
        assert!(
            NO_NAMESPACE
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        );
    }

    #[test]
    fn canonical_form_ignores_what_the_api_server_defaults() {
        let empty = LabelSelector::default();
        let cases: Vec<(Option<LabelSelector>, LabelSelector)> = vec![
            (None, empty.clone()),
            (Some(empty.clone()), empty.clone()),
            (
                Some(LabelSelector {
                    match_expressions: Some(Vec::new()),
                    match_labels: Some(Default::default()),
                }),
                empty.clone(),
            ),
            (
                Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: POOL_LABEL.to_owned(),
                        operator: "Exists".to_owned(),
                        values: Some(Vec::new()),
                    }]),
                    match_labels: None,
                }),
                LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: POOL_LABEL.to_owned(),
                        operator: "Exists".to_owned(),
                        values: None,
                    }]),
                    match_labels: None,
                },
            ),
        ];
        for (selector, expected) in cases {
            assert_eq!(canonical(selector.as_ref()), expected, "{selector:?}");
        }
        let desired = desired_selectors(["a", "b"], POOL_LABEL, &excluded());
        for selector in [
            &desired.bound_namespaces.namespace_selector,
            &desired.bound_namespaces.object_selector,
            &desired.pool_labelled.namespace_selector,
            &desired.pool_labelled.object_selector,
        ] {
            assert_eq!(
                &canonical(Some(selector)),
                selector,
                "desired selectors are canonical"
            );
        }
    }
}
