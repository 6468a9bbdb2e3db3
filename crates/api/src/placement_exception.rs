use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// poolkeeper's own PlacementException: lets the Pods (and the workloads
/// whose Pod templates) its selector matches out of their namespace's
/// binding, in the ways `allow` names, for a stated reason, until
/// `expiresAt`. It takes effect only where the namespace's binding allows
/// exceptions (`exceptions: allowed` in the placement policy).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "poolkeeper.io",
    version = "v1alpha1",
    kind = "PlacementException",
    namespaced,
    shortname = "pex",
    derive = "PartialEq",
    derive = "Default",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementExceptionSpec {
    /// The Pods (by their labels, or their template's) it applies to.
    pub selector: LabelSelector,
    /// Why the exception exists; shown by `explain`.
    pub reason: String,
    /// From this time on it no longer applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    pub allow: ExceptionAllowance,
}

/// What a PlacementException allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionAllowance {
    /// The mutating webhook leaves the Pod's placement as written.
    #[serde(default)]
    pub skip_mutation: bool,
    /// The validating webhook and the audit do not judge the Pod.
    #[serde(default)]
    pub skip_validation: bool,
    /// Pools the Pod may use besides its binding's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
}
