//! The CustomResourceDefinitions poolkeeper ships, written by hand so that
//! they match the upstream ones (machine-controller-manager, OpenYurt)
//! field for field where poolkeeper depends on them, and stay open
//! (`x-kubernetes-preserve-unknown-fields`) where upstream is open.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{CustomResourceDefinition, Error};

/// File names under `deploy/crds/`, in [`crds`] order.
pub const CRD_FILES: [&str; 4] = [
    "machineclasses.yaml",
    "machines.yaml",
    "nodepools.yaml",
    "placementexceptions.yaml",
];

const HEADER: &str = "# Generated from crates/api by `cargo xtask crds`. Do not edit.\n";

/// MachineClass, Machine, NodePool and PlacementException, in [`CRD_FILES`] order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        machine_class_crd(),
        machine_crd(),
        node_pool_crd(),
        placement_exception_crd(),
    ]
    .into_iter()
    .map(|value| {
        serde_json::from_value(value)
            .expect("the literal CRDs of this crate match CustomResourceDefinition")
    })
    .collect()
}

/// The YAML document of `crd`, as checked in under `deploy/crds/`.
/// Deterministic: the same CRD always gives the same text.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    let body = serde_saphyr::to_string(crd)
        .expect("a CustomResourceDefinition is plain data and always serializes");
    format!("{HEADER}{body}")
}

/// `(file name, YAML)` for every CRD.
pub fn crd_files() -> Vec<(&'static str, String)> {
    CRD_FILES
        .into_iter()
        .zip(crds().iter().map(crd_yaml))
        .collect()
}

/// Writes every CRD file into `dir` (created if missing); returns the paths.
pub fn write_crd_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Write {
        path: dir.to_owned(),
        source,
    })?;
    crd_files()
        .into_iter()
        .map(|(name, yaml)| {
            let path = dir.join(name);
            std::fs::write(&path, yaml).map_err(|source| Error::Write {
                path: path.clone(),
                source,
            })?;
            Ok(path)
        })
        .collect()
}

/// Fails with [`Error::Stale`] when a file in `dir` differs from what
/// [`write_crd_files`] would write.
pub fn check_crd_files(dir: &Path) -> Result<(), Error> {
    for (name, yaml) in crd_files() {
        let path = dir.join(name);
        let current = match std::fs::read_to_string(&path) {
            Ok(current) => current,
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Stale { path });
            }
            Err(source) => return Err(Error::Read { path, source }),
        };
        if current != yaml {
            return Err(Error::Stale { path });
        }
    }
    Ok(())
}

fn secret_reference(description: &str) -> Value {
    json!({
        "description": description,
        "type": "object",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "name": {
                "description": "name is unique within a namespace to reference a secret resource.",
                "type": "string"
            },
            "namespace": {
                "description": "namespace defines the space within which the secret name must be unique.",
                "type": "string"
            }
        }
    })
}

fn taints(description: &str) -> Value {
    json!({
        "description": description,
        "type": "array",
        "items": {
            "description": "The node this Taint is attached to has the \"effect\" on any pod that does not tolerate the Taint.",
            "type": "object",
            "required": ["effect", "key"],
            "properties": {
                "effect": {
                    "description": "Required. The effect of the taint on pods that do not tolerate the taint. Valid effects are NoSchedule, PreferNoSchedule and NoExecute.",
                    "type": "string"
                },
                "key": {"description": "Required. The taint key to be applied to a node.", "type": "string"},
                "timeAdded": {
                    "description": "TimeAdded represents the time at which the taint was added.",
                    "type": "string",
                    "format": "date-time"
                },
                "value": {"description": "The taint value corresponding to the taint key.", "type": "string"}
            }
        }
    })
}

fn type_meta() -> Value {
    json!({
        "apiVersion": {
            "description": "APIVersion defines the versioned schema of this representation of an object.",
            "type": "string"
        },
        "kind": {
            "description": "Kind is a string value representing the REST resource this object represents.",
            "type": "string"
        },
        "metadata": {"type": "object"}
    })
}

