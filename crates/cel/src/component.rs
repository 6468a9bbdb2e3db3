//! The leader-only component `cel-policies`: keeps the CEL engine's
//! admission objects in step with the policy and the NodePools, or removes
//! them when the engine is `webhook`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, Resource};
use poolkeeper_bus::{Bus, Delivery, Event, ResourceKind, Subscription};
use poolkeeper_config::{Config, Engine, Mode, NamespaceLabels};
use poolkeeper_index::Index;
use poolkeeper_kube::{Backoff, Deposed, refused, stamp, version_precondition};
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::{
    BoxError, Component, Context, LeaderTerm, NotLeader, error_chain, sleep_until,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;

use crate::engine::EngineState;
use crate::evaluations::{ErrorTracker, Watched, describe, evaluation_errors, server_of};
use crate::params::{compile, previous_bindings};
use crate::policies::{
    MUTATING_POLICY, Objects, Placement, PolicyTexts, WARNINGS_POLICY, validating_policy_name,
};

/// The field manager of every write (in `managedFields`).
const FIELD_MANAGER: &str = "poolkeeper";
/// How soon after writing the validating policies their type checking
/// (the controller manager's, in their status) is read again.
const TYPE_CHECK_DELAY: Duration = Duration::from_secs(3);
/// How long the pools of a changed ConfigMap binding stay accepted: longer
/// than the API server takes to reload every policy (about 1 s measured).
const PREVIOUS_GRACE: Duration = Duration::from_secs(10);
/// The longest a read of the API server's `/metrics` may take.
const EVALUATION_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the API server's `/metrics` is read for the evaluation errors
/// of the engine's objects: an error shows within this much, and a reported
/// one clears after [`crate::evaluations::QUIET_READS`] reads without a new one.
const EVALUATION_READ_INTERVAL: Duration = Duration::from_secs(30);

/// Settings of the CEL engine's leader, from the configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CelSettings {
    /// `placement.poolLabel`.
    pub pool_label: String,
    /// `placement.namespaceLabels`, when enabled.
    pub namespace_labels: Option<NamespaceLabels>,
    /// The installer's MutatingWebhookConfiguration, owner of every object
    /// (`webhookSelectors.configurationName`).
    pub owner_name: String,
    /// `webhookSelectors.requestTimeout`, `.retryInitial`, `.retryMax`: the
    /// same API objects' budget as the selectors'.
    pub request_timeout: Duration,
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl From<&Config> for CelSettings {
    fn from(config: &Config) -> Self {
        let placement = &config.placement;
        Self {
            pool_label: placement.pool_label.clone(),
            namespace_labels: placement
                .namespace_labels
                .enabled
                .then(|| placement.namespace_labels.clone()),
            owner_name: config.webhook_selectors.configuration_name.clone(),
            request_timeout: config.webhook_selectors.request_timeout,
            retry_initial: config.webhook_selectors.retry_initial,
            retry_max: config.webhook_selectors.retry_max,
        }
    }
}

/// The `cel-policies` component. With engine `cel` it writes the policies
/// (the compiled placement policy inside) and bindings (server-side apply, field manager `poolkeeper`,
/// only what changed since its last write) at the start of its term and
/// on every change of the policy ConfigMap or a NodePool, and reports
/// type-checking problems of the validating policies and failed writes
/// (`/readyz?verbose` through [`EngineState`], the log). With engine
/// `webhook` it deletes them at the start of its term.
pub struct CelPolicies {
    settings: CelSettings,
    engine: Engine,
    client: Client,
    index: Arc<Index>,
    policy: PolicyCache,
    state: EngineState,
    subscription: Subscription,
    /// What this term wrote, by kind and name: a steady state writes nothing.
    written: BTreeMap<String, Value>,
    /// The resourceVersion of each object (by kind and name) as this term
    /// last read or wrote it (`None`: absent): the precondition of its next
    /// apply, so that an older term's late write is refused. Read once per
    /// term, then kept from the write responses.
    versions: BTreeMap<String, Option<String>>,
    /// The policy last compiled, and the previous pools of the bindings
    /// that changed then, accepted until the instant.
    compiled: Option<BTreeMap<String, String>>,
    previous: Option<(BTreeMap<String, String>, Instant)>,
    texts: PolicyTexts,
    bus: Bus,
    /// The problem last published per policy (`Kind/name`): each new or
    /// changed one is published once.
    published: BTreeMap<String, String>,
    /// The leader's term every write asks first; `None` without leader
    /// election.
    term: Option<LeaderTerm>,
    /// Why the objects are not as they should be (a failed write, an
    /// invalid placement policy, type-checking warnings).
    write_problem: Option<String>,
    /// The evaluation errors the API server counted this term.
    errors: ErrorTracker,
    /// Why the API server's `/metrics` could not be read, until it can.
    read_problem: Option<String>,
    read_interval: Duration,
    /// The UIDs of the objects written or read, by `Kind/name`, for the
    /// Events about them.
    uids: BTreeMap<String, String>,
}

impl std::fmt::Debug for CelPolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CelPolicies")
            .field("settings", &self.settings)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

/// Why an update failed; retried with backoff.
#[derive(Debug, thiserror::Error)]
enum CelError {
    #[error("{action} {kind} {name}: {source}")]
    Api {
        action: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{action} {kind} {name}: no answer within {}", humantime::format_duration(*timeout))]
    Timeout {
        action: &'static str,
        kind: &'static str,
        name: String,
        timeout: Duration,
    },
    #[error(transparent)]
    Embedded(#[from] crate::EmbeddedPolicyError),
    #[error("not written: {0}")]
    NotLeader(#[from] NotLeader),
    /// The object carries a newer leader's epoch: nothing more is written.
    #[error("{kind} {name}: {source}")]
    Deposed {
        kind: &'static str,
        name: String,
        #[source]
        source: Deposed,
    },
}

impl CelPolicies {
    pub const NAME: &'static str = "cel-policies";

    /// Subscribes to `bus` right away: build it in the leader-gated
    /// factory, with the engine the resolver decided.
    pub fn new(
        settings: CelSettings,
        engine: Engine,
        bus: &Bus,
        client: Client,
        index: Arc<Index>,
        policy: PolicyCache,
        state: EngineState,
    ) -> Self {
        Self {
            settings,
            engine,
            client,
            index,
            policy,
            state,
            subscription: bus.subscribe(Self::NAME),
            written: BTreeMap::new(),
            versions: BTreeMap::new(),
            compiled: None,
            previous: None,
            texts: PolicyTexts::EMBEDDED,
            bus: bus.clone(),
            published: BTreeMap::new(),
            term: None,
            write_problem: None,
            errors: ErrorTracker::default(),
            read_problem: None,
            read_interval: EVALUATION_READ_INTERVAL,
            uids: BTreeMap::new(),
        }
    }

    /// Every write first asks `term` for leave, bounded by what is left of
    /// it, and is fenced by its epoch: each object carries the epoch of the
    /// term that last applied it, and each apply or delete the resourceVersion
    /// this term last saw (`poolkeeper_kube::fencing`).
    pub fn guarded_by(mut self, term: LeaderTerm) -> Self {
        self.term = Some(term);
        self
    }

    /// The term's epoch (`None` without leader election) and the request
    /// timeout of a write, once the term allows one.
    fn write_permit(&self) -> Result<(Option<i64>, Duration), CelError> {
        let timeout = self.settings.request_timeout;
        match &self.term {
            Some(term) => {
                let permit = term.permit()?;
                Ok((Some(permit.epoch), permit.bound(timeout)))
            }
            None => Ok((None, timeout)),
        }
    }

    /// Writes these policies instead of the embedded ones: how a test sees
    /// a broken expression surface.
    #[must_use]
    pub fn with_texts(mut self, texts: PolicyTexts) -> Self {
        self.texts = texts;
        self
    }

    /// Reads the API server's evaluation errors every `interval` instead of
    /// every 30 s: how a test sees them surface without waiting.
    #[must_use]
    pub fn reading_errors_every(mut self, interval: Duration) -> Self {
        self.read_interval = interval;
        self
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let mut backoff = Backoff::new(self.settings.retry_initial, self.settings.retry_max);
        let mut due = Some(Instant::now());
        let mut reading = (self.engine == Engine::Cel).then(Instant::now);
        loop {
            if let Some(at) = due
                && Instant::now() >= at
            {
                let _busy = ctx.busy("keeping the CEL engine's admission objects");
                let result = tokio::select! {
                    biased;
                    () = ctx.cancelled() => break,
                    result = self.update() => result,
                };
                due = self.settle(result, &mut backoff);
                continue;
            }
            if let Some(at) = reading
                && Instant::now() >= at
            {
                tokio::select! {
                    biased;
                    () = ctx.cancelled() => break,
                    () = self.read_evaluation_errors() => {}
                }
                reading = Some(Instant::now() + self.read_interval);
                continue;
            }
            tokio::select! {
                biased;
                () = ctx.cancelled() => break,
                delivery = self.subscription.next_delivery() => {
                    if self.engine == Engine::Cel && self.concerns_params(&delivery) {
                        due = Some(due.map_or_else(Instant::now, |at| at.min(Instant::now())));
                    }
                }
                () = sleep_until(due) => {}
                () = sleep_until(reading) => {}
            }
        }
        Ok(())
    }

    /// When the next update is due after `result`.
    fn settle(
        &mut self,
        result: Result<Option<Duration>, CelError>,
        backoff: &mut Backoff,
    ) -> Option<Instant> {
        match result {
            Ok(recheck) => {
                backoff.reset();
                recheck.map(|delay| Instant::now() + delay)
            }
            Err(CelError::Deposed { kind, name, source }) => {
                let problem = format!("{kind} {name}: {source}; not writing");
                tracing::warn!(%problem, "the CEL engine's admission objects belong to a newer leader");
                self.write_problem = Some(problem);
                self.report();
                None
            }
            Err(error) => {
                let delay = backoff.next_delay();
                let problem = error_chain(&error);
                tracing::warn!(
                    error = %problem,
                    retry_in = %humantime::format_duration(delay),
                    engine = %self.engine,
                    "the CEL engine's admission objects are not in step"
                );
                if let CelError::Api {
                    action: "applying",
                    kind: kind @ ("MutatingAdmissionPolicy" | "ValidatingAdmissionPolicy"),
                    name,
                    source,
                } = &error
                {
                    self.publish_problem(kind, name, "", &source.to_string());
                }
                self.write_problem = Some(problem);
                self.report();
                // A failed write may have left an object half-way: read and
                // write all again.
                self.written.clear();
                self.versions.clear();
                Some(Instant::now() + delay)
            }
        }
    }

    /// The policy ConfigMap or a NodePool changed, or possibly (a lag).
    fn concerns_params(&self, delivery: &Delivery) -> bool {
        match delivery {
            Delivery::Lagged(_) => true,
            Delivery::Event(envelope) => match &envelope.event {
                Event::ResourceChanged { kind, key, .. } => {
                    *kind == ResourceKind::NodePool
                        || (*kind == ResourceKind::ConfigMap && self.policy.reads(*kind, key))
                }
                _ => false,
            },
        }
    }

    /// One update; `Ok(Some(delay))` asks for another after `delay` (to
    /// read the type checking of policies just written).
    async fn update(&mut self) -> Result<Option<Duration>, CelError> {
        match self.engine {
            Engine::Webhook => {
                self.delete_all().await?;
                Ok(None)
            }
            Engine::Cel => self.apply_all().await,
        }
    }

    /// The objects for the current policy; `None` while the policy is
    /// invalid (the last compiled policy stays in force).
    fn objects(&mut self, owner: Option<OwnerReference>) -> Result<Option<Objects>, CelError> {
        let view = self.index.placement();
        let loaded = self.policy.get(&view);
        let policy = match loaded.as_ref() {
            Ok(policy) => policy,
            Err(error) => {
                self.write_problem = Some(format!(
                    "the placement policy is invalid, the last compiled one stays in force: {error}"
                ));
                self.report();
                return Ok(None);
            }
        };
        let compiled = compile(
            policy,
            self.policy.excluded_namespaces(),
            view.node_pools(),
            &self.settings.pool_label,
            self.settings.namespace_labels.as_ref(),
        );
        drop(view);
        let data = self.with_previous(compiled);
        let placement = Placement {
            texts: self.texts,
            excluded: self.policy.excluded_namespaces().iter().cloned().collect(),
            owner,
        };
        Ok(Some(placement.objects(&data)?))
    }

    /// `compiled` with the previous pools of the bindings that changed
    /// since the last compilation, until [`PREVIOUS_GRACE`] has passed.
    fn with_previous(&mut self, compiled: BTreeMap<String, String>) -> BTreeMap<String, String> {
        let now = Instant::now();
        if let Some(before) = &self.compiled {
            let changed = previous_bindings(before, &compiled);
            if !changed.is_empty() {
                let mut previous = match self.previous.take() {
                    Some((previous, until)) if until > now => previous,
                    _ => BTreeMap::new(),
                };
                previous.extend(changed);
                self.previous = Some((previous, now + PREVIOUS_GRACE));
            }
        }
        self.compiled = Some(compiled.clone());
        let mut data = compiled;
        match &self.previous {
            Some((previous, until)) if *until > now => data.extend(previous.clone()),
            _ => self.previous = None,
        }
        data
    }

    /// When the previous pools must be dropped, if any are in force.
    fn previous_expiry(&self) -> Option<Duration> {
        self.previous
            .as_ref()
            .map(|(_, until)| until.saturating_duration_since(Instant::now()))
    }

    async fn apply_all(&mut self) -> Result<Option<Duration>, CelError> {
        let owner = self.owner().await?;
        if let Some(owner) = &owner {
            self.uids.insert(
                format!("MutatingWebhookConfiguration/{}", owner.name),
                owner.uid.clone(),
            );
        }
        let Some(objects) = self.objects(owner)? else {
            return Ok(None);
        };
        // Validating first: with the previous pools they accept what the
        // mutating policy places before and after its own reload.
        let mut wrote_policies = false;
        for policy in &objects.validating {
            wrote_policies |= self.apply(self.all(), policy).await?;
        }
        wrote_policies |= self.apply(self.all(), &objects.mutating).await?;
        self.apply(self.all(), &objects.mutating_binding).await?;
        for binding in &objects.validating_bindings {
            self.apply(self.all(), binding).await?;
        }
        let flagged = self.type_checking().await?;
        self.published.retain(|key, _| {
            flagged
                .iter()
                .any(|(name, _, _)| *key == format!("ValidatingAdmissionPolicy/{name}"))
        });
        let mut problems = Vec::new();
        for (name, uid, message) in &flagged {
            self.publish_problem("ValidatingAdmissionPolicy", name, uid, message);
            problems.push(format!("ValidatingAdmissionPolicy {name} {message}"));
        }
        self.write_problem = (!problems.is_empty()).then(|| problems.join("; "));
        self.report();
        if !problems.is_empty() {
            tracing::error!(
                ?problems,
                "the CEL engine's validating policies do not type-check"
            );
        }
        let recheck = wrote_policies.then_some(TYPE_CHECK_DELAY);
        Ok(match (recheck, self.previous_expiry()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    fn all<K: Resource<DynamicType = ()>>(&self) -> Api<K> {
        Api::all(self.client.clone())
    }

    /// Server-side applies `object` unless this term already wrote it as
    /// it is; whether it wrote. Under a term, the object carries the term's
    /// epoch and the resourceVersion this term knows as a precondition; one
    /// refused by it is read again and, unless a newer term owns it, applied
    /// once more.
    async fn apply<K>(&mut self, api: Api<K>, object: &K) -> Result<bool, CelError>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let key = format!("{}/{name}", K::kind(&()));
        let value = serde_json::to_value(object).unwrap_or(Value::Null);
        if self.written.get(&key) == Some(&value) {
            return Ok(false);
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut retried = false;
        let written = loop {
            let (epoch, timeout) = self.write_permit()?;
            let mut fenced = object.clone();
            if let Some(epoch) = epoch {
                let version = self.version_of(&api, &key, &name, epoch).await?;
                stamp(fenced.meta_mut(), epoch, version);
            }
            let patch = Patch::Apply(&fenced);
            let request = api.patch(&name, &params, &patch);
            match self
                .timed_within(timeout, "applying", kind_name::<K>(), &name, request)
                .await
            {
                Err(CelError::Api { source, .. }) if refused(&source) && !retried => {
                    self.versions.remove(&key);
                    retried = true;
                }
                result => break result?,
            }
        };
        if let Some(uid) = written.meta().uid.clone() {
            self.uids.insert(key.clone(), uid);
        }
        tracing::info!(kind = kind_name::<K>(), %name, "CEL engine object written");
        self.versions
            .insert(key.clone(), written.meta().resource_version.clone());
        self.written.insert(key, value);
        Ok(true)
    }

    /// The resourceVersion of `name` this term knows, read once per term;
    /// [`CelError::Deposed`] when it carries a newer term's epoch.
    async fn version_of<K>(
        &mut self,
        api: &Api<K>,
        key: &str,
        name: &str,
        epoch: i64,
    ) -> Result<Option<String>, CelError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    {
        if let Some(version) = self.versions.get(key) {
            return Ok(version.clone());
        }
        let stored = self
            .timed("reading", kind_name::<K>(), name, api.get_opt(name))
            .await?;
        let version = fenced_version(stored.as_ref(), name, epoch)?;
        self.versions.insert(key.to_owned(), version.clone());
        Ok(version)
    }

    /// The installer's MutatingWebhookConfiguration as an owner; `None`
    /// when it does not exist (the objects are then not collected on
    /// uninstall, which is logged).
    async fn owner(&self) -> Result<Option<OwnerReference>, CelError> {
        let name = &self.settings.owner_name;
        let api = self.all::<MutatingWebhookConfiguration>();
        let stored = self
            .timed(
                "reading",
                "MutatingWebhookConfiguration",
                name,
                api.get_opt(name),
            )
            .await?;
        let Some(uid) = stored.and_then(|c| c.metadata.uid) else {
            tracing::warn!(
                configuration = %name,
                "MutatingWebhookConfiguration missing: the CEL engine's objects have no owner"
            );
            return Ok(None);
        };
        Ok(Some(OwnerReference {
            api_version: "admissionregistration.k8s.io/v1".to_owned(),
            kind: "MutatingWebhookConfiguration".to_owned(),
            name: name.clone(),
            uid,
            ..OwnerReference::default()
        }))
    }

    /// Shows what is wrong now on `/readyz?verbose` (through the engine's
    /// state): the objects' write or type checking, the evaluation errors,
    /// a failed read of them.
    fn report(&self) {
        let problems: Vec<&str> = [
            self.write_problem.as_deref(),
            self.errors.problem(),
            self.read_problem.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.state
            .report_problem((!problems.is_empty()).then(|| problems.join("; ")));
    }

    /// Reads the API server's `/metrics` and reports the evaluation errors
    /// it counted for the engine's objects since the last read: logged,
    /// counted in `poolkeeper_cel_policy_errors_total`, published as
    /// `AdmissionPolicyProblem` (a Warning Event on the object) and shown
    /// on `/readyz?verbose`. A failed read is logged and shown, never fatal.
    async fn read_evaluation_errors(&mut self) {
        match self.apiserver_metrics().await {
            Err(error) => {
                let problem = format!(
                    "the policies' evaluation errors are not known: {}",
                    error_chain(&error)
                );
                if self.read_problem.as_ref() != Some(&problem) {
                    tracing::warn!(
                        error = %problem,
                        retry_in = %humantime::format_duration(self.read_interval),
                        "the API server's /metrics cannot be read"
                    );
                }
                self.read_problem = Some(problem);
            }
            Ok(text) => {
                if self.read_problem.take().is_some() {
                    tracing::info!("the API server's /metrics is read again");
                }
                let watched = Watched {
                    validating_policies: validating_names(),
                    configuration: self.settings.owner_name.clone(),
                };
                let counts = evaluation_errors(&text, &watched);
                for (source, count) in self.errors.observe(server_of(&text), counts) {
                    let message = describe(&source, count);
                    tracing::error!(
                        kind = source.kind,
                        name = %source.name,
                        error_type = %source.error_type,
                        count,
                        "{message}: an expression fails while the API server evaluates it"
                    );
                    self.state.count_evaluation_errors(
                        source.kind,
                        &source.name,
                        &source.error_type,
                        count,
                    );
                    let uid = self
                        .uids
                        .get(&format!("{}/{}", source.kind, source.name))
                        .cloned()
                        .unwrap_or_default();
                    self.bus.publish(Event::AdmissionPolicyProblem {
                        kind: source.kind.to_owned(),
                        name: source.name.clone(),
                        uid,
                        message,
                    });
                }
            }
        }
        self.report();
    }

    /// The API server's `/metrics` text (the one API server the request
    /// reaches).
    async fn apiserver_metrics(&self) -> Result<String, CelError> {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|error| CelError::Api {
                action: "reading",
                kind: "the API server's",
                name: "/metrics".to_owned(),
                source: kube::Error::HttpError(error),
            })?;
        // A slow read must not hold back a binding change for long: the
        // loop writes the policies only between reads.
        let timeout = self.settings.request_timeout.min(EVALUATION_READ_TIMEOUT);
        self.timed_within(
            timeout,
            "reading",
            "the API server's",
            "/metrics",
            self.client.request_text(request),
        )
        .await
    }

    /// Publishes `AdmissionPolicyProblem` for the policy `kind/name` unless
    /// the same problem was published last.
    fn publish_problem(&mut self, kind: &str, name: &str, uid: &str, message: &str) {
        let key = format!("{kind}/{name}");
        if self.published.get(&key).map(String::as_str) == Some(message) {
            return;
        }
        self.bus.publish(Event::AdmissionPolicyProblem {
            kind: kind.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            message: message.to_owned(),
        });
        self.published.insert(key, message.to_owned());
    }

    /// The type-checking warnings the controller manager wrote into the
    /// validating policies' status: (policy, its UID, the warnings, one
    /// line per expression) for each policy with any.
    async fn type_checking(&self) -> Result<Vec<(String, String, String)>, CelError> {
        let api = self.all::<ValidatingAdmissionPolicy>();
        let mut problems = Vec::new();
        for name in validating_names() {
            let stored = self
                .timed(
                    "reading",
                    "ValidatingAdmissionPolicy",
                    &name,
                    api.get_opt(&name),
                )
                .await?;
            let Some(policy) = stored else { continue };
            let uid = policy.metadata.uid.clone().unwrap_or_default();
            let warnings: Vec<String> = policy
                .status
                .and_then(|status| status.type_checking)
                .and_then(|checking| checking.expression_warnings)
                .unwrap_or_default()
                .into_iter()
                .map(|warning| format!("{}: {}", warning.field_ref, warning.warning))
                .collect();
            if !warnings.is_empty() {
                problems.push((name, uid, warnings.join("; ")));
            }
        }
        Ok(problems)
    }

    /// Removes every object of the engine, bindings first; absent ones
    /// count as removed.
    async fn delete_all(&self) -> Result<(), CelError> {
        for name in validating_names() {
            self.delete(self.all::<ValidatingAdmissionPolicyBinding>(), &name)
                .await?;
        }
        self.delete(
            self.all::<MutatingAdmissionPolicyBinding>(),
            MUTATING_POLICY,
        )
        .await?;
        for name in validating_names() {
            self.delete(self.all::<ValidatingAdmissionPolicy>(), &name)
                .await?;
        }
        self.delete(self.all::<MutatingAdmissionPolicy>(), MUTATING_POLICY)
            .await
    }

    /// Deletes `name`; under a term, read first: its resourceVersion is the
    /// precondition, and one carrying a newer term's epoch is left alone.
    async fn delete<K>(&self, api: Api<K>, name: &str) -> Result<(), CelError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let mut retried = false;
        let deleted = loop {
            let (epoch, timeout) = self.write_permit()?;
            let mut params = DeleteParams::default();
            if let Some(epoch) = epoch {
                let stored = self
                    .timed("reading", kind_name::<K>(), name, api.get_opt(name))
                    .await?;
                if stored.is_none() {
                    return Ok(());
                }
                params.preconditions = Some(Preconditions {
                    resource_version: fenced_version(stored.as_ref(), name, epoch)?,
                    uid: None,
                });
            }
            let request = api.delete(name, &params);
            match self
                .timed_within(timeout, "deleting", kind_name::<K>(), name, request)
                .await
            {
                Err(CelError::Api { source, .. }) if refused(&source) && !retried => retried = true,
                result => break result,
            }
        };
        match deleted {
            Ok(_) => {
                tracing::info!(kind = kind_name::<K>(), %name, "CEL engine object removed: the engine is webhook");
                Ok(())
            }
            Err(CelError::Api {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 404 => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn timed<T>(
        &self,
        action: &'static str,
        kind: &'static str,
        name: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, CelError> {
        let timeout = self.settings.request_timeout;
        self.timed_within(timeout, action, kind, name, request)
            .await
    }

    async fn timed_within<T>(
        &self,
        timeout: Duration,
        action: &'static str,
        kind: &'static str,
        name: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, CelError> {
        tokio::time::timeout(timeout, request)
            .await
            .map_err(|_| CelError::Timeout {
                action,
                kind,
                name: name.to_owned(),
                timeout,
            })?
            .map_err(|source| CelError::Api {
                action,
                kind,
                name: name.to_owned(),
                source,
            })
    }
}

/// The precondition of a write by the term `epoch` of `stored` (`None`:
/// absent); [`CelError::Deposed`] when it carries a newer term's epoch.
fn fenced_version<K: Resource<DynamicType = ()>>(
    stored: Option<&K>,
    name: &str,
    epoch: i64,
) -> Result<Option<String>, CelError> {
    let meta = stored.map(Resource::meta);
    version_precondition(
        meta.and_then(|m| m.annotations.as_ref()),
        meta.and_then(|m| m.resource_version.as_deref()),
        epoch,
    )
    .map_err(|source| CelError::Deposed {
        kind: kind_name::<K>(),
        name: name.to_owned(),
        source,
    })
}

fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    // Every kind written here; `Resource::kind` borrows from its argument.
    match K::kind(&()).as_ref() {
        "MutatingAdmissionPolicy" => "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding" => "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy" => "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding" => "ValidatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration" => "MutatingWebhookConfiguration",
        _ => "object",
    }
}

/// The names of the validating policies and of their bindings.
fn validating_names() -> Vec<String> {
    [Mode::Enforce, Mode::Warn, Mode::Dryrun]
        .into_iter()
        .map(validating_policy_name)
        .chain([WARNINGS_POLICY.to_owned()])
        .collect()
}

impl Component for CelPolicies {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Ready the moment it runs: admission never waits for it.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_loop(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_comes_from_the_config() {
        let mut config = Config::default();
        config.placement.pool_label = "example.com/pool".to_owned();
        config.placement.namespace_labels.enabled = false;
        config.webhook_selectors.configuration_name = "pk-blue".to_owned();
        config.webhook_selectors.request_timeout = Duration::from_secs(7);
        let settings = CelSettings::from(&config);
        assert_eq!(
            settings,
            CelSettings {
                pool_label: "example.com/pool".to_owned(),
                namespace_labels: None,
                owner_name: "pk-blue".to_owned(),
                request_timeout: Duration::from_secs(7),
                retry_initial: config.webhook_selectors.retry_initial,
                retry_max: config.webhook_selectors.retry_max,
            }
        );
    }

    #[test]
    fn the_validating_names_are_the_policies_written() {
        let objects = Placement {
            texts: PolicyTexts::EMBEDDED,
            excluded: Vec::new(),
            owner: None,
        }
        .objects(&BTreeMap::new())
        .unwrap();
        let written: Vec<String> = objects
            .validating
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(validating_names(), written);
    }
}
