//! The two admission registration kinds, read, patched and watched by name.

use std::fmt::Debug;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::ClusterResourceScope;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use poolkeeper_kube::watch::retrying;
use poolkeeper_supervisor::LeaderTerm;
use serde::de::DeserializeOwned;

use crate::desired::DesiredSelectors;
use crate::error::SelectorError;
use crate::patch::{StoredConfiguration, StoredEntry, fenced_patch, selector_patch};
use crate::settings::{ConfigurationKind, ManagedConfiguration};

/// The field manager of poolkeeper's selector patches (in `managedFields`).
pub(crate) const FIELD_MANAGER: &str = "poolkeeper";

/// A Mutating- or ValidatingWebhookConfiguration.
pub(crate) trait Configuration:
    Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    fn stored(&self) -> StoredConfiguration<'_>;
}

impl Configuration for MutatingWebhookConfiguration {
    fn stored(&self) -> StoredConfiguration<'_> {
        StoredConfiguration {
            resource_version: self.metadata.resource_version.as_deref(),
            entries: self
                .webhooks
                .iter()
                .flatten()
                .map(|webhook| StoredEntry {
                    name: &webhook.name,
                    namespace_selector: webhook.namespace_selector.as_ref(),
                    object_selector: webhook.object_selector.as_ref(),
                    match_conditions: webhook.match_conditions.as_deref(),
                })
                .collect(),
        }
    }
}

impl Configuration for ValidatingWebhookConfiguration {
    fn stored(&self) -> StoredConfiguration<'_> {
        StoredConfiguration {
            resource_version: self.metadata.resource_version.as_deref(),
            entries: self
                .webhooks
                .iter()
                .flatten()
                .map(|webhook| StoredEntry {
                    name: &webhook.name,
                    namespace_selector: webhook.namespace_selector.as_ref(),
                    object_selector: webhook.object_selector.as_ref(),
                    match_conditions: webhook.match_conditions.as_deref(),
                })
                .collect(),
        }
    }
}

/// What one update did to a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Updated {
    /// Its selectors were right: nothing written.
    InStep,
    Patched,
}

/// Reads the configuration `managed` names and, when its selectors differ
/// from `desired` or it lacks the term's epoch, patches them behind the
/// leader's fence; each request within `timeout` and sent only with the
/// leader's permit (`None`: this replica leads unconditionally).
pub(crate) async fn update<K: Configuration>(
    client: &Client,
    managed: &ManagedConfiguration,
    desired: &DesiredSelectors,
    timeout: Duration,
    term: Option<&LeaderTerm>,
) -> Result<Updated, SelectorError> {
    let api = Api::<K>::all(client.clone());
    let timed_out = || SelectorError::Timeout {
        kind: managed.kind,
        name: managed.name.clone(),
        timeout,
    };
    let stored = tokio::time::timeout(timeout, api.get_opt(&managed.name))
        .await
        .map_err(|_| timed_out())?
        .map_err(|source| SelectorError::Read {
            kind: managed.kind,
            name: managed.name.clone(),
            source,
        })?
        .ok_or_else(|| SelectorError::ConfigurationMissing {
            kind: managed.kind,
            name: managed.name.clone(),
        })?;
    let changes = selector_patch(&stored.stored(), managed, desired)?;
    let permit = term.map(LeaderTerm::permit).transpose()?;
    let epoch = permit.map(|permit| permit.epoch);
    let meta = stored.meta();
    let fenced = fenced_patch(
        changes,
        meta.annotations.as_ref(),
        meta.resource_version.as_deref(),
        epoch,
    )
    .map_err(|source| SelectorError::Deposed {
        kind: managed.kind,
        name: managed.name.clone(),
        source,
    })?;
    let Some(patch) = fenced else {
        return Ok(Updated::InStep);
    };
    let timeout = permit.map_or(timeout, |permit| permit.bound(timeout));
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let patch = Patch::Json::<()>(patch);
    tokio::time::timeout(timeout, api.patch(&managed.name, &params, &patch))
        .await
        .map_err(|_| timed_out())?
        .map_err(|source| SelectorError::Patch {
            kind: managed.kind,
            name: managed.name.clone(),
            source,
        })?;
    Ok(Updated::Patched)
}

/// One item per change of the configuration `managed` names (created,
/// changed, deleted, and once the watch has listed it), or a watch error
/// (the watch retries with the policy of every watch of the process). A field selector on the name keeps
/// the watch within RBAC's `resourceNames`.
pub(crate) fn changes<K: Configuration>(
    client: Client,
    managed: &ManagedConfiguration,
) -> impl Stream<Item = (ConfigurationKind, Result<(), watcher::Error>)> + Send + 'static {
    let kind = managed.kind;
    let config = watcher::Config::default().fields(&format!("metadata.name={}", managed.name));
    let api = Api::<K>::all(client.clone());
    // A 410 relists at once, other errors back off while the API server's
    // readiness is probed.
    retrying(client, move || watcher(api.clone(), config.clone())).filter_map(
        move |event| async move {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => None,
                Ok(_) => Some((kind, Ok(()))),
                Err(error) => Some((kind, Err(error))),
            }
        },
    )
}
