use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{MACHINE_GROUP, MACHINE_VERSION};

/// machine-controller-manager's MachineClass: provider configuration shared
/// by Machines.
///
/// Unlike most custom resources its fields sit at the top level of the
/// object, not under `spec`, and it has no status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineClass {
    #[serde(default = "MachineClass::api_version_default")]
    pub api_version: String,
    #[serde(default = "MachineClass::kind_default")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Provider-specific configuration, opaque to poolkeeper.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub provider_spec: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Node resources for scaling a group from zero, opaque to poolkeeper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<Value>,
    /// Every other top-level field, kept as it is.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for MachineClass {
    fn default() -> Self {
        Self {
            api_version: Self::api_version_default(),
            kind: Self::kind_default(),
            metadata: ObjectMeta::default(),
            provider_spec: Value::Null,
            secret_ref: None,
            credentials_secret_ref: None,
            provider: None,
            node_template: None,
            extra: BTreeMap::new(),
        }
    }
}

impl MachineClass {
    pub const KIND: &'static str = "MachineClass";
    pub const PLURAL: &'static str = "machineclasses";

    /// A MachineClass with `metadata.name` set and the given provider spec.
    pub fn new(name: &str, provider_spec: Value) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            provider_spec,
            ..Self::default()
        }
    }

    fn api_version_default() -> String {
        format!("{MACHINE_GROUP}/{MACHINE_VERSION}")
    }

    fn kind_default() -> String {
        Self::KIND.to_owned()
    }
}

impl Resource for MachineClass {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Self::KIND)
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(MACHINE_GROUP)
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(MACHINE_VERSION)
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Self::PLURAL)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sample() -> Value {
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {
                "name": "worker-a",
                "namespace": "machine-system",
                "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
                "resourceVersion": "42"
            },
            "provider": "AWS",
            "providerSpec": {"ami": "ami-1", "tags": {"team": "edge"}, "nested": [1, 2]},
            "secretRef": {"name": "cloud", "namespace": "machine-system"},
            "credentialsSecretRef": {"name": "creds", "namespace": "machine-system"},
            "nodeTemplate": {
                "architecture": "amd64",
                "capacity": {"cpu": "2", "memory": "8Gi"},
                "instanceType": "m5.large",
                "region": "eu-west-1",
                "zone": "eu-west-1a",
                "futureField": true
            },
            "futureTopLevel": {"x": 1}
        })
    }

    #[test]
    fn round_trip_preserves_unknown_fields() {
        let class: MachineClass = serde_json::from_value(sample()).expect("sample parses");
        assert_eq!(class.provider.as_deref(), Some("AWS"));
        assert_eq!(
            class.secret_ref.as_ref().and_then(|s| s.name.as_deref()),
            Some("cloud")
        );
        assert_eq!(class.extra.get("futureTopLevel"), Some(&json!({"x": 1})));
        assert_eq!(
            class.metadata.finalizers.as_deref(),
            Some(&["machine.sapcloud.io/machine-controller-manager".to_owned()][..])
        );
        let back = serde_json::to_value(&class).expect("serializes");
        assert_eq!(back, sample());
    }

    #[test]
    fn missing_optional_fields_round_trip_unchanged() {
        let cases = [
            json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                   "metadata": {"name": "a"}, "providerSpec": {}}),
            json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                   "metadata": {"name": "b"}}),
        ];
        for case in cases {
            let class: MachineClass = serde_json::from_value(case.clone()).expect("parses");
            assert_eq!(serde_json::to_value(&class).expect("serializes"), case);
        }
    }

    #[test]
    fn resource_identity() {
        assert_eq!(
            MachineClass::api_version(&()),
            "machine.sapcloud.io/v1alpha1"
        );
        assert_eq!(MachineClass::kind(&()), "MachineClass");
        assert_eq!(
            MachineClass::url_path(&(), Some("machine-system")),
            "/apis/machine.sapcloud.io/v1alpha1/namespaces/machine-system/machineclasses"
        );
        let class = MachineClass::new("a", json!({}));
        assert_eq!(class.api_version, "machine.sapcloud.io/v1alpha1");
        assert_eq!(class.kind, "MachineClass");
        assert_eq!(class.metadata.name.as_deref(), Some("a"));
    }
}
