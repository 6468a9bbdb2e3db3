//! The admission objects of the CEL engine: the policies embedded in the
//! binary (so their expressions are versioned with it), with the compiled
//! policy as their first variable `data`, and their bindings. Pure: building
//! them does no I/O.
//!
//! The compiled policy is a variable, not a param object: a policy with a
//! `paramKind` may only be written by whoever may `get` every object of that
//! kind in the cluster (the API server's escalation check), which for
//! ConfigMaps would let poolkeeper read every ConfigMap. Inlined, the
//! policy's expressions and the data they read change in one write, and no
//! third object can be missing.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    MutatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use poolkeeper_config::Mode;

/// The name of the MutatingAdmissionPolicy and of its binding.
pub const MUTATING_POLICY: &str = "poolkeeper-placement";
/// The name of the variable holding the compiled policy.
const DATA_VARIABLE: &str = "data";
/// The label every object of the engine carries, so that they can be
/// told from others at a glance.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "poolkeeper");

/// The texts of the admission policies: the ones embedded in the binary
/// ([`PolicyTexts::EMBEDDED`]), or others that test how a broken
/// expression surfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyTexts {
    /// The variables every policy starts with (after `data`).
    pub variables: &'static str,
    pub mutating: &'static str,
    /// The validating policy of every mode, `MODE` standing for the mode.
    pub validating: &'static str,
    pub warnings: &'static str,
}

impl PolicyTexts {
    pub const EMBEDDED: PolicyTexts = PolicyTexts {
        variables: include_str!("../policies/variables.yaml"),
        mutating: include_str!("../policies/mutating.yaml"),
        validating: include_str!("../policies/validating.yaml"),
        warnings: include_str!("../policies/warnings.yaml"),
    };
}
/// The name of the ValidatingAdmissionPolicy (and binding) that returns
/// the warnings about missing pools.
pub const WARNINGS_POLICY: &str = "poolkeeper-placement-warnings";
/// What the validating template names its mode by.
const MODE_PLACEHOLDER: &str = "MODE";

/// The name of the ValidatingAdmissionPolicy (and binding) of `mode`.
pub fn validating_policy_name(mode: Mode) -> String {
    format!("poolkeeper-placement-{}", mode.as_str())
}

/// What a binding of each mode does with a failed validation: `enforce`
/// denies, `warn` warns and audits, `dryrun` only audits.
pub fn validation_actions(mode: Mode) -> Vec<String> {
    let actions: &[&str] = match mode {
        Mode::Enforce => &["Deny"],
        Mode::Warn => &["Warn", "Audit"],
        Mode::Dryrun => &["Audit"],
    };
    actions.iter().map(|a| (*a).to_owned()).collect()
}

/// An embedded policy that does not parse: a build defect, caught by the
/// crate's tests.
#[derive(Debug, thiserror::Error)]
#[error("the embedded admission policy {name} does not parse: {message}")]
pub struct EmbeddedPolicyError {
    pub name: &'static str,
    pub message: String,
}

fn parse<T: serde::de::DeserializeOwned>(
    name: &'static str,
    text: &str,
) -> Result<T, EmbeddedPolicyError> {
    serde_saphyr::from_str(text).map_err(|error| EmbeddedPolicyError {
        name,
        message: error.to_string(),
    })
}

/// The variables every policy starts with: the compiled policy `data`,
/// then the embedded ones that read it.
fn shared_variables(
    data: &BTreeMap<String, String>,
    texts: &PolicyTexts,
) -> Result<Vec<Variable>, EmbeddedPolicyError> {
    let mut variables = vec![Variable {
        name: DATA_VARIABLE.to_owned(),
        expression: cel_map(data),
    }];
    variables.extend(parse::<Vec<Variable>>("variables.yaml", texts.variables)?);
    Ok(variables)
}

