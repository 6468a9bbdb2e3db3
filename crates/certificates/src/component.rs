//! The leader-only component: issues into the Secret what the plan calls
//! for, publishes its `ca.crt` as both configurations' caBundle, and wakes
//! at the plan's next check or on any change of the Secret or the
//! configurations.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use poolkeeper_config::CertificateSource;
use poolkeeper_kube::watch::retrying;
use poolkeeper_kube::{Backoff, LEADER_EPOCH_ANNOTATION, stamp, version_precondition};
use poolkeeper_pki::CA_CERT;
use poolkeeper_supervisor::{BoxError, Component, Context, LeaderTerm, error_chain, sleep_until};
use tokio::time::Instant;

use crate::bundle::{FIELD_MANAGER, Published, publish};
use crate::error::CertificateError;
use crate::plan::{Stored, plan};
use crate::settings::CertificateSettings;

type Changes = Pin<Box<dyn Stream<Item = Result<(), watcher::Error>> + Send>>;

/// Writes of the Secret in one pass before it is given up (a pass converges
/// in two: the plan of a written Secret writes nothing more).
const MAX_WRITES: usize = 4;

/// The `webhook-certificates` component. See the crate documentation.
pub struct WebhookCertificates {
    client: Client,
    settings: CertificateSettings,
    /// The leader's term every write asks first; `None` without leader
    /// election.
    term: Option<LeaderTerm>,
}

