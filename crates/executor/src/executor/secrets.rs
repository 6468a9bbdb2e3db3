//! The Secret side of a pass: snapshot, decision, finalizer patch and the
//! `SecretReconciled` event, on the same worker, writer and requeues as the
//! MachineClasses.

use std::time::Duration;

use poolkeeper_bus::{ClassOutcome, Event, ObjectKey};
use poolkeeper_index::{Index, Secret};
use tokio::time::Instant;

use super::{Reconciled, Seen, Worker};
use crate::decision::{ClassDecision, after_write_error};
use crate::secret_decision::{decide_secret, secret_patch};
use crate::target::Target;
use crate::writer::{ClassWriter, WriteError};

/// How many referencing classes `SecretReconciled` names; it counts them
/// all.
const NAMED_CLASSES: usize = 3;

/// The Secrets a full pass looks at: those a class references (held by the
/// index or not yet) and those that carry `finalizer`. The namespace's other
/// Secrets have nothing to do until an event dirties them.
pub(super) fn secrets_to_check(index: &Index, finalizer: &str) -> impl Iterator<Item = ObjectKey> {
    let view = index.secrets();
    let mut keys: Vec<ObjectKey> = view
        .secrets()
        .filter(|secret| secret.finalizers.iter().any(|f| f == finalizer))
        .map(|secret| secret.key.clone())
        .collect();
    keys.extend(view.referenced().cloned());
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
}

/// A Secret as one reconciliation sees it, copied out of the index so that
/// no index lock is held across the write.
struct SecretSnapshot {
    secret: Option<Secret>,
    classes: usize,
    named: Vec<String>,
}

impl<W: ClassWriter> Worker<W> {
    /// Reconciles one Secret. A Secret the index does not hold (a class
    /// names one that does not exist) is forgotten until it shows up.
    pub(super) async fn reconcile_secret(&self, key: ObjectKey) -> Reconciled {
        let started = Instant::now();
        let target = Target::Secret(key.clone());
        let Some(finalizer) = self.settings.secret_finalizer.as_deref() else {
            // Protection is off: no Secret is ever dirtied; nothing to report.
            return Reconciled::gone(target);
        };
        let snapshot = self.secret_snapshot(&key);
        let reconciled = match &snapshot.secret {
            None => Reconciled::gone(target),
            Some(secret) => {
                let decision =
                    decide_secret(secret, snapshot.classes, finalizer, &self.settings.retries);
                let (decision, error) = self
                    .apply_secret_decision(secret, finalizer, decision)
                    .await;
                Reconciled {
                    key: target,
                    uid: Some(secret.uid.clone()).filter(|uid| !uid.is_empty()),
                    outcome: decision.outcome,
                    requeue: decision.requeue,
                    requeue_after: decision.requeue_after,
                    seen: Seen::default(),
                    error,
                }
            }
        };
        self.report_secret(&key, &reconciled, snapshot, started.elapsed());
        reconciled
    }

    fn secret_snapshot(&self, key: &ObjectKey) -> SecretSnapshot {
        let view = self.index.secrets();
        SecretSnapshot {
            secret: view.secret(key).cloned(),
            classes: view.referrer_count(key),
            named: view
                .referrers(key)
                .take(NAMED_CLASSES)
                .map(|class| class.name.clone())
                .collect(),
        }
    }

    /// Writes the decision's patch, if it has one; a failed write turns the
    /// decision into its retry, as for a class.
    async fn apply_secret_decision(
        &self,
        secret: &Secret,
        finalizer: &str,
        decision: ClassDecision,
    ) -> (ClassDecision, Option<WriteError>) {
        let Some(patch) = decision
            .patch
            .and_then(|change| secret_patch(secret, change, finalizer))
        else {
            return (decision, None);
        };
        let key = &secret.key;
        let written = self
            .within_write_timeout(self.writer.patch_secret_finalizers(key, &patch))
            .await;
        let error = match written {
            Ok(()) => {
                tracing::info!(secret = %key, outcome = %decision.outcome, "Secret finalizers updated");
                return (decision, None);
            }
            Err(error) => error,
        };
        let retry = after_write_error(&error, &self.settings.retries);
        if retry.outcome == ClassOutcome::Error {
            tracing::warn!(secret = %key, %error, "Secret finalizer patch failed");
            (retry, Some(error))
        } else {
            tracing::debug!(secret = %key, outcome = %retry.outcome, %error, "Secret finalizer patch lost a race, retrying");
            (retry, None)
        }
    }

    fn report_secret(
        &self,
        key: &ObjectKey,
        reconciled: &Reconciled,
        snapshot: SecretSnapshot,
        duration: Duration,
    ) {
        self.bus.publish(Event::SecretReconciled {
            key: key.clone(),
            uid: reconciled.uid.clone(),
            classes: snapshot.classes,
            named: snapshot.named,
            outcome: reconciled.outcome,
            requeue: reconciled.requeue,
            requeue_after: reconciled.requeue_after,
            duration,
        });
    }
}
