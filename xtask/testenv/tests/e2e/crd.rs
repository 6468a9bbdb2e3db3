use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, ResourceExt};
use poolkeeper_testenv::{TestEnv, parse_yaml_documents};
use serde_json::json;

const MACHINE_CLASS_CRD_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/crds/machineclasses.yaml"
);

/// Stands in for deploy/crds/machineclasses.yaml until that file is generated.
const MACHINE_CLASS_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: machineclasses.machine.sapcloud.io
spec:
  group: machine.sapcloud.io
  scope: Namespaced
  names:
    kind: MachineClass
    listKind: MachineClassList
    plural: machineclasses
    singular: machineclass
    shortNames: [mcc]
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

fn machine_class_crd() -> CustomResourceDefinition {
    let path = Path::new(MACHINE_CLASS_CRD_FILE);
    let (text, origin) = match std::fs::read_to_string(path) {
        Ok(text) => (text, MACHINE_CLASS_CRD_FILE),
        Err(_) => (MACHINE_CLASS_CRD.to_owned(), "inline MachineClass CRD"),
    };
    let mut documents = parse_yaml_documents(&text, origin).unwrap();
    assert_eq!(documents.len(), 1, "{origin} holds one CRD");
    serde_json::from_value(documents.remove(0)).unwrap()
}

#[tokio::test]
async fn machine_class_crd_is_installed_and_objects_can_be_created() {
    let crd = machine_class_crd();
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .unwrap()
        .name
        .clone();
    let env = TestEnv::builder()
        .crds(vec![crd.clone()])
        .start()
        .await
        .unwrap();
    env.create_namespace("machine-system").await.unwrap();

    let gvk = GroupVersionKind::gvk(&crd.spec.group, &version, &crd.spec.names.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
    let api = Api::<DynamicObject>::namespaced_with(env.client(), "machine-system", &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{version}", crd.spec.group),
        "kind": "MachineClass",
        "metadata": {"name": "small"},
        "providerSpec": {"machineType": "m5.large"},
        "provider": "AWS",
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    assert_eq!(created.name_any(), "small");

    let fetched = api.get("small").await.unwrap();
    assert_eq!(fetched.data["providerSpec"]["machineType"], "m5.large");
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn crds_and_objects_are_applied_from_yaml() {
    let env = TestEnv::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let crd_file = dir.path().join("machineclasses.yaml");
    std::fs::write(&crd_file, MACHINE_CLASS_CRD).unwrap();
    env.install_crd_files([&crd_file]).await.unwrap();
    // Applying twice is idempotent (server-side apply).
    env.install_crd_files([dir.path()]).await.unwrap();

    let applied = env
        .apply_yaml(
            r#"
apiVersion: v1
kind: Namespace
metadata: {name: machine-system}
---
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata: {name: large, namespace: machine-system}
provider: AWS
---
apiVersion: v1
kind: ConfigMap
metadata: {name: in-default}
data: {a: b}
"#,
            "objects.yaml",
        )
        .await
        .unwrap();
    let names: Vec<_> = applied
        .iter()
        .map(|o| (o.namespace(), o.name_any()))
        .collect();
    assert_eq!(
        names,
        [
            // Dependency order: Namespaces, then ConfigMaps, then the rest.
            (None, "machine-system".to_owned()),
            (Some("default".to_owned()), "in-default".to_owned()),
            (Some("machine-system".to_owned()), "large".to_owned()),
        ]
    );
}