impl std::fmt::Debug for WebhookCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookCertificates")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl WebhookCertificates {
    pub const NAME: &'static str = "webhook-certificates";

    pub fn new(settings: CertificateSettings, client: Client) -> Self {
        Self {
            client,
            settings,
            term: None,
        }
    }

    /// Every write of the Secret and of the caBundles first asks `term`
    /// for leave (`poolkeeper_kube`'s README: the leader's term), is
    /// bounded by what is left of it, and is fenced by its epoch
    /// (`poolkeeper_kube::fencing`): the term's first pass stamps it on the
    /// Secret and both configurations, and a newer one on them stops the writes.
    pub fn guarded_by(mut self, term: LeaderTerm) -> Self {
        self.term = Some(term);
        self
    }

    /// The term's epoch (`None` without leader election) and the request
    /// timeout, once the term allows a write.
    fn write_permit(&self) -> Result<(Option<i64>, Duration), CertificateError> {
        let timeout = self.settings.request_timeout;
        match &self.term {
            Some(term) => {
                let permit = term.permit()?;
                Ok((Some(permit.epoch), permit.bound(timeout)))
            }
            None => Ok((None, timeout)),
        }
    }

    /// Whether the Secret lacks the current term's epoch: the term's first
    /// pass writes it, so that an older term's late write is refused.
    fn unstamped(&self, secret: Option<&Secret>) -> bool {
        let epoch = self.term.as_ref().and_then(LeaderTerm::current);
        let stored = secret
            .and_then(|s| s.metadata.annotations.as_ref())
            .and_then(|a| a.get(LEADER_EPOCH_ANNOTATION));
        epoch.is_some_and(|term| stored != Some(&term.epoch.to_string()))
    }

    async fn run_loop(self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let mut changes = self.changes();
        let mut backoff = Backoff::new(self.settings.retry_initial, self.settings.retry_max);
        let mut due = true;
        let mut wake_at: Option<Instant> = None;
        loop {
            if due {
                due = false;
                let _busy = ctx.busy("keeping the webhook certificate");
                let result = tokio::select! {
                    biased;
                    () = ctx.cancelled() => break,
                    result = self.pass() => result,
                };
                wake_at = match result {
                    Ok(next) => {
                        backoff.reset();
                        next.map(until)
                    }
                    Err(error @ CertificateError::Deposed { .. }) => {
                        tracing::warn!(
                            error = %error_chain(&error),
                            "the webhook certificate's objects belong to a newer leader: not writing"
                        );
                        None
                    }
                    Err(error) => {
                        let delay = if error.is_conflict() {
                            backoff.first()
                        } else {
                            backoff.next_delay()
                        };
                        tracing::warn!(
                            error = %error_chain(&error),
                            retry_in = %humantime::format_duration(delay),
                            "webhook certificate not brought in step"
                        );
                        Some(Instant::now() + delay)
                    }
                };
            }
            tokio::select! {
                biased;
                () = ctx.cancelled() => break,
                Some(change) = changes.next() => match change {
                    Ok(()) => due = true,
                    Err(error) => tracing::warn!(
                        error = %error_chain(&error),
                        "watching the webhook certificate's objects failed; retrying"
                    ),
                },
                () = sleep_until(wake_at) => due = true,
            }
        }
        Ok(())
    }

    /// Changes of the Secret and of both configurations, merged.
    fn changes(&self) -> Changes {
        let by_name =
            |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        let secret = watch(
            self.client.clone(),
            Api::<Secret>::namespaced(self.client.clone(), &self.settings.namespace),
            by_name(&self.settings.secret_name),
        );
        let name = &self.settings.configuration_name;
        let mutating = watch(
            self.client.clone(),
            Api::<MutatingWebhookConfiguration>::all(self.client.clone()),
            by_name(name),
        );
        let validating = watch(
            self.client.clone(),
            Api::<ValidatingWebhookConfiguration>::all(self.client.clone()),
            by_name(name),
        );
        Box::pin(futures::stream::select(
            secret,
            futures::stream::select(mutating, validating),
        ))
    }

    /// One pass: the Secret brought in step (source `self`) and its CA
    /// published. Returns when to look again, if nothing changes first.
    async fn pass(&self) -> Result<Option<SystemTime>, CertificateError> {
        if self.settings.source != CertificateSource::SelfManaged {
            let secret = self.read_secret().await?;
            let data = secret.map(|s| secret_data(&s)).unwrap_or_default();
            match data.get(CA_CERT) {
                Some(bundle) => {
                    self.publish(bundle, false).await?;
                }
                // Its issuer has not written it yet: its change wakes the component.
                None => tracing::info!(
                    secret = %self.settings.secret_name,
                    "no ca.crt in the webhook certificate's Secret yet"
                ),
            }
            return Ok(None);
        }
        let settings = &self.settings;
        for _ in 0..MAX_WRITES {
            let secret = self.read_secret().await?;
            let data = secret.as_ref().map(secret_data).unwrap_or_default();
            let now = SystemTime::now();
            let stored = Stored::read(&data, &settings.dns_names, now);
            let bundle = data.get(CA_CERT).cloned().unwrap_or_default();
            let published = !bundle.is_empty() && self.publish(&bundle, true).await?;
            let plan = plan(&stored, now, &settings.lifetimes, published);
            if plan.writes(&stored) {
                let written = crate::issue(
                    &data,
                    &stored,
                    &plan,
                    now,
                    &settings.lifetimes,
                    &settings.dns_names,
                )?;
                self.write_secret(secret, &written).await?;
                tracing::info!(
                    secret = %settings.secret_name,
                    new_ca = plan.new_ca.map(|r| r.as_str()),
                    new_leaf = plan.new_leaf.map(|r| r.as_str()),
                    cas = plan.kept_cas.len() + usize::from(plan.new_ca.is_some()),
                    "webhook certificate written"
                );
                if let Some(bundle) = written.get(CA_CERT) {
                    self.publish(bundle, false).await?;
                }
                continue;
            }
            if !published {
                self.publish(&bundle, false).await?;
                continue;
            }
            if self.unstamped(secret.as_ref()) {
                self.write_secret(secret, &data).await?;
                continue;
            }
            return Ok(Some(plan.next_check));
        }
        Err(CertificateError::Unsettled(MAX_WRITES))
    }

    /// Publishes `bundle` into both configurations, or (`check`) says
    /// whether both have it (a configuration cert-manager injects counts as
    /// published).
    async fn publish(&self, bundle: &[u8], check: bool) -> Result<bool, CertificateError> {
        let name = &self.settings.configuration_name;
        let (epoch, timeout) = if check {
            let term = self.term.as_ref().and_then(LeaderTerm::current);
            (term.map(|term| term.epoch), self.settings.request_timeout)
        } else {
            self.write_permit()?
        };
        let client = &self.client;
        let mutating =
            publish::<MutatingWebhookConfiguration>(client, name, bundle, timeout, check, epoch)
                .await?;
        let validating =
            publish::<ValidatingWebhookConfiguration>(client, name, bundle, timeout, check, epoch)
                .await?;
        for (kind, published) in [
            ("MutatingWebhookConfiguration", mutating),
            ("ValidatingWebhookConfiguration", validating),
        ] {
            if published == Published::Patched {
                tracing::info!(kind, %name, "caBundle updated to the webhook certificate's CAs");
            }
        }
        Ok(mutating != Published::Differs && validating != Published::Differs)
    }

    async fn read_secret(&self) -> Result<Option<Secret>, CertificateError> {
        let api = Api::<Secret>::namespaced(self.client.clone(), &self.settings.namespace);
        tokio::time::timeout(
            self.settings.request_timeout,
            api.get_opt(&self.settings.secret_name),
        )
        .await
        .map_err(|_| CertificateError::Timeout("Secret"))?
        .map_err(|source| CertificateError::Api {
            what: "Secret",
            source,
        })
    }

    /// Creates the Secret (owned by the MutatingWebhookConfiguration, so
    /// that an uninstall removes it), or replaces the one read: its
    /// resourceVersion is the precondition; one without an owner gets it.
    /// Under a term the Secret carries its epoch; one carrying a newer
    /// term's is left alone (a create is fenced by the name alone).
    async fn write_secret(
        &self,
        stored: Option<Secret>,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<(), CertificateError> {
        let api = Api::<Secret>::namespaced(self.client.clone(), &self.settings.namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let data = Some(
            data.iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect(),
        );
        let (epoch, timeout) = self.write_permit()?;
        let stored = match epoch {
            Some(epoch) => fenced_secret(stored, epoch)?,
            None => stored,
        };
        let request = async {
            match stored {
                Some(mut secret) => {
                    secret.data = data;
                    secret.string_data = None;
                    // A Secret it adopts is removed by an uninstall too.
                    if secret.metadata.owner_references.is_none() {
                        secret.metadata.owner_references = Some(vec![self.owner().await?]);
                    }
                    api.replace(&self.settings.secret_name, &params, &secret)
                        .await
                }
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(self.settings.secret_name.clone()),
                            namespace: Some(self.settings.namespace.clone()),
                            owner_references: Some(vec![self.owner().await?]),
                            labels: Some(BTreeMap::from([(
                                "app.kubernetes.io/managed-by".to_owned(),
                                "poolkeeper".to_owned(),
                            )])),
                            annotations: epoch.map(|epoch| {
                                BTreeMap::from([(
                                    LEADER_EPOCH_ANNOTATION.to_owned(),
                                    epoch.to_string(),
                                )])
                            }),
                            ..ObjectMeta::default()
                        },
                        type_: Some("kubernetes.io/tls".to_owned()),
                        data,
                        ..Secret::default()
                    };
                    api.create(&params, &secret).await
                }
            }
        };
        tokio::time::timeout(timeout, request)
            .await
            .map_err(|_| CertificateError::Timeout("Secret"))?
            .map_err(|source| CertificateError::Api {
                what: "Secret",
                source,
            })?;
        Ok(())
    }

    /// The ownerReference to the MutatingWebhookConfiguration.
    async fn owner(&self) -> Result<OwnerReference, kube::Error> {
        let api = Api::<MutatingWebhookConfiguration>::all(self.client.clone());
        let configuration = api.get(&self.settings.configuration_name).await?;
        Ok(OwnerReference {
            api_version: MutatingWebhookConfiguration::api_version(&()).into_owned(),
            kind: MutatingWebhookConfiguration::kind(&()).into_owned(),
            name: self.settings.configuration_name.clone(),
            uid: configuration.metadata.uid.unwrap_or_default(),
            ..OwnerReference::default()
        })
    }
}