fn with_type_meta(properties: Value) -> Value {
    let mut all = type_meta();
    if let (Some(all), Value::Object(extra)) = (all.as_object_mut(), properties) {
        all.extend(extra);
    }
    all
}

fn machine_class_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "machineclasses.machine.sapcloud.io"},
        "spec": {
            "group": "machine.sapcloud.io",
            "names": {
                "kind": "MachineClass",
                "listKind": "MachineClassList",
                "plural": "machineclasses",
                "singular": "machineclass",
                "shortNames": ["mcc"]
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "description": "MachineClass can be used to templatize and re-use provider configuration across multiple Machines / MachineSets / MachineDeployments.",
                    "type": "object",
                    "required": ["providerSpec"],
                    "properties": with_type_meta(json!({
                        "credentialsSecretRef": secret_reference(
                            "CredentialsSecretRef can optionally store the credentials (in this case the SecretRef does not need to store them)."
                        ),
                        "nodeTemplate": {
                            "description": "NodeTemplate contains subfields to track all node resources and other node info required to scale nodegroup from zero",
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "required": ["architecture", "capacity", "instanceType", "region", "zone"],
                            "properties": {
                                "architecture": {"description": "Architecture of the node belonging to nodeGroup", "type": "string"},
                                "capacity": {
                                    "description": "Capacity contains subfields to track all node resources required to scale nodegroup from zero",
                                    "type": "object",
                                    "additionalProperties": {
                                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                                        "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
                                        "x-kubernetes-int-or-string": true
                                    }
                                },
                                "instanceType": {"description": "Instance type of the node belonging to nodeGroup", "type": "string"},
                                "region": {"description": "Region of the expected node belonging to nodeGroup", "type": "string"},
                                "zone": {"description": "Zone of the expected node belonging to nodeGroup", "type": "string"}
                            }
                        },
                        "provider": {
                            "description": "Provider is the combination of name and location of cloud-specific drivers.",
                            "type": "string"
                        },
                        "providerSpec": {
                            "description": "Provider-specific configuration to use during node creation.",
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true
                        },
                        "secretRef": secret_reference(
                            "SecretRef stores the necessary secrets such as credentials or userdata."
                        )
                    }))
                }}
            }]
        }
    })
}

fn machine_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "machines.machine.sapcloud.io"},
        "spec": {
            "group": "machine.sapcloud.io",
            "names": {
                "kind": "Machine",
                "listKind": "MachineList",
                "plural": "machines",
                "singular": "machine",
                "shortNames": ["mc"]
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Status", "type": "string", "jsonPath": ".status.currentStatus.phase",
                     "description": "Current status of the machine."},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {"name": "Node", "type": "string", "jsonPath": ".metadata.labels.node",
                     "description": "Node backing the machine object"},
                    {"name": "ProviderID", "type": "string", "jsonPath": ".spec.providerID", "priority": 1,
                     "description": "ProviderID of the infra instance backing the machine object"}
                ],
                "schema": {"openAPIV3Schema": {
                    "description": "Machine is the representation of a physical or virtual machine.",
                    "type": "object",
                    "properties": with_type_meta(json!({
                        "spec": machine_spec_schema(),
                        "status": machine_status_schema()
                    }))
                }}
            }]
        }
    })
}

