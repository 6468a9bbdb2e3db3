//! One admission request: decided over the index, answered, and published
//! as `AdmissionDecided`.

use std::sync::Arc;

use http::Response;
use http::header::{self, HeaderValue};
use http_body_util::Full;
use hyper::body::Bytes;
use poolkeeper_bus::{AdmissionResult, Bus, Event, Mode, WebhookKind};
use poolkeeper_index::Index;
use poolkeeper_placement::PolicyCache;
use tokio::time::Instant;

use crate::error::WebhookError;
use crate::outbox::Outbox;
use crate::review::{Reviewed, review};
use crate::service::ResponseBody;

/// What every request needs: the index to decide over, the policy read
/// from it, the bus to report to.
#[derive(Debug)]
pub(crate) struct AppState {
    index: Arc<Index>,
    policy: PolicyCache,
    outbox: Arc<Outbox>,
}

impl AppState {
    pub(crate) fn new(index: Arc<Index>, policy: PolicyCache, bus: Bus) -> Self {
        Self {
            index,
            policy,
            outbox: Arc::new(Outbox::new(bus)),
        }
    }

    /// Where the decisions go on their way to the bus.
    pub(crate) fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// Decides the AdmissionReview in `body` and answers it; a body that is
    /// not one is answered with its HTTP error.
    pub(crate) fn answer(
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
    pub(crate) fn refuse(
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
        self.outbox.publish(Event::AdmissionDecided {
            webhook,
            result,
            mode,
            reason,
            duration: started.elapsed(),
        });
    }
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
