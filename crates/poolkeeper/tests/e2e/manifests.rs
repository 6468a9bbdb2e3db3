//! `deploy/` as an operator applies it: rendered by kustomize and applied
//! to a real kube-apiserver with a server-side dry run (CRDs first, for
//! real, so the objects of their kinds can be checked). Kinds the test
//! apiserver does not serve (cert-manager's) are named in a visible line
//! and checked for the fields their kind requires.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use kube::{Api, Client};
use poolkeeper_testenv::TestEnv;
use serde_json::Value;

/// Set by `cargo xtask test`; else the binary `cargo xtask control-plane`
/// builds.
const KUSTOMIZE: &str = "POOLKEEPER_KUSTOMIZE";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kustomize() -> PathBuf {
    if let Some(path) = std::env::var_os(KUSTOMIZE).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let control_plane = workspace_root().join("target/control-plane");
    std::fs::read_dir(&control_plane)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo xtask control-plane`",
                control_plane.display()
            )
        })
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("kustomize"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no kustomize under {}; run `cargo xtask test`",
                control_plane.display()
            )
        })
}

/// `kustomize build deploy/`, one JSON value per document.
fn rendered_deploy() -> Vec<Value> {
    rendered(&workspace_root().join("deploy"))
}

/// `kustomize build dir`, one JSON value per document.
fn rendered(dir: &Path) -> Vec<Value> {
    let output = Command::new(kustomize())
        .arg("build")
        .arg(dir)
        .output()
        .expect("kustomize runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kustomize build deploy/ failed: {stderr}"
    );
    let text = String::from_utf8(output.stdout).expect("kustomize prints UTF-8");
    poolkeeper_testenv::parse_yaml_documents(&text, "kustomize build deploy/")
        .expect("kustomize prints YAML")
}

fn gvk_of(object: &Value) -> GroupVersionKind {
    let api_version = object["apiVersion"]
        .as_str()
        .expect("every object has an apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().expect("every object has a kind");
    GroupVersionKind::gvk(group, version, kind)
}

/// Applies `object` with a server-side dry run; `Err` with the API
/// server's answer.
async fn dry_run_apply(
    client: &Client,
    discovery: &Discovery,
    object: &Value,
) -> Option<Result<(), String>> {
    let gvk = gvk_of(object);
    let (resource, capabilities) = discovery.resolve_gvk(&gvk)?;
    let name = object["metadata"]["name"]
        .as_str()
        .expect("every object is named");
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default");
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply("poolkeeper-manifest-check").dry_run();
    Some(
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .map(drop)
            .map_err(|e| format!("{} {name}: {e}", gvk.kind)),
    )
}

/// What cert-manager itself would refuse: a Certificate without a secret
/// name, DNS names or issuer; an Issuer without a way to issue.
fn check_cert_manager_object(object: &Value) -> Result<(), String> {
    let spec = &object["spec"];
    let kind = object["kind"].as_str().unwrap_or_default();
    let missing: Vec<&str> = match kind {
        "Certificate" => ["secretName", "dnsNames", "issuerRef"]
            .into_iter()
            .filter(|field| spec[*field].is_null())
            .collect(),
        "Issuer" | "ClusterIssuer" => ["selfSigned", "ca", "acme", "vault", "venafi"]
            .iter()
            .all(|field| spec[*field].is_null())
            .then_some("an issuer type")
            .into_iter()
            .collect(),
        other => return Err(format!("unexpected cert-manager kind {other}")),
    };
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("{kind} lacks {missing:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_renders_and_applies_with_a_server_side_dry_run() {
    let objects = rendered_deploy();
    let env = TestEnv::builder()
        .scheduler(false)
        .start()
        .await
        .expect("the control plane starts");
    let client = env.client();
    let (crds, rest): (Vec<&Value>, Vec<&Value>) = objects
        .iter()
        .partition(|object| object["kind"] == "CustomResourceDefinition");
    assert_eq!(
        crds.len(),
        4,
        "MachineClass, Machine, NodePool and PlacementException CRDs"
    );
    let crds = crds
        .into_iter()
        .map(|crd| serde_json::from_value(crd.clone()).expect("a CustomResourceDefinition"))
        .collect();
    env.install_crds(crds)
        .await
        .expect("the CRDs of deploy/ are accepted and established");
    // The namespaces the other objects live in, for real: a dry run of a
    // namespace does not let objects be created in it.
    for namespace in rest.iter().filter(|o| o["kind"] == "Namespace") {
        let name = namespace["metadata"]["name"].as_str().unwrap();
        env.create_namespace(name)
            .await
            .expect("the namespace is created");
    }
    env.create_namespace("machine-system")
        .await
        .expect("the MachineClass namespace is created");

    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("API discovery");
    let mut applied = Vec::new();
    let mut failures = Vec::new();
    for object in rest.iter().filter(|o| o["kind"] != "Namespace") {
        let gvk = gvk_of(object);
        match dry_run_apply(&client, &discovery, object).await {
            Some(Ok(())) => applied.push(gvk.kind.clone()),
            Some(Err(error)) => failures.push(error),
            None if gvk.group == "cert-manager.io" => {
                println!(
                    "skipped server-side: {}/{} {} (cert-manager is not installed in the test \
                     control plane); checked its required fields instead",
                    gvk.group, gvk.version, gvk.kind
                );
                if let Err(error) = check_cert_manager_object(object) {
                    failures.push(error);
                }
            }
            None => failures.push(format!("{} is not served by the API server", gvk.kind)),
        }
    }
    println!("dry-run applied: {applied:?}");
    assert!(failures.is_empty(), "deploy/ does not apply: {failures:#?}");
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ConfigMap",
    ] {
        assert!(
            applied.iter().any(|k| k == kind),
            "{kind} is in deploy/ and applies: {applied:?}"
        );
    }
}

/// An overlay with the component `deploy/cert-manager`: cert-manager's objects, its CA
/// injector's annotation on both configurations, and poolkeeper serving the Secret it issues
/// (source `secret`) instead of issuing its own.
#[test]
fn the_cert_manager_component_hands_the_certificate_to_cert_manager() {
    let overlay = workspace_root().join("target/cert-manager-overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources: [../../deploy]\ncomponents: [../../deploy/cert-manager]\n",
    )
    .unwrap();
    let objects = rendered(&overlay);
    for kind in ["Certificate", "Issuer"] {
        assert!(objects.iter().any(|o| o["kind"] == kind), "{kind}");
    }
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let configuration = objects.iter().find(|o| o["kind"] == kind).unwrap();
        assert_eq!(
            configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "poolkeeper-system/poolkeeper-webhook"
        );
    }
    let text = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "poolkeeper-config")
        .and_then(|o| o["data"]["poolkeeper.yaml"].as_str())
        .unwrap();
    let config = poolkeeper_config::Config::from_yaml_str(text).unwrap();
    assert_eq!(
        config.webhook.certificate.source,
        poolkeeper_config::CertificateSource::Secret
    );
    let shipped = rendered_deploy();
    let shipped = shipped
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "poolkeeper-config")
        .and_then(|o| o["data"]["poolkeeper.yaml"].as_str())
        .unwrap();
    let mut without = poolkeeper_config::Config::from_yaml_str(shipped).unwrap();
    assert_eq!(
        without.webhook.certificate.source,
        poolkeeper_config::CertificateSource::SelfManaged
    );
    without.webhook.certificate.source = poolkeeper_config::CertificateSource::Secret;
    assert_eq!(
        config, without,
        "the component changes nothing else of the configuration"
    );
}

#[test]
fn the_shipped_config_passes_check_config() {
    let objects = rendered_deploy();
    let config_map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "poolkeeper-config")
        .expect("deploy/ ships the poolkeeper-config ConfigMap");
    let text = config_map["data"]["poolkeeper.yaml"]
        .as_str()
        .expect("it holds poolkeeper.yaml");
    if let Err(errors) = poolkeeper_config::Config::from_yaml_str(text) {
        panic!("deploy/poolkeeper.yaml is invalid:\n{errors}");
    }
}
