use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// machine-controller-manager's Machine: one physical or virtual machine,
/// created from a MachineClass.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "Machine",
    namespaced,
    shortname = "mc",
    status = "MachineStatus",
    derive = "PartialEq",
    derive = "Default",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The MachineClass this Machine is created from (in its namespace).
    #[serde(default)]
    pub class: ClassSpec,
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Every other spec field (timeouts, node template, ...), kept as it is.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `spec.class` of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `status` of a Machine, opaque to poolkeeper except for the node name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Machine {
    /// `spec.class.name`: the MachineClass in the Machine's namespace.
    pub fn class_name(&self) -> &str {
        &self.spec.class.name
    }
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;

    use super::*;

    #[test]
    fn class_name_extraction() {
        let cases = [
            (
                json!({"class": {"kind": "MachineClass", "name": "worker-a"}}),
                "worker-a",
            ),
            (json!({"class": {"name": "only-name"}}), "only-name"),
            (json!({"class": {"kind": "AWSMachineClass"}}), ""),
            (json!({"providerID": "aws:///i-1"}), ""),
            (json!({}), ""),
        ];
        for (spec, expected) in cases {
            let machine: Machine = serde_json::from_value(json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1",
                "kind": "Machine",
                "metadata": {"name": "m", "namespace": "machine-system"},
                "spec": spec,
            }))
            .expect("parses");
            assert_eq!(machine.class_name(), expected, "{spec}");
        }
    }

    #[test]
    fn round_trip_preserves_unknown_fields() {
        let sample = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "machine-system"},
            "spec": {
                "class": {"kind": "MachineClass", "name": "worker-a", "apiGroup": "machine.sapcloud.io"},
                "providerID": "aws:///eu-west-1a/i-1",
                "drainTimeout": "2h",
                "nodeTemplate": {"metadata": {"labels": {"a": "b"}}}
            },
            "status": {
                "node": "ip-10-0-0-1",
                "currentStatus": {"phase": "Running", "timeoutActive": false},
                "lastOperation": {"state": "Successful", "type": "Create"}
            }
        });
        let machine: Machine = serde_json::from_value(sample.clone()).expect("parses");
        assert_eq!(
            machine.spec.provider_id.as_deref(),
            Some("aws:///eu-west-1a/i-1")
        );
        assert_eq!(
            machine.status.as_ref().and_then(|s| s.node.as_deref()),
            Some("ip-10-0-0-1")
        );
        assert_eq!(serde_json::to_value(&machine).expect("serializes"), sample);
    }

    #[test]
    fn resource_identity() {
        assert_eq!(Machine::api_version(&()), "machine.sapcloud.io/v1alpha1");
        assert_eq!(Machine::plural(&()), "machines");
        let machine = Machine::new(
            "m1",
            MachineSpec {
                class: ClassSpec {
                    kind: Some("MachineClass".to_owned()),
                    name: "worker-a".to_owned(),
                    ..ClassSpec::default()
                },
                ..MachineSpec::default()
            },
        );
        let value = serde_json::to_value(&machine).expect("serializes");
        assert_eq!(value["kind"], "Machine");
        assert_eq!(value["spec"]["class"]["name"], "worker-a");
    }
}