/// The Secret read, stamped with the term `epoch` and its resourceVersion
/// as the precondition of its replacement; [`CertificateError::Deposed`] when
/// it carries a newer term's epoch.
fn fenced_secret(stored: Option<Secret>, epoch: i64) -> Result<Option<Secret>, CertificateError> {
    let Some(mut secret) = stored else {
        return Ok(None);
    };
    let meta = &secret.metadata;
    let version = version_precondition(
        meta.annotations.as_ref(),
        meta.resource_version.as_deref(),
        epoch,
    )
    .map_err(|source| CertificateError::Deposed {
        what: "Secret",
        source,
    })?;
    stamp(&mut secret.metadata, epoch, version);
    Ok(Some(secret))
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// An item per change of the objects `config` selects (not the initial list).
fn watch<K>(client: Client, api: Api<K>, config: watcher::Config) -> Changes
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash,
{
    Box::pin(
        retrying(client, move || watcher(api.clone(), config.clone())).filter_map(
            |event| async move {
                match event {
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => None,
                    Ok(_) => Some(Ok(())),
                    Err(error) => Some(Err(error)),
                }
            },
        ),
    )
}

/// The longest the component sleeps between passes: the plan's times are wall-clock times,
/// and the wall clock may jump (an NTP step, a suspended VM) while tokio's timer does not.
const MAX_SLEEP: Duration = Duration::from_secs(60 * 60);

/// The tokio instant of the wall-clock time `at` (now when it has passed), at most
/// [`MAX_SLEEP`] ahead.
fn until(at: SystemTime) -> Instant {
    let wait = at
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO);
    Instant::now() + wait.min(MAX_SLEEP)
}

