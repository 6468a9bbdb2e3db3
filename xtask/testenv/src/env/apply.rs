//! Objects applied to a control plane: CRDs (waited for until served), YAML documents in
//! dependency order, webhook configurations, namespaces.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

use super::{TestEnv, eventually};
use crate::manifests::{WebhookRegistration, apply_rank, kind_of, read_yaml_files, yaml_files};
use crate::{FIELD_MANAGER, TestEnvError};

const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

impl TestEnv {
    pub async fn create_namespace(&self, name: &str) -> Result<Namespace, TestEnvError> {
        let namespace: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name},
        }))
        .map_err(|e| TestEnvError::manifest("namespace", e))?;
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|e| TestEnvError::kube(format!("creating namespace {name}"), e))
    }

    /// Applies the CRDs (server-side) and waits until each is Established and served by discovery.
    pub async fn install_crds(
        &self,
        crds: Vec<CustomResourceDefinition>,
    ) -> Result<(), TestEnvError> {
        let api = Api::<CustomResourceDefinition>::all(self.client());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in &crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let mut crd = crd.clone();
            crd.metadata.resource_version = None;
            crd.metadata.managed_fields = None;
            crd.status = None;
            api.patch(&name, &params, &Patch::Apply(&crd))
                .await
                .map_err(|e| TestEnvError::kube(format!("applying CRD {name}"), e))?;
        }
        for crd in &crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(TestEnvError::Timeout {
                        what: format!("CRD {name} Established"),
                        timeout: ESTABLISH_TIMEOUT,
                        details: format!(": {e}"),
                    });
                }
                Err(_) => {
                    return Err(TestEnvError::Timeout {
                        what: format!("CRD {name} Established"),
                        timeout: ESTABLISH_TIMEOUT,
                        details: String::new(),
                    });
                }
            }
            self.wait_until_discoverable(crd).await?;
        }
        Ok(())
    }

    /// Installs the CRDs of YAML files (directories expand to their YAML files).
    pub async fn install_crd_files<I, P>(&self, paths: I) -> Result<(), TestEnvError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut crds = Vec::new();
        for (origin, doc) in read_yaml_files(&yaml_files(paths)?)? {
            crds.push(parse_crd(&origin, doc)?);
        }
        self.install_crds(crds).await
    }

    /// Established does not yet mean every apiserver handler serves the resource; discovery does.
    async fn wait_until_discoverable(
        &self,
        crd: &CustomResourceDefinition,
    ) -> Result<(), TestEnvError> {
        let group = &crd.spec.group;
        let plural = &crd.spec.names.plural;
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            let group_version = format!("{group}/{}", version.name);
            eventually(
                &format!("{plural}.{group_version} in discovery"),
                ESTABLISH_TIMEOUT,
                || async {
                    let resources = self
                        .client
                        .list_api_group_resources(&group_version)
                        .await
                        .ok()?;
                    resources
                        .resources
                        .iter()
                        .any(|r| &r.name == plural)
                        .then_some(())
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Applies (server-side) every object of a YAML text, resolving kinds through discovery.
    /// Namespaced objects without a namespace go to `default`.
    pub async fn apply_yaml(
        &self,
        text: &str,
        origin: &str,
    ) -> Result<Vec<DynamicObject>, TestEnvError> {
        let documents = crate::parse_yaml_documents(text, origin)?
            .into_iter()
            .map(|doc| (origin.to_owned(), doc))
            .collect();
        self.apply_documents(documents).await
    }

    /// Applies the installation's namespace and RBAC (`deploy/namespace.yaml`,
    /// `deploy/rbac.yaml`), so that a test can act as poolkeeper's
    /// ServiceAccount with exactly the permissions it ships with. First it
    /// creates `machine-system`, where the Machines' Role goes: in a cluster,
    /// machine-controller-manager's installation makes that namespace.
    pub async fn apply_installed_rbac(&self) -> Result<Vec<DynamicObject>, TestEnvError> {
        self.create_namespace("machine-system").await?;
        let deploy = crate::deploy_dir();
        self.apply_files([deploy.join("namespace.yaml"), deploy.join("rbac.yaml")])
            .await
    }

    /// Applies every object of YAML files (directories expand to their YAML files).
    pub async fn apply_files<I, P>(&self, paths: I) -> Result<Vec<DynamicObject>, TestEnvError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        self.apply_documents(read_yaml_files(&yaml_files(paths)?)?)
            .await
    }

    /// In dependency order, whatever order the files list them in: CRDs first (installed and
    /// served before any custom resource), then Namespaces, roles and the rest (stable within
    /// a rank, so later documents still win over earlier ones of the same object).
    async fn apply_documents(
        &self,
        documents: Vec<(String, Value)>,
    ) -> Result<Vec<DynamicObject>, TestEnvError> {
        let (crds, mut objects): (Vec<_>, Vec<_>) = documents
            .into_iter()
            .partition(|(_, doc)| kind_of(doc) == "CustomResourceDefinition");
        if !crds.is_empty() {
            let crds = crds
                .into_iter()
                .map(|(origin, doc)| parse_crd(&origin, doc))
                .collect::<Result<Vec<_>, _>>()?;
            self.install_crds(crds).await?;
        }
        objects.sort_by_key(|(_, doc)| apply_rank(kind_of(doc)));
        let mut applied = Vec::with_capacity(objects.len());
        for (origin, doc) in objects {
            applied.push(self.apply_document(&origin, doc).await?);
        }
        Ok(applied)
    }

    async fn apply_document(
        &self,
        origin: &str,
        doc: Value,
    ) -> Result<DynamicObject, TestEnvError> {
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = kind_of(&doc);
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if api_version.is_empty() || kind.is_empty() || name.is_empty() {
            return Err(TestEnvError::manifest(
                origin,
                "every object needs apiVersion, kind and metadata.name",
            ));
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                TestEnvError::kube(format!("{origin}: resolving {api_version} {kind}"), e)
            })?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => {
                let namespace = doc
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                Api::namespaced_with(self.client(), namespace, &resource)
            }
            Scope::Cluster => Api::all_with(self.client(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&doc),
        )
        .await
        .map_err(|e| TestEnvError::kube(format!("{origin}: applying {kind} {name}"), e))
    }

    /// Registers the webhook configurations, pointed at the local server (see
    /// [`WebhookRegistration`]). The apiserver picks new configurations up asynchronously
    /// (within about a second): tests should wait until a request is seen, e.g. with
    /// [`eventually`] and dry-run creates.
    pub async fn register_webhooks(
        &self,
        registration: WebhookRegistration,
    ) -> Result<(), TestEnvError> {
        let (mutating, validating) = registration.rewritten();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mutating_api = Api::<MutatingWebhookConfiguration>::all(self.client());
        for configuration in &mutating {
            let name = configuration.metadata.name.clone().unwrap_or_default();
            mutating_api
                .patch(&name, &params, &Patch::Apply(configuration))
                .await
                .map_err(|e| {
                    TestEnvError::kube(format!("applying MutatingWebhookConfiguration {name}"), e)
                })?;
        }
        let validating_api = Api::<ValidatingWebhookConfiguration>::all(self.client());
        for configuration in &validating {
            let name = configuration.metadata.name.clone().unwrap_or_default();
            validating_api
                .patch(&name, &params, &Patch::Apply(configuration))
                .await
                .map_err(|e| {
                    TestEnvError::kube(format!("applying ValidatingWebhookConfiguration {name}"), e)
                })?;
        }
        Ok(())
    }
}

pub(super) fn parse_crd(
    origin: &str,
    doc: Value,
) -> Result<CustomResourceDefinition, TestEnvError> {
    if kind_of(&doc) != "CustomResourceDefinition" {
        return Err(TestEnvError::manifest(
            origin,
            format!(
                "expected a CustomResourceDefinition, found kind {:?}",
                kind_of(&doc)
            ),
        ));
    }
    serde_json::from_value(doc).map_err(|e| TestEnvError::manifest(origin, e))
}