/// `spec` of a Machine: the fields poolkeeper and machine-controller-manager
/// read, the rest kept.
fn machine_spec_schema() -> Value {
    json!({
        "description": "Spec contains the specification of the machine",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "class": {
                "description": "Class contains the machineclass attributes of a machine",
                "type": "object",
                "properties": {
                    "apiGroup": {"description": "API group to which it belongs", "type": "string"},
                    "kind": {"description": "Kind for machine class", "type": "string"},
                    "name": {"description": "Name of machine class", "type": "string"}
                }
            },
            "creationTimeout": {"description": "MachineCreationTimeout is the timeout after which machine creation is declared failed.", "type": "string"},
            "drainTimeout": {"description": "MachineDraintimeout is the timeout after which machine is forcefully deleted.", "type": "string"},
            "healthTimeout": {"description": "MachineHealthTimeout is the timeout after which machine is declared unhealthy/failed.", "type": "string"},
            "maxEvictRetries": {"description": "MaxEvictRetries is the number of retries that will be attempted while draining the node.", "type": "integer", "format": "int32"},
            "nodeConditions": {"description": "NodeConditions are the set of conditions if set to true for MachineHealthTimeOut, machine will be declared failed.", "type": "string"},
            "nodeTemplate": {
                "description": "NodeTemplateSpec describes the data a node should have when created from a template",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true
            },
            "providerID": {"description": "ProviderID represents the provider's unique ID given to a machine", "type": "string"}
        }
    })
}

/// `status` of a Machine, open beyond the phase and the node.
fn machine_status_schema() -> Value {
    json!({
        "description": "Status contains fields depicting the status",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "currentStatus": {
                "description": "Current status of the machine object",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "lastUpdateTime": {"type": "string", "format": "date-time"},
                    "phase": {"type": "string"},
                    "timeoutActive": {"type": "boolean"}
                }
            },
            "lastKnownState": {"type": "string"},
            "node": {"description": "Node string", "type": "string"}
        }
    })
}

fn node_pool_crd() -> Value {
    let string_map = |description: &str| json!({"description": description, "type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodepools.apps.openyurt.io"},
        "spec": {
            "group": "apps.openyurt.io",
            "names": {
                "kind": "NodePool",
                "listKind": "NodePoolList",
                "plural": "nodepools",
                "singular": "nodepool",
                "shortNames": ["np"],
                "categories": ["all"]
            },
            "scope": "Cluster",
            "versions": [{
                "name": "v1beta2",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Type", "type": "string", "jsonPath": ".spec.type",
                     "description": "The type of nodepool"},
                    {"name": "ReadyNodes", "type": "integer", "jsonPath": ".status.readyNodeNum",
                     "description": "The number of ready nodes in the pool"},
                    {"name": "NotReadyNodes", "type": "integer", "jsonPath": ".status.unreadyNodeNum"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "description": "NodePool is the Schema for the nodepools API",
                    "type": "object",
                    "properties": with_type_meta(json!({
                        "spec": {
                            "description": "NodePoolSpec defines the desired state of NodePool",
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {
                                "annotations": string_map("If specified, the Annotations will be added to all nodes."),
                                "hostNetwork": {
                                    "description": "HostNetwork is used to specify that cni components will not be installed on the nodes of this NodePool.",
                                    "type": "boolean"
                                },
                                "interConnectivity": {
                                    "description": "InterConnectivity represents all nodes in the NodePool can access with each other through Layer 2 or Layer 3 network or not.",
                                    "type": "boolean"
                                },
                                "labels": string_map("If specified, the Labels will be added to all nodes."),
                                "taints": taints("If specified, the Taints will be added to all nodes."),
                                "type": {"description": "The type of the NodePool (Edge or Cloud; Edge when missing)", "type": "string"}
                            }
                        },
                        "status": {
                            "description": "NodePoolStatus defines the observed state of NodePool",
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {
                                "nodes": {"description": "The list of nodes' names in the pool", "type": "array", "items": {"type": "string"}},
                                "readyNodeNum": {"description": "Total number of ready nodes in the pool.", "type": "integer", "format": "int32"},
                                "unreadyNodeNum": {"description": "Total number of unready nodes in the pool.", "type": "integer", "format": "int32"}
                            }
                        }
                    }))
                }}
            }]
        }
    })
}

