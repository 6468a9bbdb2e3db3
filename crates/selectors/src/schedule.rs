//! When the next update runs: at once after a trigger, later after a
//! failure (the shared exponential [`Backoff`]), never while nothing changed.

use std::time::Duration;

use poolkeeper_kube::Backoff;
use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct Schedule {
    /// Something changed (or an update failed) since the last update.
    pending: bool,
    /// A failed update holds the next one back until then.
    not_before: Option<Instant>,
    backoff: Backoff,
}

impl Schedule {
    /// A schedule with an update due at once: the state of the cluster is
    /// unknown at the start. Failed updates are retried after `initial`,
    /// doubling up to `max`.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            pending: true,
            not_before: None,
            backoff: Backoff::new(initial, max),
        }
    }

    /// The bindings or a configuration changed.
    pub(crate) fn trigger(&mut self) {
        self.pending = true;
    }

    /// Whether an update should start now.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.pending && self.not_before.is_none_or(|at| now >= at)
    }

    /// When an update becomes due without a trigger.
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        self.not_before.filter(|_| self.pending)
    }

    /// An update starts: it sees every change triggered so far.
    pub(crate) fn start(&mut self) {
        self.pending = false;
        self.not_before = None;
    }

    pub(crate) fn succeeded(&mut self) {
        self.backoff.reset();
    }

    /// A failed update that another attempt may fix: the next one is due
    /// after the returned delay. A lost race is retried after the first
    /// delay; other failures double it each time, up to the maximum. Both
    /// count in the streak.
    pub(crate) fn retry(&mut self, now: Instant, conflict: bool) -> Duration {
        let backoff = self.backoff.next_delay();
        let delay = if conflict {
            self.backoff.first()
        } else {
            backoff
        };
        self.pending = true;
        self.not_before = Some(now + delay);
        delay
    }

    /// A failed update that only a change can fix: wait for a trigger.
    pub(crate) fn wait_for_change(&mut self) {
        self.backoff.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INITIAL: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(5);

    #[test]
    fn due_at_start_then_only_after_a_trigger() {
        let now = Instant::now();
        let mut schedule = Schedule::new(INITIAL, MAX);
        assert!(schedule.is_due(now));
        schedule.start();
        schedule.succeeded();
        assert!(!schedule.is_due(now + MAX * 10), "nothing changed");
        assert_eq!(schedule.wake_at(), None);
        schedule.trigger();
        assert!(schedule.is_due(now));
    }

    #[test]
    fn failures_back_off_exponentially_up_to_the_maximum() {
        let now = Instant::now();
        let mut schedule = Schedule::new(INITIAL, MAX);
        let mut delays = Vec::new();
        for _ in 0..8 {
            schedule.start();
            delays.push(schedule.retry(now, false));
        }
        assert_eq!(
            delays,
            [200, 400, 800, 1600, 3200, 5000, 5000, 5000].map(Duration::from_millis)
        );
        schedule.start();
        schedule.succeeded();
        schedule.trigger();
        schedule.start();
        assert_eq!(
            schedule.retry(now, false),
            INITIAL,
            "a success resets the backoff"
        );
    }

    #[test]
    fn a_retry_waits_even_when_triggered() {
        let now = Instant::now();
        let mut schedule = Schedule::new(INITIAL, MAX);
        schedule.start();
        schedule.retry(now, false);
        schedule.start();
        let delay = schedule.retry(now, false);
        assert_eq!(delay, INITIAL * 2);
        schedule.trigger();
        assert!(!schedule.is_due(now + INITIAL));
        assert_eq!(schedule.wake_at(), Some(now + delay));
        assert!(schedule.is_due(now + delay));
    }

    #[test]
    fn a_lost_race_is_retried_soon() {
        let now = Instant::now();
        let mut schedule = Schedule::new(INITIAL, MAX);
        for _ in 0..4 {
            schedule.start();
            schedule.retry(now, false);
        }
        schedule.start();
        assert_eq!(schedule.retry(now, true), INITIAL);
        schedule.start();
        assert_eq!(
            schedule.retry(now, false),
            MAX,
            "the lost race counted in the streak"
        );
    }

    #[test]
    fn a_failure_only_a_change_can_fix_waits_for_the_trigger() {
        let now = Instant::now();
        let mut schedule = Schedule::new(INITIAL, MAX);
        schedule.start();
        schedule.wait_for_change();
        assert!(!schedule.is_due(now + MAX * 10));
        assert_eq!(schedule.wake_at(), None);
        schedule.trigger();
        assert!(schedule.is_due(now));
    }
}
