//! The HTTPS AdmissionReview server, run as a supervisor component.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use futures::FutureExt;
use futures::future::BoxFuture;
use poolkeeper_bus::{Bus, Delivery, Event, ResourceKind, Subscription, WebhookKind};
use poolkeeper_index::Index;
use poolkeeper_placement::{PlacementSettings, Reason};
use poolkeeper_supervisor::{BoxError, Component, Context, Gate};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::WebhookError;
use crate::metrics::{Metrics, RequestResult};
use crate::policy::PolicyCache;
use crate::review::{Reviewed, not_ready_review, review};
use crate::tls::{PemPair, read_pair, server_config};

/// The component's name, also the name of its readiness check.
pub const COMPONENT_NAME: &str = "webhook";

/// Settings of the webhook server (`webhook.*` and `placement.*` in the
/// configuration file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// `webhook.listen`.
    pub listen: SocketAddr,
    /// `webhook.certDir`: holds `tls.crt` and `tls.key`.
    pub cert_dir: PathBuf,
    /// `webhook.mutatePath`.
    pub mutate_path: String,
    /// `webhook.validatePath`.
    pub validate_path: String,
    /// `webhook.maxBodyBytes`: larger requests get HTTP 413.
    pub max_body_bytes: usize,
    /// How often the certificate files are checked for a change.
    pub cert_reload_interval: Duration,
    /// How long in-flight requests may take to finish on shutdown.
    pub shutdown_timeout: Duration,
    /// Pool label and where the placement policy lives.
    pub placement: PlacementSettings,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 9443)),
            cert_dir: PathBuf::from("/tmp/k8s-webhook-server/serving-certs"),
            mutate_path: "/mutate-pods".to_owned(),
            validate_path: "/validate-pods".to_owned(),
            max_body_bytes: 3 * 1024 * 1024,
            cert_reload_interval: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(10),
            placement: PlacementSettings::default(),
        }
    }
}

impl WebhookSettings {
    /// Problems that would make the router unusable, as `field: reason`.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (field, path) in [
            ("mutatePath", &self.mutate_path),
            ("validatePath", &self.validate_path),
        ] {
            if !path.starts_with('/') {
                problems.push(format!("webhook.{field}: {path:?} must start with '/'"));
            }
            let plain = path
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '.' | '_' | '~'));
            if !plain {
                problems.push(format!(
                    "webhook.{field}: {path:?} must be a plain path of letters, digits, '/', '-', '.', '_' and '~'"
                ));
            }
        }
        if self.mutate_path == self.validate_path {
            problems.push(format!(
                "webhook.validatePath: {:?} must differ from webhook.mutatePath",
                self.validate_path
            ));
        }
        if self.max_body_bytes == 0 {
            problems.push("webhook.maxBodyBytes: must be positive".to_owned());
        }
        if self.cert_reload_interval.is_zero() {
            problems.push("webhook certificate reload interval: must be positive".to_owned());
        }
        problems
    }
}

/// Observes a running server: where it listens, which certificate it
/// serves, whether the index is synchronized.
#[derive(Clone, Debug)]
pub struct WebhookHandle {
    addr: watch::Sender<Option<SocketAddr>>,
    certificates: watch::Sender<u64>,
    synchronized: watch::Sender<bool>,
}

impl WebhookHandle {
    fn new() -> Self {
        Self {
            addr: watch::Sender::new(None),
            certificates: watch::Sender::new(0),
            synchronized: watch::Sender::new(false),
        }
    }

    /// The address the server listens on, once it does.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self.addr.borrow()
    }

    /// Waits until the server listens and returns its address.
    pub async fn listening(&self) -> SocketAddr {
        let mut receiver = self.addr.subscribe();
        loop {
            if let Some(addr) = *receiver.borrow_and_update() {
                return addr;
            }
            // The handle owns the sender, so the channel never closes.
            let _ = receiver.changed().await;
        }
    }

    /// How many certificates have been loaded (1 after the first load, +1
    /// per reload).
    pub fn certificate_generation(&self) -> u64 {
        *self.certificates.borrow()
    }

    /// Waits until at least `generation` certificates have been loaded.
    pub async fn wait_certificate_generation(&self, generation: u64) {
        let mut receiver = self.certificates.subscribe();
        let _ = receiver.wait_for(|loaded| *loaded >= generation).await;
    }

    /// Whether `IndexSynchronized` has been seen.
    pub fn index_synchronized(&self) -> bool {
        *self.synchronized.borrow()
    }

    /// Waits until `IndexSynchronized` has been seen.
    pub async fn wait_index_synchronized(&self) {
        let mut receiver = self.synchronized.subscribe();
        let _ = receiver.wait_for(|synchronized| *synchronized).await;
    }
}

