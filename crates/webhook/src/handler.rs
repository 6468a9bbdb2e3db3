//! One admission request: decided over the index, answered, and published
//! as `AdmissionDecided`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use poolkeeper_bus::{AdmissionResult, Bus, Event, Mode, WebhookKind};
use poolkeeper_index::Index;
use poolkeeper_placement::PolicySource;
use tokio::time::Instant;

use crate::error::WebhookError;
use crate::policy::PolicyCache;
use crate::review::{Reviewed, review};

/// What every request needs: the index to decide over, the policy read
/// from it, the bus to report to.
#[derive(Debug)]
pub(crate) struct AppState {
    index: Arc<Index>,
    policy: PolicyCache,
    bus: Bus,
}

impl AppState {
    pub(crate) fn new(index: Arc<Index>, policy: PolicySource, bus: Bus) -> Self {
        Self {
            index,
            policy: PolicyCache::new(policy),
            bus,
        }
    }

    pub(crate) fn handle_request(
        &self,
        webhook: WebhookKind,
        body: Result<Bytes, BytesRejection>,
    ) -> Response {
        let started = Instant::now();
        let body = match body {
            Ok(body) => body,
            Err(rejection) => {
                tracing::warn!(webhook = webhook.as_str(), status = %rejection.status(), error = %rejection.body_text(), "admission request rejected");
                self.publish(
                    webhook,
                    AdmissionResult::Invalid,
                    "unreadable_body",
                    started,
                );
                return rejection.into_response();
            }
        };
        match self.answer(webhook, &body) {
            Ok((reviewed, bytes)) => {
                self.publish(
                    webhook,
                    reviewed.result(),
                    reviewed.decision.reason.as_str(),
                    started,
                );
                log_decision(webhook, &reviewed);
                ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
            }
            Err(error) => {
                tracing::warn!(webhook = webhook.as_str(), %error, "malformed admission request");
                self.publish(webhook, AdmissionResult::Invalid, error.reason(), started);
                (error.status_code(), error.to_string()).into_response()
            }
        }
    }

    /// The decision and the encoded AdmissionReview that carries it.
    fn answer(
        &self,
        webhook: WebhookKind,
        body: &[u8],
    ) -> Result<(Reviewed, Vec<u8>), WebhookError> {
        let view = self.index.placement();
        let policy = self.policy.get(&view);
        let reviewed = review(webhook, body, &view, policy.as_ref().as_ref())?;
        let bytes = reviewed.response.to_bytes()?;
        Ok((reviewed, bytes))
    }

    fn publish(
        &self,
        webhook: WebhookKind,
        result: AdmissionResult,
        reason: &'static str,
        started: Instant,
    ) {
        self.bus.publish(Event::AdmissionDecided {
            webhook,
            result,
            mode: Mode::Enforce,
            reason,
            duration: started.elapsed(),
        });
    }
}

fn log_decision(webhook: WebhookKind, reviewed: &Reviewed) {
    let decision = &reviewed.decision;
    let pool = decision.pool.as_deref().unwrap_or_default();
    if decision.allowed {
        tracing::debug!(
            webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject, pool,
            reason = decision.reason.as_str(), patched = decision.is_patched(),
            warnings = ?decision.warnings, "admission allowed"
        );
    } else {
        tracing::info!(
            webhook = webhook.as_str(), uid = %reviewed.uid, pod = %reviewed.subject, pool,
            reason = decision.reason.as_str(),
            message = decision.message.as_deref().unwrap_or_default(),
            "admission denied"
        );
    }
}