/// `data` as a CEL map literal of strings.
fn cel_map(data: &BTreeMap<String, String>) -> String {
    let entries: Vec<String> = data
        .iter()
        .map(|(key, value)| format!("{}: {}", cel_string(key), cel_string(value)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// A CEL string literal: single-quoted, backslashes and quotes escaped.
fn cel_string(text: &str) -> String {
    let mut literal = String::with_capacity(text.len() + 2);
    literal.push('\'');
    for c in text.chars() {
        match c {
            '\\' | '\'' => {
                literal.push('\\');
                literal.push(c);
            }
            '\n' => literal.push_str("\\n"),
            c => literal.push(c),
        }
    }
    literal.push('\'');
    literal
}

/// Whom the engine's objects belong to and which namespaces they leave out.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// The policies' texts.
    pub texts: PolicyTexts,
    /// Namespaces no binding matches (`PolicyCache::excluded_namespaces`).
    pub excluded: Vec<String>,
    /// The installer's MutatingWebhookConfiguration, which owns every
    /// object of the engine (an uninstall collects them).
    pub owner: Option<OwnerReference>,
}

/// Every object the CEL engine maintains, in the order they are written
/// (policies before their bindings).
#[derive(Clone, Debug, PartialEq)]
pub struct Objects {
    pub mutating: MutatingAdmissionPolicy,
    pub mutating_binding: MutatingAdmissionPolicyBinding,
    /// One per mode, then the warnings' policy.
    pub validating: Vec<ValidatingAdmissionPolicy>,
    pub validating_bindings: Vec<ValidatingAdmissionPolicyBinding>,
}

impl Placement {
    fn metadata(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY.0.to_owned(),
                MANAGED_BY.1.to_owned(),
            )])),
            owner_references: self.owner.clone().map(|owner| vec![owner]),
            ..ObjectMeta::default()
        }
    }

    /// Every Pod outside the excluded namespaces: a label binding is read
    /// by the policies from the Namespace, so no list of bound namespaces
    /// can narrow this without making labels wait for the leader.
    fn match_resources(&self) -> MatchResources {
        MatchResources {
            namespace_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".to_owned(),
                    operator: "NotIn".to_owned(),
                    values: Some(self.excluded.clone()),
                }]),
                match_labels: None,
            }),
            ..MatchResources::default()
        }
    }

    /// The objects for the compiled policy `data` ([`crate::compile`]).
    pub fn objects(&self, data: &BTreeMap<String, String>) -> Result<Objects, EmbeddedPolicyError> {
        let variables = shared_variables(data, &self.texts)?;
        let mut mutating: MutatingAdmissionPolicy = parse("mutating.yaml", self.texts.mutating)?;
        mutating.metadata = self.metadata(MUTATING_POLICY);
        if let Some(spec) = mutating.spec.as_mut() {
            spec.variables = Some(variables.clone());
        }
        let mutating_binding = MutatingAdmissionPolicyBinding {
            metadata: self.metadata(MUTATING_POLICY),
            spec: Some(MutatingAdmissionPolicyBindingSpec {
                policy_name: Some(MUTATING_POLICY.to_owned()),
                param_ref: None,
                match_resources: Some(self.match_resources()),
            }),
        };
        let mut validating = Vec::new();
        let mut validating_bindings = Vec::new();
        for mode in [Mode::Enforce, Mode::Warn, Mode::Dryrun] {
            let name = validating_policy_name(mode);
            let text = self
                .texts
                .validating
                .replace(MODE_PLACEHOLDER, mode.as_str());
            let mut policy: ValidatingAdmissionPolicy = parse("validating.yaml", &text)?;
            policy.metadata = self.metadata(&name);
            if let Some(spec) = policy.spec.as_mut() {
                spec.variables = Some(variables.clone());
            }
            validating.push(policy);
            validating_bindings.push(ValidatingAdmissionPolicyBinding {
                metadata: self.metadata(&name),
                spec: ValidatingAdmissionPolicyBindingSpec {
                    policy_name: name,
                    param_ref: None,
                    match_resources: Some(self.match_resources()),
                    validation_actions: validation_actions(mode),
                },
            });
        }
        let mut warnings: ValidatingAdmissionPolicy = parse("warnings.yaml", self.texts.warnings)?;
        warnings.metadata = self.metadata(WARNINGS_POLICY);
        if let Some(spec) = warnings.spec.as_mut() {
            spec.variables = Some(variables.clone());
        }
        validating.push(warnings);
        validating_bindings.push(ValidatingAdmissionPolicyBinding {
            metadata: self.metadata(WARNINGS_POLICY),
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: WARNINGS_POLICY.to_owned(),
                param_ref: None,
                match_resources: Some(self.match_resources()),
                validation_actions: vec!["Warn".to_owned()],
            },
        });
        Ok(Objects {
            mutating,
            mutating_binding,
            validating,
            validating_bindings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement() -> Placement {
        Placement {
            texts: PolicyTexts::EMBEDDED,
            excluded: vec!["kube-system".to_owned(), "poolkeeper-system".to_owned()],
            owner: None,
        }
    }

    #[test]
    fn the_embedded_policies_parse_with_the_shared_variables() {
        let objects = placement().objects(&BTreeMap::new()).unwrap();
        let variables = shared_variables(&BTreeMap::new(), &PolicyTexts::EMBEDDED).unwrap();
        assert!(variables.iter().any(|v| v.name == "binding"));
        let spec = objects.mutating.spec.as_ref().unwrap();
        assert_eq!(spec.variables.as_ref(), Some(&variables));
        assert_eq!(spec.mutations.as_ref().map(Vec::len), Some(1));
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(spec.reinvocation_policy.as_deref(), Some("IfNeeded"));
        let names: Vec<_> = objects
            .validating
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "poolkeeper-placement-enforce",
                "poolkeeper-placement-warn",
                "poolkeeper-placement-dryrun",
                "poolkeeper-placement-warnings"
            ]
        );
    }

    /// Each mode's policy judges only the Pods of that mode, and its
    /// binding carries the mode's actions.
    #[test]
    fn each_mode_has_its_policy_and_actions() {
        let objects = placement().objects(&BTreeMap::new()).unwrap();
        let warnings = objects.validating_bindings.last().unwrap();
        assert_eq!(warnings.spec.validation_actions, ["Warn"]);
        for ((policy, binding), mode) in objects
            .validating
            .iter()
            .zip(&objects.validating_bindings)
            .zip([Mode::Enforce, Mode::Warn, Mode::Dryrun])
        {
            let text = serde_json::to_string(policy).unwrap();
            assert!(!text.contains(MODE_PLACEHOLDER), "{text}");
            assert!(
                text.contains(&format!("variables.mode != '{}'", mode.as_str())),
                "{mode}"
            );
            assert_eq!(
                Some(&binding.spec.policy_name),
                policy.metadata.name.as_ref()
            );
            assert_eq!(binding.spec.validation_actions, validation_actions(mode));
        }
        assert_eq!(validation_actions(Mode::Enforce), ["Deny"]);
        assert_eq!(validation_actions(Mode::Warn), ["Warn", "Audit"]);
        assert_eq!(validation_actions(Mode::Dryrun), ["Audit"]);
    }

    #[test]
    fn bindings_leave_the_excluded_namespaces_out() {
        let objects = placement().objects(&BTreeMap::new()).unwrap();
        let spec = objects.mutating_binding.spec.unwrap();
        let selector = spec.match_resources.unwrap().namespace_selector.unwrap();
        let requirement = &selector.match_expressions.unwrap()[0];
        assert_eq!(requirement.operator, "NotIn");
        assert_eq!(
            requirement.values.as_deref(),
            Some(&["kube-system".to_owned(), "poolkeeper-system".to_owned()][..])
        );
        assert_eq!(spec.param_ref, None);
    }

    /// The compiled policy is the first variable of every policy, as a CEL
    /// map literal whose strings survive quotes and backslashes.
    #[test]
    fn the_compiled_policy_is_every_policys_first_variable() {
        let data = BTreeMap::from([
            ("poolLabel".to_owned(), "example.com/pool".to_owned()),
            ("odd".to_owned(), "it's a \\ path".to_owned()),
        ]);
        let objects = placement().objects(&data).unwrap();
        let expected = Variable {
            name: "data".to_owned(),
            expression: "{'odd': 'it\\'s a \\\\ path', 'poolLabel': 'example.com/pool'}".to_owned(),
        };
        let first = |variables: &Option<Vec<Variable>>| variables.as_ref().unwrap()[0].clone();
        assert_eq!(
            first(&objects.mutating.spec.as_ref().unwrap().variables),
            expected
        );
        for policy in &objects.validating {
            assert_eq!(first(&policy.spec.as_ref().unwrap().variables), expected);
        }
        assert_eq!(cel_string(""), "''");
        assert_eq!(cel_string("a\nb"), "'a\\nb'");
    }
}