struct AppState {
    index: Arc<Index>,
    placement: PlacementSettings,
    policy: PolicyCache,
    metrics: Metrics,
    bus: Bus,
    handle: WebhookHandle,
}

impl AppState {
    fn handle_request(
        &self,
        webhook: WebhookKind,
        body: Result<Bytes, BytesRejection>,
    ) -> Response {
        let started = Instant::now();
        let name = webhook.as_str();
        let body = match body {
            Ok(body) => body,
            Err(rejection) => {
                let status = rejection.status();
                tracing::warn!(webhook = name, %status, error = %rejection.body_text(), "admission request rejected");
                self.finish_error(webhook, "unreadable_body", started);
                return rejection.into_response();
            }
        };
        let outcome = if self.handle.index_synchronized() {
            let view = self.index.placement();
            let policy = self.policy.get(&view);
            review(
                webhook,
                &body,
                &view,
                policy.as_ref().as_ref(),
                &self.placement,
            )
        } else {
            not_ready_review(&body)
        };
        match outcome {
            Ok(reviewed) => {
                self.finish(webhook, &reviewed, started);
                axum::Json(reviewed.response).into_response()
            }
            Err(error) => {
                tracing::warn!(webhook = name, %error, "malformed admission request");
                self.finish_error(webhook, error.reason(), started);
                (error.status_code(), error.to_string()).into_response()
            }
        }
    }

    fn finish(&self, webhook: WebhookKind, reviewed: &Reviewed, started: Instant) {
        let decision = &reviewed.decision;
        let patched = decision.is_patched();
        let result = match (decision.allowed, patched) {
            (false, _) => RequestResult::Denied,
            (true, true) => RequestResult::Patched,
            (true, false) => RequestResult::Allowed,
        };
        self.metrics
            .request(webhook.as_str(), result, started.elapsed().as_secs_f64());
        self.bus.publish(Event::AdmissionDecided {
            webhook,
            allowed: decision.allowed,
            patched,
            reason: decision.reason.as_str().to_owned(),
        });
        let pool = decision.pool.as_deref().unwrap_or_default();
        if decision.allowed {
            tracing::debug!(
                webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject, pool,
                reason = decision.reason.as_str(), patched, warnings = ?decision.warnings,
                "admission allowed"
            );
        } else if decision.reason == Reason::NotReady {
            tracing::debug!(webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject, "admission denied: not ready");
        } else {
            tracing::info!(
                webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject, pool,
                reason = decision.reason.as_str(),
                message = decision.message.as_deref().unwrap_or_default(),
                "admission denied"
            );
        }
    }

    fn finish_error(&self, webhook: WebhookKind, reason: &'static str, started: Instant) {
        self.metrics.request(
            webhook.as_str(),
            RequestResult::Error,
            started.elapsed().as_secs_f64(),
        );
        self.bus.publish(Event::AdmissionDecided {
            webhook,
            allowed: false,
            patched: false,
            reason: reason.to_owned(),
        });
    }
}

fn build_router(settings: &WebhookSettings, state: &Arc<AppState>) -> Router {
    Router::new()
        .route(&settings.mutate_path, post(mutate_handler))
        .route(&settings.validate_path, post(validate_handler))
        .layer(DefaultBodyLimit::max(settings.max_body_bytes))
        .with_state(Arc::clone(state))
}

async fn mutate_handler(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.handle_request(WebhookKind::Mutate, body)
}

async fn validate_handler(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.handle_request(WebhookKind::Validate, body)
}

/// The HTTPS admission webhook server.
///
/// Subscribes to the bus when constructed: requests are denied (status 503
/// inside the AdmissionReview) until `IndexSynchronized` arrives. Serves
/// only once a certificate is loaded; the readiness gate passes then.
pub struct WebhookServer {
    settings: WebhookSettings,
    state: Arc<AppState>,
    subscription: Subscription,
    gate: Gate,
}