/// The `selector` of a PlacementException: a label selector.
fn exception_selector() -> Value {
    let requirement = json!({
        "type": "object",
        "required": ["key", "operator"],
        "properties": {
            "key": {"type": "string", "minLength": 1},
            "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
            "values": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"}
        },
        "x-kubernetes-validations": [{
            "rule": "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",
            "message": "In and NotIn need values; Exists and DoesNotExist take none"
        }]
    });
    json!({
        "description": "The Pods it applies to, by their labels (a workload: its Pod template's labels). An empty selector matches every Pod of the namespace.",
        "type": "object",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": requirement, "x-kubernetes-list-type": "atomic"}
        },
        "x-kubernetes-map-type": "atomic"
    })
}

/// The `allow` of a PlacementException: at least one thing allowed.
fn exception_allowance() -> Value {
    let pools = json!({
        "description": "Node pools the Pod may use besides its binding's.",
        "type": "array",
        "items": {"type": "string", "maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
        "x-kubernetes-list-type": "set"
    });
    json!({
        "type": "object",
        "properties": {
            "skipMutation": {"description": "Leave the Pod's node constraints as written.", "type": "boolean"},
            "skipValidation": {"description": "Do not judge the Pod (webhook and audit).", "type": "boolean"},
            "pools": pools
        },
        "x-kubernetes-validations": [{
            "rule": "(has(self.skipMutation) && self.skipMutation) || (has(self.skipValidation) && self.skipValidation) || (has(self.pools) && size(self.pools) > 0)",
            "message": "allow must skip the mutation, skip the validation or name pools"
        }]
    })
}

/// poolkeeper's own CRD: what the schema can refuse, it refuses (a missing
/// selector or reason, an allowance that allows nothing, a pool name that
/// is no label value, a malformed time).
fn placement_exception_crd() -> Value {
    let spec = json!({
        "type": "object",
        "required": ["selector", "reason", "allow"],
        "properties": {
            "selector": exception_selector(),
            "reason": {"description": "Why the exception exists.", "type": "string", "minLength": 1, "maxLength": 1024},
            "expiresAt": {"description": "From this time on the exception no longer applies.", "type": "string", "format": "date-time"},
            "allow": exception_allowance()
        }
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "placementexceptions.poolkeeper.io"},
        "spec": {
            "group": "poolkeeper.io",
            "names": {
                "kind": "PlacementException",
                "listKind": "PlacementExceptionList",
                "plural": "placementexceptions",
                "singular": "placementexception",
                "shortNames": ["pex"]
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "additionalPrinterColumns": [
                    {"name": "Reason", "type": "string", "jsonPath": ".spec.reason"},
                    {"name": "Expires", "type": "string", "jsonPath": ".spec.expiresAt"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "description": "Lets the Pods its selector matches (and the workloads whose Pod templates it matches) out of their namespace's node pool binding, where the binding allows exceptions.",
                    "type": "object",
                    "required": ["spec"],
                    "properties": with_type_meta(json!({"spec": spec}))
                }}
            }]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_describe_the_api_types() {
        let cases = [
            (
                "machineclasses.machine.sapcloud.io",
                "Namespaced",
                Some("mcc"),
                false,
            ),
            (
                "machines.machine.sapcloud.io",
                "Namespaced",
                Some("mc"),
                true,
            ),
            ("nodepools.apps.openyurt.io", "Cluster", Some("np"), true),
            (
                "placementexceptions.poolkeeper.io",
                "Namespaced",
                Some("pex"),
                false,
            ),
        ];
        let crds = crds();
        assert_eq!(crds.len(), cases.len());
        for (crd, (name, scope, short_name, status)) in crds.iter().zip(cases) {
            assert_eq!(crd.metadata.name.as_deref(), Some(name));
            assert_eq!(crd.spec.scope, scope, "{name}");
            assert_eq!(
                crd.spec
                    .names
                    .short_names
                    .as_ref()
                    .and_then(|s| s.first())
                    .map(String::as_str),
                short_name,
                "{name}"
            );
            let version = &crd.spec.versions[0];
            assert!(version.served && version.storage, "{name}");
            assert_eq!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                status,
                "{name}"
            );
        }
    }

    #[test]
    fn crd_identity_matches_resource_impls() {
        use kube::Resource;
        let crds = crds();
        let expected = [
            (
                crate::MachineClass::group(&()).to_string(),
                crate::MachineClass::version(&()).to_string(),
                crate::MachineClass::kind(&()).to_string(),
                crate::MachineClass::plural(&()).to_string(),
            ),
            (
                crate::Machine::group(&()).to_string(),
                crate::Machine::version(&()).to_string(),
                crate::Machine::kind(&()).to_string(),
                crate::Machine::plural(&()).to_string(),
            ),
            (
                crate::NodePool::group(&()).to_string(),
                crate::NodePool::version(&()).to_string(),
                crate::NodePool::kind(&()).to_string(),
                crate::NodePool::plural(&()).to_string(),
            ),
        ];
        for (crd, (group, version, kind, plural)) in crds.iter().zip(expected) {
            assert_eq!(crd.spec.group, group);
            assert_eq!(crd.spec.versions[0].name, version);
            assert_eq!(crd.spec.names.kind, kind);
            assert_eq!(crd.spec.names.plural, plural);
        }
    }

    #[test]
    fn open_fields_preserve_unknown_fields() {
        let crds = crds();
        let schema =
            |i: usize| serde_json::to_value(&crds[i].spec.versions[0].schema).expect("serializes");
        let preserve = "x-kubernetes-preserve-unknown-fields";
        let cases = [
            (0, "/openAPIV3Schema/properties/providerSpec"),
            (0, "/openAPIV3Schema/properties/nodeTemplate"),
            (1, "/openAPIV3Schema/properties/spec"),
            (
                1,
                "/openAPIV3Schema/properties/spec/properties/nodeTemplate",
            ),
            (1, "/openAPIV3Schema/properties/status"),
            (2, "/openAPIV3Schema/properties/spec"),
            (2, "/openAPIV3Schema/properties/status"),
        ];
        for (i, pointer) in cases {
            let schema = schema(i);
            assert_eq!(
                schema.pointer(&format!("{pointer}/{preserve}")),
                Some(&Value::Bool(true)),
                "{i} {pointer}"
            );
        }
    }

    #[test]
    fn yaml_is_deterministic_and_parses_back() {
        for crd in crds() {
            let yaml = crd_yaml(&crd);
            assert_eq!(yaml, crd_yaml(&crd));
            assert!(yaml.starts_with(HEADER));
            let back: CustomResourceDefinition =
                serde_saphyr::from_str(&yaml).expect("YAML parses back");
            assert_eq!(back, crd);
        }
    }

    #[test]
    fn files_round_trip_through_a_directory() {
        let dir = std::env::temp_dir().join(format!("poolkeeper-api-crds-{}", std::process::id()));
        let written = write_crd_files(&dir).expect("writes");
        assert_eq!(written.len(), CRD_FILES.len());
        check_crd_files(&dir).expect("fresh files match");
        std::fs::write(dir.join(CRD_FILES[1]), "stale").expect("overwrites");
        assert!(
            matches!(check_crd_files(&dir), Err(Error::Stale { path }) if path.ends_with(CRD_FILES[1]))
        );
        std::fs::remove_file(dir.join(CRD_FILES[2])).expect("removes");
        std::fs::write(dir.join(CRD_FILES[1]), crd_files()[1].1.clone()).expect("restores");
        assert!(
            matches!(check_crd_files(&dir), Err(Error::Stale { path }) if path.ends_with(CRD_FILES[2]))
        );
        std::fs::remove_dir_all(&dir).expect("cleans up");
    }
}