impl Component for WebhookCertificates {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Ready the moment it runs: the replicas serve whatever the Secret holds.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.run_loop(ctx))
    }
}

#[cfg(test)]
mod tests {
    use poolkeeper_kube::Deposed;

    use super::*;

    fn secret(epoch: Option<&str>) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("poolkeeper-webhook-tls".to_owned()),
                resource_version: Some("41".to_owned()),
                annotations: epoch.map(|epoch| {
                    BTreeMap::from([(LEADER_EPOCH_ANNOTATION.to_owned(), epoch.to_owned())])
                }),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    /// (name, the Secret read, our epoch, the newer epoch that deposes us).
    #[test]
    fn the_secret_is_stamped_unless_a_newer_term_owns_it() {
        let cases = [
            ("absent", None, 3, None),
            ("no epoch yet", Some(secret(None)), 3, None),
            ("an older term's", Some(secret(Some("2"))), 3, None),
            ("our own", Some(secret(Some("3"))), 3, None),
            ("a newer term's", Some(secret(Some("4"))), 3, Some(4)),
        ];
        for (name, stored, epoch, newer) in cases {
            let absent = stored.is_none();
            match (fenced_secret(stored, epoch), newer) {
                (Ok(fenced), None) => {
                    assert_eq!(fenced.is_none(), absent, "{name}");
                    if let Some(fenced) = fenced {
                        let meta = fenced.metadata;
                        let annotations = meta.annotations.unwrap_or_default();
                        assert_eq!(annotations[LEADER_EPOCH_ANNOTATION], "3", "{name}");
                        assert_eq!(meta.resource_version.as_deref(), Some("41"), "{name}");
                    }
                }
                (Err(CertificateError::Deposed { source, .. }), Some(stored)) => {
                    assert_eq!(
                        source,
                        Deposed {
                            stored,
                            ours: epoch
                        },
                        "{name}"
                    );
                }
                (other, _) => panic!("{name}: {other:?}"),
            }
        }
    }
}