impl WebhookServer {
    /// `gate` is the readiness check this server reports to (conventionally
    /// named [`COMPONENT_NAME`]).
    pub fn new(
        settings: WebhookSettings,
        index: Arc<Index>,
        bus: &Bus,
        gate: Gate,
    ) -> Result<Self, WebhookError> {
        let problems = settings.problems();
        if !problems.is_empty() {
            return Err(WebhookError::Settings(problems.join("; ")));
        }
        let metrics = Metrics::default();
        let state = Arc::new(AppState {
            index,
            placement: settings.placement.clone(),
            policy: PolicyCache::new(settings.placement.policy.clone(), metrics.clone()),
            metrics,
            bus: bus.clone(),
            handle: WebhookHandle::new(),
        });
        gate.fail("webhook server not started");
        Ok(Self {
            settings,
            state,
            subscription: bus.subscribe(COMPONENT_NAME),
            gate,
        })
    }

    /// Registers the admission, certificate and policy metrics.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.state.metrics.register(registry);
    }

    pub fn handle(&self) -> WebhookHandle {
        self.state.handle.clone()
    }

    /// The request router (plain HTTP; the server wraps it in TLS).
    pub fn router(&self) -> Router {
        build_router(&self.settings, &self.state)
    }

    async fn serve(self, ctx: Context) -> Result<(), BoxError> {
        let WebhookServer {
            settings,
            state,
            subscription,
            gate,
        } = self;
        let cancel = ctx.cancellation().child_token();
        let tracker = tokio::spawn(track_index(
            subscription,
            Arc::clone(&state),
            cancel.clone(),
        ));
        let result = serve_tls(&settings, &state, &gate, &ctx).await;
        cancel.cancel();
        let _ = tracker.await;
        result
    }
}

impl Component for WebhookServer {
    fn name(&self) -> &'static str {
        COMPONENT_NAME
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        (*self).serve(ctx).boxed()
    }
}

/// Follows the bus: `IndexSynchronized` opens the gate for decisions;
/// ConfigMap changes re-read the policy right away, so a broken policy is
/// logged (and shows in the metrics) when it is written, not at the next Pod.
async fn track_index(
    mut subscription: Subscription,
    state: Arc<AppState>,
    cancel: CancellationToken,
) {
    loop {
        let delivery = tokio::select! {
            _ = cancel.cancelled() => return,
            delivery = subscription.recv() => delivery,
        };
        let refresh = match delivery {
            None => return,
            Some(Delivery::Event(envelope)) => match &envelope.event {
                Event::IndexSynchronized => {
                    if !state.handle.synchronized.send_replace(true) {
                        tracing::info!("index synchronized: admission decisions enabled");
                    }
                    true
                }
                Event::ResourceChanged {
                    kind: ResourceKind::ConfigMap,
                    ..
                } => state.handle.index_synchronized(),
                _ => false,
            },
            Some(Delivery::Lagged(missed)) => {
                tracing::debug!(missed, "webhook fell behind the bus");
                state.handle.index_synchronized()
            }
        };
        if refresh {
            state.policy.get(&state.index.placement());
        }
    }
}

