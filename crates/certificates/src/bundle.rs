//! The caBundle of the webhook configurations: the guarded JSON patch that
//! sets every entry's `clientConfig.caBundle` (pure), and applying it.

use std::time::Duration;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, TestOperation};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch as KubePatch, PatchParams};
use kube::{Api, Client, Resource};
use poolkeeper_kube::Fence;
use serde_json::Value;

use crate::error::CertificateError;

/// The field manager of poolkeeper's writes.
pub const FIELD_MANAGER: &str = "poolkeeper";

/// Annotations with which cert-manager's CA injector owns a configuration's caBundle.
pub const CA_INJECTOR_ANNOTATIONS: [&str; 2] = [
    "cert-manager.io/inject-ca-from",
    "cert-manager.io/inject-ca-from-secret",
];

/// What poolkeeper reads of a stored configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBundles<'a> {
    pub resource_version: Option<&'a str>,
    /// Set when cert-manager's CA injector fills in the caBundle: then it is left alone.
    pub injected: bool,
    /// Each entry's name and caBundle, in order.
    pub entries: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// The patch giving every entry of `stored` the caBundle `bundle`, `None`
/// when they have it already or when the CA injector owns them. It tests
/// the resourceVersion and each changed entry's name at its index.
pub fn bundle_patch(stored: &StoredBundles<'_>, bundle: &[u8]) -> Option<Patch> {
    if stored.injected {
        return None;
    }
    let mut ops = Vec::new();
    for (index, (name, current)) in stored.entries.iter().enumerate() {
        if *current == Some(bundle) {
            continue;
        }
        let position = index.to_string();
        ops.push(PatchOperation::Test(TestOperation {
            path: pointer(&["webhooks", &position, "name"]),
            value: Value::String((*name).to_owned()),
        }));
        ops.push(PatchOperation::Add(AddOperation {
            path: pointer(&["webhooks", &position, "clientConfig", "caBundle"]),
            value: serde_json::to_value(ByteString(bundle.to_vec())).unwrap_or_default(),
        }));
    }
    if ops.is_empty() {
        return None;
    }
    if let Some(version) = stored.resource_version {
        ops.insert(
            0,
            PatchOperation::Test(TestOperation {
                path: pointer(&["metadata", "resourceVersion"]),
                value: Value::String(version.to_owned()),
            }),
        );
    }
    Some(Patch(ops))
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

/// A Mutating- or ValidatingWebhookConfiguration.
pub(crate) trait Configuration:
    Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    const KIND: &'static str;
    fn bundles(&self) -> StoredBundles<'_>;
}

fn injected(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| CA_INJECTOR_ANNOTATIONS.iter().any(|k| a.contains_key(*k)))
}

/// What a configuration stores: its resourceVersion, whether cert-manager's
/// injector owns it, and each entry's name and caBundle.
fn stored_bundles<'a>(
    meta: &'a ObjectMeta,
    entries: impl Iterator<Item = (&'a str, &'a WebhookClientConfig)>,
) -> StoredBundles<'a> {
    StoredBundles {
        resource_version: meta.resource_version.as_deref(),
        injected: injected(meta),
        entries: entries
            .map(|(name, client)| (name, client.ca_bundle.as_ref().map(|b| b.0.as_slice())))
            .collect(),
    }
}

impl Configuration for MutatingWebhookConfiguration {
    const KIND: &'static str = "MutatingWebhookConfiguration";
    fn bundles(&self) -> StoredBundles<'_> {
        let entries = self.webhooks.iter().flatten();
        stored_bundles(
            &self.metadata,
            entries.map(|w| (w.name.as_str(), &w.client_config)),
        )
    }
}

impl Configuration for ValidatingWebhookConfiguration {
    const KIND: &'static str = "ValidatingWebhookConfiguration";
    fn bundles(&self) -> StoredBundles<'_> {
        let entries = self.webhooks.iter().flatten();
        stored_bundles(
            &self.metadata,
            entries.map(|w| (w.name.as_str(), &w.client_config)),
        )
    }
}

/// Where one configuration's caBundle stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Published {
    InStep,
    /// cert-manager's CA injector owns it.
    Injected,
    Patched,
    /// `check` only: it differs.
    Differs,
}

/// Reads configuration `name` of kind `K` and, unless `check`, patches its
/// caBundle to `bundle` when it differs; each request within `timeout`.
/// Under the term `epoch` the patch is fenced (`poolkeeper_kube::fencing`):
/// the term's first write stamps the epoch (so a configuration whose epoch is
/// older differs), later ones test it.
pub(crate) async fn publish<K: Configuration>(
    client: &Client,
    name: &str,
    bundle: &[u8],
    timeout: Duration,
    check: bool,
    epoch: Option<i64>,
) -> Result<Published, CertificateError> {
    let api = Api::<K>::all(client.clone());
    let stored = tokio::time::timeout(timeout, api.get_opt(name))
        .await
        .map_err(|_| CertificateError::Timeout(K::KIND))?
        .map_err(|source| CertificateError::Api {
            what: K::KIND,
            source,
        })?
        .ok_or(CertificateError::ConfigurationMissing(K::KIND))?;
    let bundles = stored.bundles();
    if bundles.injected {
        return Ok(Published::Injected);
    }
    let changes = bundle_patch(&bundles, bundle);
    let patch = match epoch {
        Some(epoch) => {
            let meta = stored.meta();
            let annotations = meta.annotations.as_ref();
            Fence::new(annotations, meta.resource_version.as_deref(), epoch)
                .map_err(|source| CertificateError::Deposed {
                    what: K::KIND,
                    source,
                })?
                .around(changes)
        }
        None => changes,
    };
    let Some(patch) = patch else {
        return Ok(Published::InStep);
    };
    if check {
        return Ok(Published::Differs);
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    tokio::time::timeout(
        timeout,
        api.patch(name, &params, &KubePatch::Json::<()>(patch)),
    )
    .await
    .map_err(|_| CertificateError::Timeout(K::KIND))?
    .map_err(|source| CertificateError::Api {
        what: K::KIND,
        source,
    })?;
    Ok(Published::Patched)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Entries (name, caBundle), whether cert-manager injects, the patch wanted.
    type Case<'a> = (Vec<(&'a str, Option<&'a [u8]>)>, bool, Option<Value>);

    #[test]
    fn every_entry_gets_the_bundle_and_nothing_else_changes() {
        let old = b"old".as_slice();
        let new = b"new".as_slice();
        let cases: [Case<'_>; 4] = [
            (
                vec![("a", None), ("b", Some(old))],
                false,
                Some(json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                    {"op": "test", "path": "/webhooks/0/name", "value": "a"},
                    {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "bmV3"},
                    {"op": "test", "path": "/webhooks/1/name", "value": "b"},
                    {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "bmV3"},
                ])),
            ),
            (
                vec![("a", Some(new)), ("b", Some(old))],
                false,
                Some(json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                    {"op": "test", "path": "/webhooks/1/name", "value": "b"},
                    {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "bmV3"},
                ])),
            ),
            (vec![("a", Some(new)), ("b", Some(new))], false, None),
            (vec![("a", Some(old))], true, None),
        ];
        for (entries, injected, want) in cases {
            let stored = StoredBundles {
                resource_version: Some("7"),
                injected,
                entries: entries.clone(),
            };
            let patch = bundle_patch(&stored, new).map(|p| serde_json::to_value(p).unwrap());
            assert_eq!(patch, want, "{entries:?}, injected {injected}");
        }
    }
}
