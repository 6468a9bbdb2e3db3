//! The admission service, in the order a request meets it: routed by path,
//! its body read within the size and time limits, decided over the index,
//! answered, and published as `AdmissionDecided`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Bytes, Incoming};
use hyper::service::Service;
use poolkeeper_bus::{AdmissionResult, Bus, Event, Mode, WebhookKind};
use poolkeeper_index::Index;
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::BoxError;
use tokio::time::Instant;

use crate::activity::ConnectionActivity;
use crate::error::WebhookError;
use crate::review::{Reviewed, review};
use crate::settings::WebhookSettings;

pub(crate) type ResponseBody = Full<Bytes>;

/// POST `mutate_path` and `validate_path`, decided over the index with the
/// placement policy read from it; anything else is 404 or 405.
///
/// The paths are compared literally: the configuration admits only plain
/// paths (no `{capture}`, no `*wildcard`, no query).
#[derive(Debug)]
pub(crate) struct AdmissionService {
    mutate_path: String,
    validate_path: String,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    index: Arc<Index>,
    policy: PolicyCache,
    bus: Bus,
}

impl AdmissionService {
    pub(crate) fn new(
        settings: &WebhookSettings,
        index: Arc<Index>,
        policy: PolicyCache,
        bus: Bus,
    ) -> Self {
        Self {
            mutate_path: settings.mutate_path.clone(),
            validate_path: settings.validate_path.clone(),
            max_body_bytes: settings.max_body_bytes,
            body_read_timeout: settings.body_read_timeout,
            index,
            policy,
            bus,
        }
    }

    /// The service of one connection: every request counted in flight on
    /// the connection's [`ConnectionActivity`] while it runs.
    pub(crate) fn for_connection(
        self: &Arc<Self>,
        activity: Arc<ConnectionActivity>,
    ) -> impl Service<
        Request<Incoming>,
        Response = Response<ResponseBody>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<ResponseBody>, Infallible>> + Send + 'static,
    > + Clone
    + Send
    + 'static {
        let admission = Arc::clone(self);
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let in_flight = activity.request_started();
            let admission = Arc::clone(&admission);
            async move {
                let response = admission.respond(request).await;
                drop(in_flight);
                Ok::<_, Infallible>(response)
            }
        })
    }

    /// The answer to `request`: routed, its body read, decided.
    pub(crate) async fn respond<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let Some(webhook) = self.route(request.uri().path()) else {
            return empty(StatusCode::NOT_FOUND);
        };
        if request.method() != Method::POST {
            let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            return response;
        }
        let started = Instant::now();
        let http1 = request.version() < Version::HTTP_2;
        match read_body(request, self.max_body_bytes, self.body_read_timeout).await {
            Ok(body) => self.decide(webhook, &body, started),
            Err(error) => {
                let mut response = self.refuse(webhook, &error, started);
                // The rest of the body was not read: the connection cannot
                // carry another HTTP/1.1 request.
                if http1 {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                response
            }
        }
    }

    fn route(&self, path: &str) -> Option<WebhookKind> {
        if path == self.mutate_path {
            Some(WebhookKind::Mutate)
        } else if path == self.validate_path {
            Some(WebhookKind::Validate)
        } else {
            None
        }
    }

    /// Decides the AdmissionReview in `body` and answers it; a body that is
    /// not one is answered with its HTTP error.
    fn decide(
        &self,
        webhook: WebhookKind,
        body: &[u8],
        started: Instant,
    ) -> Response<ResponseBody> {
        let view = self.index.placement();
        let policy = self.policy.get(&view);
        let answered = review(webhook, body, &view, policy.as_ref().as_ref())
            .and_then(|reviewed| Ok((reviewed.to_bytes()?, reviewed)));
        drop(view);
        match answered {
            Ok((bytes, reviewed)) => {
                self.publish(
                    webhook,
                    reviewed.result(),
                    reviewed.decision.mode,
                    reviewed.decision.reason.as_str(),
                    started,
                );
                self.publish_exceptions(webhook, &reviewed);
                log_decision(webhook, &reviewed);
                let mut response = Response::new(Full::new(Bytes::from(bytes)));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(error) => self.refuse(webhook, &error, started),
        }
    }

    /// Answers a request that is not a usable AdmissionReview with the
    /// HTTP error `error` calls for, and reports it.
    fn refuse(
        &self,
        webhook: WebhookKind,
        error: &WebhookError,
        started: Instant,
    ) -> Response<ResponseBody> {
        tracing::warn!(webhook = webhook.as_str(), %error, "malformed admission request");
        self.publish(
            webhook,
            AdmissionResult::Invalid,
            Mode::Enforce,
            error.reason(),
            started,
        );
        let mut response = Response::new(Full::new(Bytes::from(error.to_string())));
        *response.status_mut() = error.status_code();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }

    fn publish(
        &self,
        webhook: WebhookKind,
        result: AdmissionResult,
        mode: Mode,
        reason: &'static str,
        started: Instant,
    ) {
        self.bus.publish(Event::AdmissionDecided {
            webhook,
            result,
            mode,
            reason,
            duration: started.elapsed(),
        });
    }

    /// The exceptions a decision applied, counted apart from the admission
    /// itself so that the common case carries none.
    fn publish_exceptions(&self, webhook: WebhookKind, reviewed: &Reviewed<'_>) {
        if reviewed.decision.exceptions.is_empty() {
            return;
        }
        let namespace = reviewed.namespace();
        self.bus.publish(Event::ExceptionsApplied {
            webhook,
            exceptions: reviewed
                .decision
                .exceptions
                .iter()
                .map(|name| format!("{namespace}/{name}"))
                .collect(),
        });
    }
}

/// The body, refused early when its declared length is over `limit`.
async fn read_body<B>(
    request: Request<B>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, WebhookError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(WebhookError::BodyTooLarge { limit });
    }
    let body = Limited::new(request.into_body(), limit);
    match tokio::time::timeout(timeout, body.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<LengthLimitError>() => {
            Err(WebhookError::BodyTooLarge { limit })
        }
        Ok(Err(error)) => Err(WebhookError::ReadBody(error)),
        Err(_) => Err(WebhookError::BodyTimeout { timeout }),
    }
}

fn empty(status: StatusCode) -> Response<ResponseBody> {
    let mut response = Response::new(Full::default());
    *response.status_mut() = status;
    response
}

fn log_decision(webhook: WebhookKind, reviewed: &Reviewed<'_>) {
    let decision = &reviewed.decision;
    let pool = decision.pool.as_deref().unwrap_or_default();
    if !decision.allowed {
        tracing::info!(
            webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject(), pool,
            reason = decision.reason.as_str(),
            message = decision.message.as_deref().unwrap_or_default(),
            "admission denied"
        );
    } else if decision.is_withheld() {
        // In warn and dryrun modes this and the event are the only trace of
        // what enforcing would have done.
        tracing::info!(
            webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject(), pool,
            mode = decision.mode.as_str(), reason = decision.reason.as_str(),
            withheld_denial = decision.withheld_denial.as_deref().unwrap_or_default(),
            patch_withheld = decision.withheld_patch.is_some(),
            "admission allowed by the binding's mode"
        );
    } else {
        tracing::debug!(
            webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject(), pool,
            reason = decision.reason.as_str(), patched = decision.is_patched(),
            warnings = ?decision.warnings, "admission allowed"
        );
    }
}
