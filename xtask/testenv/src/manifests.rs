//! Reading Kubernetes manifests (multi-document YAML) and preparing webhook configurations for a
//! local webhook server.

use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::Value;

use crate::TestEnvError;

/// The non-empty documents of a multi-document YAML text, as JSON values; the items of a
/// `kind: List` (what `kubectl get -o yaml` prints) are documents of their own.
/// `origin` names the text in error messages (usually its file name).
pub fn parse_yaml_documents(text: &str, origin: &str) -> Result<Vec<Value>, TestEnvError> {
    let documents: Vec<Value> =
        serde_saphyr::from_str_multiple(text).map_err(|e| TestEnvError::manifest(origin, e))?;
    let mut objects = Vec::with_capacity(documents.len());
    for doc in documents.into_iter().filter(|doc| !doc.is_null()) {
        if kind_of(&doc) != "List" {
            objects.push(doc);
            continue;
        }
        match doc.get("items") {
            Some(Value::Array(items)) => objects.extend(items.iter().cloned()),
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(TestEnvError::manifest(
                    origin,
                    "the items of a kind: List must be a list of objects",
                ));
            }
        }
    }
    Ok(objects)
}

/// The order objects are applied in, as `kubectl apply` of a directory would need it sorted:
/// what others live in or refer to first (Namespaces, then identities and roles), custom
/// resources' definitions are installed before anything (see `TestEnv::apply_files`).
pub(crate) fn apply_rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "ServiceAccount" | "ClusterRole" | "Role" => 1,
        "ClusterRoleBinding" | "RoleBinding" | "ConfigMap" | "Secret" => 2,
        _ => 3,
    }
}

