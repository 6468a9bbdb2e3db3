//! The admin HTTP server: health probes in the format of Kubernetes
//! components, Prometheus/OpenMetrics metrics and the last bus events.
//!
//! | path | answers |
//! |---|---|
//! | `/healthz`, `/livez` | liveness checks of [`Health`]: 200 `ok` or 503 with one line per check |
//! | `/readyz` | readiness checks, likewise |
//! | `/{healthz,livez,readyz}/<check>` | one check; 404 for an unknown name |
//! | `/metrics` | the shared registry as OpenMetrics text |
//! | `/debug/events?limit=N` | the last N bus events as a JSON array |
//! | `/debug/audit` | the last audit round (`AuditCompleted`) as JSON; 404 before the first |
//!
//! `?verbose` lists every check even when all pass.

mod checks;
mod events;
mod metrics;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::BoxFuture;
use poolkeeper_bus::Bus;
use poolkeeper_config::Config;
use poolkeeper_supervisor::{BoxError, CheckResult, Component, Context, Health};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use tokio::net::TcpListener;

use crate::events::EventLog;
pub use crate::metrics::{EventMetrics, METRICS_SUBSCRIBER, ObjectCounts};

/// Content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Name of the bus subscription feeding `/debug/events` (and of its lag
/// metric label).
pub const DEBUG_EVENTS_SUBSCRIBER: &str = "admin-debug-events";

/// `health.listen` and `health.debugEvents` of the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminSettings {
    pub addr: SocketAddr,
    /// How many bus events `/debug/events` keeps.
    pub debug_events: usize,
}

impl From<&Config> for AdminSettings {
    fn from(config: &Config) -> Self {
        Self {
            addr: config.health.listen,
            debug_events: config.health.debug_events,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("admin server cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("admin server on {addr} failed: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The admin server component. Ready as soon as it listens, so probes get
/// answers from the first second.
pub struct AdminServer {
    settings: AdminSettings,
    health: Health,
    registry: Arc<Registry>,
    subscription: poolkeeper_bus::Subscription,
    listener: Option<TcpListener>,
}

impl std::fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminServer")
            .field("settings", &self.settings)
            .field("local_addr", &self.local_addr())
            .finish()
    }
}

impl AdminServer {
    pub const NAME: &'static str = "admin-server";

    /// Subscribes to `bus` for `/debug/events`; call before the bus starts.
    /// `registry` holds every metric by now: `/metrics` renders it.
    pub fn new(settings: AdminSettings, bus: &Bus, health: Health, registry: Registry) -> Self {
        Self {
            settings,
            health,
            registry: Arc::new(registry),
            subscription: bus.subscribe(DEBUG_EVENTS_SUBSCRIBER),
            listener: None,
        }
    }

    /// Binds the listening socket now rather than when the component starts,
    /// so a busy port is reported before anything else runs (and port 0
    /// resolves to the actual port). Returns the bound address.
    pub async fn bind(&mut self) -> Result<SocketAddr, HealthError> {
        if let Some(addr) = self.local_addr() {
            return Ok(addr);
        }
        let listener = bind(self.settings.addr).await?;
        let addr = local_addr(&listener, self.settings.addr)?;
        self.listener = Some(listener);
        Ok(addr)
    }

    /// The bound address, once [`AdminServer::bind`] succeeded.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    async fn serve(self: Box<Self>, ctx: Context) -> Result<(), BoxError> {
        let AdminServer {
            settings,
            health,
            registry,
            subscription,
            listener,
        } = *self;
        let listener = match listener {
            Some(listener) => listener,
            None => bind(settings.addr).await?,
        };
        let addr = local_addr(&listener, settings.addr)?;
        let stop = ctx.cancellation().clone();
        let (events, feeder) = EventLog::new(settings.debug_events, subscription, stop.clone());
        let app = router(AdminState {
            health,
            registry,
            events,
        });
        ctx.mark_ready();
        tracing::info!(%addr, "admin server listening");
        let server = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
        let (served, ()) = tokio::join!(server.into_future(), feeder);
        served.map_err(|source| HealthError::Serve { addr, source })?;
        tracing::info!(%addr, "admin server stopped");
        Ok(())
    }
}

impl Component for AdminServer {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Listening is all there is to it, and whoever reads `/readyz` sees it.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.serve(ctx))
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, HealthError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| HealthError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, HealthError> {
    listener
        .local_addr()
        .map_err(|source| HealthError::Bind { addr, source })
}

#[derive(Clone)]
struct AdminState {
    health: Health,
    registry: Arc<Registry>,
    events: EventLog,
}

/// Which of the shared `Health`'s check lists a probe endpoint reports.
#[derive(Clone, Copy)]
enum Probe {
    Liveness,
    Readiness,
}

impl AdminState {
    fn checks(&self, probe: Probe) -> Vec<CheckResult> {
        match probe {
            Probe::Liveness => self.health.liveness(),
            Probe::Readiness => self.health.readiness(),
        }
    }
}

fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/healthz/{name}", get(healthz_one))
        .route("/livez", get(livez))
        .route("/livez/{name}", get(livez_one))
        .route("/readyz", get(readyz))
        .route("/readyz/{name}", get(readyz_one))
        .route("/metrics", get(metrics))
        .route("/debug/events", get(debug_events))
        .route("/debug/audit", get(debug_audit))
        .with_state(state)
}

type Params = Query<HashMap<String, String>>;

async fn healthz(State(state): State<AdminState>, Query(params): Params) -> Response {
    report_all(&state, Probe::Liveness, "healthz", &params)
}

async fn livez(State(state): State<AdminState>, Query(params): Params) -> Response {
    report_all(&state, Probe::Liveness, "livez", &params)
}

async fn readyz(State(state): State<AdminState>, Query(params): Params) -> Response {
    report_all(&state, Probe::Readiness, "readyz", &params)
}

async fn healthz_one(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    report_one(&state, Probe::Liveness, &name)
}

async fn livez_one(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    report_one(&state, Probe::Liveness, &name)
}

async fn readyz_one(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    report_one(&state, Probe::Readiness, &name)
}

fn report_all(
    state: &AdminState,
    probe: Probe,
    endpoint: &str,
    params: &HashMap<String, String>,
) -> Response {
    let report = checks::all(
        endpoint,
        &state.checks(probe),
        params.contains_key("verbose"),
    );
    text(report.status, report.body)
}

fn report_one(state: &AdminState, probe: Probe, name: &str) -> Response {
    match checks::one(&state.checks(probe), name) {
        Some(report) => text(report.status, report.body),
        None => text(
            StatusCode::NOT_FOUND,
            format!("no check named \"{name}\"\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut body = String::new();
    let encoded = prometheus_client::encoding::text::encode(&mut body, &state.registry);
    match encoded {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
            )],
            body,
        )
            .into_response(),
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {error}\n"),
        ),
    }
}

#[derive(Debug, Deserialize)]
struct EventsParams {
    limit: Option<usize>,
}

async fn debug_events(
    State(state): State<AdminState>,
    Query(params): Query<EventsParams>,
) -> Response {
    axum::Json(state.events.last(params.limit).await).into_response()
}

async fn debug_audit(State(state): State<AdminState>) -> Response {
    match state.events.last_audit().await {
        Some(round) => axum::Json(round.as_ref().clone()).into_response(),
        None => text(
            StatusCode::NOT_FOUND,
            "no audit round has completed on this replica yet (the leader audits every audit.interval)\n".to_owned(),
        ),
    }
}

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
