//! The two admission endpoints as an HTTP service: the route, the body read
//! within its size and time limits, the answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Bytes, Incoming};
use hyper::service::Service;
use poolkeeper_bus::WebhookKind;
use tokio::time::Instant;

use crate::activity::Activity;
use crate::error::WebhookError;
use crate::handler::AppState;
use crate::outbox::Outbox;
use crate::settings::WebhookSettings;

pub(crate) type ResponseBody = Full<Bytes>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// POST `mutate_path` and `validate_path`; anything else is 404 or 405.
///
/// The paths are compared literally: the configuration admits only plain
/// paths (no `{capture}`, no `*wildcard`, no query).
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    inner: Arc<Endpoints>,
}

#[derive(Debug)]
struct Endpoints {
    state: AppState,
    mutate_path: String,
    validate_path: String,
    max_body_bytes: usize,
    body_read_timeout: Duration,
}

impl Admission {
    pub(crate) fn new(settings: &WebhookSettings, state: AppState) -> Self {
        Self {
            inner: Arc::new(Endpoints {
                state,
                mutate_path: settings.mutate_path.clone(),
                validate_path: settings.validate_path.clone(),
                max_body_bytes: settings.max_body_bytes,
                body_read_timeout: settings.body_read_timeout,
            }),
        }
    }

    /// Where the decisions go on their way to the bus.
    pub(crate) fn outbox(&self) -> Arc<Outbox> {
        Arc::clone(self.inner.state.outbox())
    }

    fn route(&self, path: &str) -> Option<WebhookKind> {
        if path == self.inner.mutate_path {
            Some(WebhookKind::Mutate)
        } else if path == self.inner.validate_path {
            Some(WebhookKind::Validate)
        } else {
            None
        }
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
        let endpoints = &self.inner;
        match read_body(
            request,
            endpoints.max_body_bytes,
            endpoints.body_read_timeout,
        )
        .await
        {
            Ok(body) => endpoints.state.answer(webhook, &body, started),
            Err(error) => {
                let mut response = endpoints.state.refuse(webhook, &error, started);
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
}

/// The service of one connection: [`Admission`], with every request
/// counted in flight on the connection's [`Activity`] while it runs.
pub(crate) fn for_connection(
    admission: Admission,
    activity: Arc<Activity>,
) -> impl Service<
    Request<Incoming>,
    Response = Response<ResponseBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<ResponseBody>, Infallible>> + Send + 'static,
> + Clone
+ Send
+ 'static {
    hyper::service::service_fn(move |request: Request<Incoming>| {
        let in_flight = activity.request_started();
        let admission = admission.clone();
        async move {
            let response = admission.respond(request).await;
            drop(in_flight);
            Ok::<_, Infallible>(response)
        }
    })
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
