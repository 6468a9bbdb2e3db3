//! Defaults that follow other fields.
//!
//! A few timings only make sense relative to another one (the webhook's drain fits in the
//! grace period, the lease renewals fit in the lease). When the document leaves such a field
//! out, its default is derived from what the document did set, so a file that sets only
//! `shutdown.gracePeriod: 5s` is valid; a value the document writes is kept as written, and
//! validation names both fields when it contradicts another.

use std::time::Duration;

use crate::schema::Config;

/// Applies every derived default whose field `written` says the document leaves out.
/// A zero base is an error of its own; nothing is derived from it, so it is reported once.
pub(crate) fn apply(config: &mut Config, written: impl Fn(&str) -> bool) {
    let shutdown = &mut config.shutdown;
    if !shutdown.grace_period.is_zero() {
        if !written("shutdown.drainDelay") {
            shutdown.drain_delay = drain_delay(shutdown.grace_period);
        }
        if !written("webhook.shutdownTimeout") {
            config.webhook.shutdown_timeout =
                webhook_shutdown_timeout(shutdown.grace_period, shutdown.drain_delay);
        }
    }
    let lease = &mut config.leader_election;
    if !lease.lease_duration.is_zero() {
        if !written("leaderElection.renewDeadline") {
            lease.renew_deadline = renew_deadline(lease.lease_duration);
        }
        if !written("leaderElection.retryPeriod") && !lease.renew_deadline.is_zero() {
            lease.retry_period = retry_period(lease.renew_deadline);
        }
    }
}

/// At most 5s, and no more than a fifth of the grace period: the time an endpoint needs to
/// leave a Service does not grow with the grace period.
pub(crate) fn drain_delay(grace_period: Duration) -> Duration {
    (grace_period / 5).min(Duration::from_secs(5))
}

/// Three quarters of what the drain leaves of the grace period; the last quarter is for the
/// other components to stop and the Lease to be released. When the drain leaves nothing,
/// validation reports `shutdown.drainDelay`; the whole grace period is the base then, so the
/// derived field adds no second error of its own.
pub(crate) fn webhook_shutdown_timeout(grace_period: Duration, drain_delay: Duration) -> Duration {
    match grace_period.checked_sub(drain_delay) {
        Some(left) if !left.is_zero() => left * 3 / 4,
        _ => grace_period * 3 / 4,
    }
}

/// Two thirds of the lease, as client-go's defaults (15s lease, 10s deadline).
pub(crate) fn renew_deadline(lease_duration: Duration) -> Duration {
    lease_duration * 2 / 3
}

/// A fifth of the renew deadline (client-go: 2s of 10s), so several attempts fit in it.
pub(crate) fn retry_period(renew_deadline: Duration) -> Duration {
    renew_deadline / 5
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn derived_values_of_the_defaults_are_the_documented_defaults() {
        let defaults = Config::default();
        let mut derived = Config::default();
        apply(&mut derived, |_| false);
        assert_eq!(derived, defaults);
    }

    #[test]
    fn derivations_follow_the_field_they_depend_on() {
        let cases = [
            // (grace, drain) -> (drain, webhook shutdown)
            ((S(25), None), (S(5), S(15))),
            ((S(5), None), (S(1), S(3))),
            ((S(60), None), (S(5), MS(41_250))),
            ((S(25), Some(S(10))), (S(10), MS(11_250))),
            ((S(5), Some(S(5))), (S(5), MS(3_750))),
        ];
        for ((grace, drain), (want_drain, want_timeout)) in cases {
            let mut config = Config::default();
            config.shutdown.grace_period = grace;
            if let Some(drain) = drain {
                config.shutdown.drain_delay = drain;
            }
            apply(&mut config, |path| {
                path == "shutdown.gracePeriod" || (drain.is_some() && path == "shutdown.drainDelay")
            });
            assert_eq!(
                config.shutdown.drain_delay, want_drain,
                "{grace:?} {drain:?}"
            );
            assert_eq!(
                config.webhook.shutdown_timeout, want_timeout,
                "{grace:?} {drain:?}"
            );
        }
    }

    #[test]
    fn written_values_are_kept() {
        let mut config = Config::default();
        config.shutdown.grace_period = S(5);
        config.webhook.shutdown_timeout = S(15);
        config.leader_election.lease_duration = S(6);
        config.leader_election.retry_period = S(3);
        apply(&mut config, |path| {
            matches!(
                path,
                "shutdown.gracePeriod"
                    | "webhook.shutdownTimeout"
                    | "leaderElection.leaseDuration"
                    | "leaderElection.retryPeriod"
            )
        });
        assert_eq!(config.webhook.shutdown_timeout, S(15));
        assert_eq!(config.shutdown.drain_delay, S(1));
        assert_eq!(config.leader_election.renew_deadline, S(4));
        assert_eq!(config.leader_election.retry_period, S(3));
    }
}