async fn serve_tls(
    settings: &WebhookSettings,
    state: &Arc<AppState>,
    gate: &Gate,
    ctx: &Context,
) -> Result<(), BoxError> {
    let dir = settings.cert_dir.as_path();

    // Wait for a usable certificate: the Secret may not be populated yet.
    let mut waiting_reason = String::new();
    let (mut loaded, config) = loop {
        let attempt = match read_pair(dir).await {
            Ok(pair) => server_config(dir, &pair).map(|config| (pair, config)),
            Err(error) => Err(error),
        };
        match attempt {
            Ok(found) => break found,
            Err(error) => {
                let reason = format!("waiting for a serving certificate: {error}");
                if reason != waiting_reason {
                    tracing::warn!(%error, "webhook certificate not available yet");
                    gate.fail(reason.clone());
                    waiting_reason = reason;
                }
            }
        }
        tokio::select! {
            _ = ctx.cancelled() => return Ok(()),
            _ = tokio::time::sleep(settings.cert_reload_interval) => {}
        }
    };
    let tls = RustlsConfig::from_config(config);
    state.metrics.certificate_reload(true);
    state.handle.certificates.send_modify(|g| *g += 1);

    let listener =
        std::net::TcpListener::bind(settings.listen).map_err(|source| WebhookError::Listen {
            addr: settings.listen,
            source,
        })?;
    let addr = listener
        .local_addr()
        .map_err(|source| WebhookError::Listen {
            addr: settings.listen,
            source,
        })?;
    // Small AdmissionReview responses must not wait for the client's delayed
    // ACK (Nagle): without TCP_NODELAY some requests stall for ~40 ms.
    let server = axum_server::from_tcp_rustls(listener, tls.clone())
        .map_err(|source| WebhookError::Listen {
            addr: settings.listen,
            source,
        })?
        .map(|acceptor| acceptor.acceptor(axum_server::accept::NoDelayAcceptor::new()));
    let shutdown = axum_server::Handle::new();
    let router = build_router(settings, state);
    let mut serving = tokio::spawn(
        server
            .handle(shutdown.clone())
            .serve(router.into_make_service()),
    );

    state.handle.addr.send_replace(Some(addr));
    gate.pass();
    ctx.mark_ready();
    tracing::info!(%addr, mutate = %settings.mutate_path, validate = %settings.validate_path, "webhook server listening");

    let mut failed_pair: Option<PemPair> = None;
    let mut ticker = tokio::time::interval(settings.cert_reload_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.reset();
    let outcome = loop {
        tokio::select! {
            _ = ctx.cancelled() => break Ok(()),
            ended = &mut serving => {
                let reason = match ended {
                    Ok(Ok(())) => "the server ended".to_owned(),
                    Ok(Err(error)) => error.to_string(),
                    Err(error) => error.to_string(),
                };
                break Err(WebhookError::Server(reason));
            }
            _ = ticker.tick() => {
                let _busy = ctx.busy("checking the serving certificate");
                reload_if_changed(dir, &tls, &mut loaded, &mut failed_pair, state).await;
            }
        }
    };

    match &outcome {
        Ok(()) => gate.fail("shutting down"),
        Err(error) => gate.fail(error.to_string()),
    }
    if outcome.is_ok() {
        shutdown.graceful_shutdown(Some(settings.shutdown_timeout));
        match serving.await {
            Ok(Ok(())) => tracing::info!("webhook server stopped"),
            Ok(Err(error)) => tracing::warn!(%error, "webhook server stopped with an error"),
            Err(error) => tracing::warn!(%error, "webhook server task failed"),
        }
    }
    outcome.map_err(Into::into)
}

/// Swaps in the certificate on disk when it changed and is usable; existing
/// connections keep the one they were established with.
async fn reload_if_changed(
    dir: &std::path::Path,
    tls: &RustlsConfig,
    loaded: &mut PemPair,
    failed: &mut Option<PemPair>,
    state: &AppState,
) {
    let pair = match read_pair(dir).await {
        Ok(pair) => pair,
        Err(error) => {
            tracing::warn!(%error, "cannot read the serving certificate; keeping the current one");
            return;
        }
    };
    if pair == *loaded || failed.as_ref() == Some(&pair) {
        return;
    }
    match server_config(dir, &pair) {
        Ok(config) => {
            tls.reload_from_config(config);
            *loaded = pair;
            *failed = None;
            state.metrics.certificate_reload(true);
            state.handle.certificates.send_modify(|g| *g += 1);
            tracing::info!(dir = %dir.display(), "serving certificate reloaded");
        }
        Err(error) => {
            // Often a half-written rotation; the next tick tries again.
            tracing::warn!(%error, "new serving certificate is not usable; keeping the current one");
            state.metrics.certificate_reload(false);
            *failed = Some(pair);
        }
    }
}

#[cfg(test)]
impl WebhookServer {
    /// The router with bus tracking running, as `run` has it, without TLS.
    pub(crate) fn start_without_tls(self) -> (Router, WebhookHandle, CancellationToken) {
        let router = self.router();
        let handle = self.handle();
        let cancel = CancellationToken::new();
        tokio::spawn(track_index(self.subscription, self.state, cancel.clone()));
        (router, handle, cancel)
    }

    pub(crate) fn metrics(&self) -> Metrics {
        self.state.metrics.clone()
    }
}