/// Expands each path: a directory becomes its `*.yaml` / `*.yml` files in name order, a file
/// stays itself. Paths that do not exist are an error.
pub fn yaml_files<I, P>(paths: I) -> Result<Vec<PathBuf>, TestEnvError>
where
    I: IntoIterator<Item = P>,
    P: AsRef<Path>,
{
    let mut files = Vec::new();
    for path in paths {
        let path = path.as_ref();
        if path.is_dir() {
            let entries = std::fs::read_dir(path)
                .map_err(|e| TestEnvError::io(format!("reading {}", path.display()), e))?;
            let mut in_dir: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
                })
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else if path.is_file() {
            files.push(path.to_owned());
        } else {
            return Err(TestEnvError::io(
                format!("reading {}", path.display()),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
    }
    Ok(files)
}

/// The documents of YAML files, each with the file it came from.
pub(crate) fn read_yaml_files(files: &[PathBuf]) -> Result<Vec<(String, Value)>, TestEnvError> {
    let mut documents = Vec::new();
    for file in files {
        let origin = file.display().to_string();
        let text = std::fs::read_to_string(file)
            .map_err(|e| TestEnvError::io(format!("reading {origin}"), e))?;
        for doc in parse_yaml_documents(&text, &origin)? {
            documents.push((origin.clone(), doc));
        }
    }
    Ok(documents)
}

pub(crate) fn kind_of(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or_default()
}

/// Mutating and validating webhook configurations to register with the apiserver, served by a
/// local HTTPS server on `https://127.0.0.1:{port}`.
///
/// Each webhook's `clientConfig` is replaced by `url: https://127.0.0.1:{port}{path}` plus the
/// CA bundle, where `path` is the webhook's `service.path` (or the path of its `url`), so the
/// configurations of `deploy/` can be used as they are.
#[derive(Clone, Debug, Default)]
pub struct WebhookRegistration {
    pub mutating: Vec<MutatingWebhookConfiguration>,
    pub validating: Vec<ValidatingWebhookConfiguration>,
    /// Port of the webhook server on 127.0.0.1.
    pub port: u16,
    /// PEM of the CA that verifies the webhook server's certificate.
    pub ca_bundle_pem: String,
}

impl WebhookRegistration {
    pub fn new(port: u16, ca_bundle_pem: impl Into<String>) -> Self {
        Self {
            port,
            ca_bundle_pem: ca_bundle_pem.into(),
            ..Self::default()
        }
    }

    /// The configurations of `deploy/webhooks`, as they are shipped.
    pub fn installed(port: u16, ca_bundle_pem: impl Into<String>) -> Result<Self, TestEnvError> {
        Self::new(port, ca_bundle_pem).with_files([crate::deploy_dir().join("webhooks")])
    }

    pub fn mutating(mut self, configuration: MutatingWebhookConfiguration) -> Self {
        self.mutating.push(configuration);
        self
    }

    pub fn validating(mut self, configuration: ValidatingWebhookConfiguration) -> Self {
        self.validating.push(configuration);
        self
    }

    /// Gives every webhook a namespace selector no namespace matches, as the
    /// installer's configurations are before a leader writes the selectors:
    /// what the API server answers is then the admission policies' alone.
    pub fn matching_no_namespace(mut self) -> Self {
        let nothing = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".to_owned(),
                operator: "In".to_owned(),
                values: Some(vec!["no-binding.poolkeeper.io".to_owned()]),
            }]),
            ..LabelSelector::default()
        };
        for configuration in &mut self.mutating {
            for webhook in configuration.webhooks.iter_mut().flatten() {
                webhook.namespace_selector = Some(nothing.clone());
            }
        }
        for configuration in &mut self.validating {
            for webhook in configuration.webhooks.iter_mut().flatten() {
                webhook.namespace_selector = Some(nothing.clone());
            }
        }
        self
    }

    /// Adds every Mutating/ValidatingWebhookConfiguration of a YAML text; other kinds are an error.
    pub fn with_yaml(mut self, text: &str, origin: &str) -> Result<Self, TestEnvError> {
        for doc in parse_yaml_documents(text, origin)? {
            self.add_document(origin, doc)?;
        }
        Ok(self)
    }

    /// Adds the configurations of YAML files (directories expand to their YAML files).
    pub fn with_files<I, P>(mut self, paths: I) -> Result<Self, TestEnvError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        for (origin, doc) in read_yaml_files(&yaml_files(paths)?)? {
            self.add_document(&origin, doc)?;
        }
        Ok(self)
    }

    fn add_document(&mut self, origin: &str, doc: Value) -> Result<(), TestEnvError> {
        match kind_of(&doc) {
            "MutatingWebhookConfiguration" => self
                .mutating
                .push(serde_json::from_value(doc).map_err(|e| TestEnvError::manifest(origin, e))?),
            "ValidatingWebhookConfiguration" => self
                .validating
                .push(serde_json::from_value(doc).map_err(|e| TestEnvError::manifest(origin, e))?),
            other => {
                return Err(TestEnvError::manifest(
                    origin,
                    format!(
                        "expected a Mutating/ValidatingWebhookConfiguration, found kind {other:?}"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The configurations with every client config pointing at the local server.
    pub fn rewritten(
        &self,
    ) -> (
        Vec<MutatingWebhookConfiguration>,
        Vec<ValidatingWebhookConfiguration>,
    ) {
        let mut mutating = self.mutating.clone();
        for configuration in &mut mutating {
            for webhook in configuration.webhooks.iter_mut().flatten() {
                webhook.client_config = self.local_client_config(&webhook.client_config);
            }
        }
        let mut validating = self.validating.clone();
        for configuration in &mut validating {
            for webhook in configuration.webhooks.iter_mut().flatten() {
                webhook.client_config = self.local_client_config(&webhook.client_config);
            }
        }
        for metadata in mutating
            .iter_mut()
            .map(|c| &mut c.metadata)
            .chain(validating.iter_mut().map(|c| &mut c.metadata))
        {
            // Fields the server owns would make server-side apply fail on objects read back from a cluster.
            metadata.resource_version = None;
            metadata.uid = None;
            metadata.creation_timestamp = None;
            metadata.managed_fields = None;
            metadata.generation = None;
        }
        (mutating, validating)
    }

    fn local_client_config(&self, original: &WebhookClientConfig) -> WebhookClientConfig {
        let path = original
            .service
            .as_ref()
            .and_then(|s| s.path.clone())
            .or_else(|| original.url.as_deref().map(url_path))
            .unwrap_or_else(|| "/".to_owned());
        WebhookClientConfig {
            url: Some(format!("https://127.0.0.1:{}{path}", self.port)),
            ca_bundle: Some(ByteString(self.ca_bundle_pem.as_bytes().to_vec())),
            service: None,
        }
    }
}

/// The path (with query) of an absolute URL, `/` when it has none.
fn url_path(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    match after_scheme.find('/') {
        Some(i) => after_scheme[i..].to_owned(),
        None => "/".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEBHOOKS: &str = r#"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: poolkeeper-mutating
  resourceVersion: "42"
webhooks:
  - name: mutate.example.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig:
      service: {name: poolkeeper, namespace: poolkeeper-system, path: /mutate-pods, port: 443}
  - name: mutate-url.example.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig:
      url: https://example.com:9443/by-url?x=1
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: poolkeeper-validating
webhooks:
  - name: validate.example.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig:
      service: {name: poolkeeper, namespace: poolkeeper-system}
"#;

    #[test]
    fn yaml_documents_skip_empty_ones() {
        let docs = parse_yaml_documents("---\n---\na: 1\n---\n", "test").unwrap();
        assert_eq!(docs, vec![serde_json::json!({"a": 1})]);
    }

    #[test]
    fn list_items_are_documents_of_their_own() {
        let text = "kind: List\nitems: [{kind: Namespace}, {kind: Node}]\n---\nkind: Pod\n---\nkind: List\n";
        let kinds: Vec<String> = parse_yaml_documents(text, "list.yaml")
            .unwrap()
            .iter()
            .map(|doc| kind_of(doc).to_owned())
            .collect();
        assert_eq!(kinds, ["Namespace", "Node", "Pod"]);
        let err = parse_yaml_documents("kind: List\nitems: {a: 1}\n", "list.yaml").unwrap_err();
        assert!(err.to_string().contains("items of a kind: List"), "{err}");
    }

    #[test]
    fn apply_order_puts_what_others_refer_to_first() {
        let mut kinds = [
            "Pod",
            "ConfigMap",
            "RoleBinding",
            "ServiceAccount",
            "Namespace",
        ];
        kinds.sort_by_key(|k| apply_rank(k));
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ConfigMap",
                "RoleBinding",
                "Pod"
            ]
        );
    }

    #[test]
    fn invalid_yaml_names_its_origin() {
        let err = parse_yaml_documents("a: [1, 2", "broken.yaml").unwrap_err();
        assert!(err.to_string().starts_with("broken.yaml: "), "{err}");
    }

    #[test]
    fn client_configs_point_at_the_local_server() {
        let registration = WebhookRegistration::new(8443, "CA")
            .with_yaml(WEBHOOKS, "webhooks.yaml")
            .unwrap();
        let (mutating, validating) = registration.rewritten();
        let configs: Vec<&WebhookClientConfig> = mutating[0]
            .webhooks
            .iter()
            .flatten()
            .map(|w| &w.client_config)
            .chain(
                validating[0]
                    .webhooks
                    .iter()
                    .flatten()
                    .map(|w| &w.client_config),
            )
            .collect();
        let urls: Vec<_> = configs
            .iter()
            .map(|config| {
                assert_eq!(config.ca_bundle, Some(ByteString(b"CA".to_vec())));
                assert!(config.service.is_none());
                config.url.clone().unwrap()
            })
            .collect();
        assert_eq!(
            urls,
            [
                "https://127.0.0.1:8443/mutate-pods",
                "https://127.0.0.1:8443/by-url?x=1",
                "https://127.0.0.1:8443/",
            ]
        );
        assert_eq!(mutating[0].metadata.resource_version, None);
    }

    #[test]
    fn other_kinds_are_rejected() {
        let err = WebhookRegistration::new(1, "CA")
            .with_yaml(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
                "cm.yaml",
            )
            .unwrap_err();
        assert!(err.to_string().contains("ConfigMap"), "{err}");
    }

    #[test]
    fn url_paths() {
        let cases = [
            ("https://h:1/a/b", "/a/b"),
            ("https://h:1", "/"),
            ("https://h/x?y=z", "/x?y=z"),
            ("/already", "/already"),
        ];
        for (url, expected) in cases {
            assert_eq!(url_path(url), expected, "{url}");
        }
    }

    #[test]
    fn yaml_files_expand_directories_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.yaml", "a.yml", "c.txt"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let files = yaml_files([dir.path()]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(names, ["a.yml", "b.yaml"]);
        assert!(yaml_files([dir.path().join("missing")]).is_err());
    }
}
