//! Per-key requeue timers.

use std::collections::HashMap;
use std::future::poll_fn;
use std::hash::Hash;
use std::time::Duration;

use poolkeeper_bus::ObjectKey;
use tokio_util::time::{DelayQueue, delay_queue};

/// At most one pending requeue per key: scheduling a key again replaces its
/// earlier deadline, so a key is never due twice.
pub(crate) struct Requeues<K = ObjectKey> {
    queue: DelayQueue<K>,
    scheduled: HashMap<K, delay_queue::Key>,
}

impl<K> Default for Requeues<K> {
    fn default() -> Self {
        Self {
            queue: DelayQueue::new(),
            scheduled: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> Requeues<K> {
    /// Makes `key` due `after` from now, replacing an earlier schedule.
    pub(crate) fn schedule(&mut self, key: K, after: Duration) {
        match self.scheduled.get(&key) {
            Some(scheduled) => self.queue.reset(scheduled, after),
            None => {
                let scheduled = self.queue.insert(key.clone(), after);
                self.scheduled.insert(key, scheduled);
            }
        }
    }

    /// Forgets `key`'s schedule, if it has one.
    pub(crate) fn cancel(&mut self, key: &K) {
        if let Some(scheduled) = self.scheduled.remove(key) {
            self.queue.remove(&scheduled);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.queue.clear();
        self.scheduled.clear();
    }

    /// The next key that is due, once it is; never completes while nothing
    /// is scheduled. Cancel safe: a key is taken out only when returned.
    pub(crate) async fn next(&mut self) -> K {
        if self.scheduled.is_empty() {
            return std::future::pending().await;
        }
        // `None` would mean an empty queue, which the check above rules out.
        let Some(expired) = poll_fn(|cx| self.queue.poll_expired(cx)).await else {
            return std::future::pending().await;
        };
        let key = expired.into_inner();
        self.scheduled.remove(&key);
        key
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;

    enum Step {
        Schedule(&'static str, u64),
        Cancel(&'static str),
        Clear,
        /// Let this many seconds pass.
        Wait(u64),
    }

    /// A table row: its name, the steps, and what falls due.
    type Case = (
        &'static str,
        &'static [Step],
        &'static [(u64, &'static str)],
    );

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("machine-system", name)
    }

    /// Runs `steps`, then collects what becomes due within an hour, as
    /// `(seconds since the start, key name)`, both during the steps and
    /// after them.
    async fn due(steps: &[Step]) -> Vec<(u64, String)> {
        let start = Instant::now();
        let mut requeues = Requeues::default();
        let mut due = Vec::new();
        let mut collect_until = async |requeues: &mut Requeues, until: Instant| {
            while let Ok(key) = tokio::time::timeout_at(until, requeues.next()).await {
                due.push((start.elapsed().as_secs(), key.name));
            }
        };
        for step in steps {
            match *step {
                Step::Schedule(name, secs) => {
                    requeues.schedule(key(name), Duration::from_secs(secs));
                }
                Step::Cancel(name) => requeues.cancel(&key(name)),
                Step::Clear => requeues.clear(),
                Step::Wait(secs) => {
                    let until = Instant::now() + Duration::from_secs(secs);
                    collect_until(&mut requeues, until).await;
                }
            }
        }
        let until = Instant::now() + Duration::from_secs(3600);
        collect_until(&mut requeues, until).await;
        due
    }

    #[tokio::test(start_paused = true)]
    async fn keys_fall_due_in_deadline_order() {
        use Step::*;
        let cases: [Case; 7] = [
            ("nothing scheduled, nothing due", &[], &[]),
            (
                "earliest deadline first",
                &[Schedule("a", 5), Schedule("b", 1), Schedule("c", 3)],
                &[(1, "b"), (3, "c"), (5, "a")],
            ),
            (
                "a later schedule replaces an earlier one",
                &[Schedule("a", 5), Schedule("a", 10)],
                &[(10, "a")],
            ),
            (
                "and so does an earlier one",
                &[Schedule("a", 10), Wait(2), Schedule("a", 1)],
                &[(3, "a")],
            ),
            (
                "a cancelled key is not due; cancelling an unknown key is fine",
                &[Schedule("a", 1), Schedule("b", 2), Cancel("a"), Cancel("x")],
                &[(2, "b")],
            ),
            (
                "a key that fell due can be scheduled again",
                &[Schedule("a", 1), Wait(2), Schedule("a", 1)],
                &[(1, "a"), (3, "a")],
            ),
            (
                "clear forgets everything, later schedules still work",
                &[Schedule("a", 1), Schedule("b", 2), Clear, Schedule("c", 4)],
                &[(4, "c")],
            ),
        ];
        for (name, steps, expected) in cases {
            let expected: Vec<(u64, String)> = expected
                .iter()
                .map(|(at, key)| (*at, key.to_string()))
                .collect();
            assert_eq!(due(steps).await, expected, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn next_waits_while_nothing_is_scheduled() {
        let mut requeues = Requeues::default();
        let waited = tokio::time::timeout(Duration::from_secs(60), requeues.next()).await;
        assert!(waited.is_err(), "nothing can fall due");
        requeues.schedule(key("a"), Duration::from_secs(1));
        requeues.cancel(&key("a"));
        let waited = tokio::time::timeout(Duration::from_secs(60), requeues.next()).await;
        assert!(waited.is_err(), "a cancelled key does not fall due");
    }
}
