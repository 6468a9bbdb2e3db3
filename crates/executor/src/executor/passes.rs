//! Passes in progress: their keys wait for one of `executor.concurrency`
//! slots, run, and report one by one. Passes overlap, so a key whose write
//! hangs holds one slot, not every later pass.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use poolkeeper_bus::{Bus, Event};
use poolkeeper_supervisor::{Activity, BusyGuard};
use tokio::time::Instant;

use super::{Reconciled, Seen, Worker};
use crate::target::Target;
use crate::writer::ClassWriter;

/// One key of a pass, waiting for a slot.
struct Job {
    pass: u64,
    target: Target,
    seen: Seen,
}

/// What an open pass has seen of its keys so far.
struct Tally {
    started: Instant,
    keys: usize,
    remaining: usize,
    writes: usize,
    failed: usize,
    /// The first failed key and its error, for the pass's log line.
    first_failure: Option<(String, String)>,
}

/// The keys of the open passes, queued or being reconciled. The caller
/// hands each key to at most one pass at a time, so a key is never
/// reconciled twice at once.
pub(super) struct Passes {
    queue: VecDeque<Job>,
    running: FuturesUnordered<BoxFuture<'static, (u64, Reconciled)>>,
    open: BTreeMap<u64, Tally>,
    activity: Activity,
    /// Held while a reconciliation runs, re-armed after each one: the
    /// executor counts as stalled only when no key completes.
    busy: Option<BusyGuard>,
}

impl Passes {
    pub(super) fn new(activity: Activity) -> Self {
        Self {
            queue: VecDeque::new(),
            running: FuturesUnordered::new(),
            open: BTreeMap::new(),
            activity,
            busy: None,
        }
    }

    /// Opens pass `pass` over `keys`; a pass without keys completes at once.
    pub(super) fn open(&mut self, bus: &Bus, pass: u64, keys: Vec<(Target, Seen)>) {
        let total = keys.len();
        bus.publish(Event::ReconciliationStarted { pass, keys: total });
        tracing::debug!(pass, keys = total, "reconciliation pass started");
        let tally = Tally {
            started: Instant::now(),
            keys: total,
            remaining: total,
            writes: 0,
            failed: 0,
            first_failure: None,
        };
        if total == 0 {
            report(bus, pass, &tally);
            return;
        }
        self.open.insert(pass, tally);
        self.queue.extend(
            keys.into_iter()
                .map(|(target, seen)| Job { pass, target, seen }),
        );
    }

    /// Starts queued keys, oldest first, while fewer than `concurrency` run.
    pub(super) fn fill<W: ClassWriter>(&mut self, worker: &Arc<Worker<W>>) {
        while self.running.len() < worker.settings.concurrency {
            let Some(Job { pass, target, seen }) = self.queue.pop_front() else {
                break;
            };
            let worker = worker.clone();
            self.running.push(Box::pin(async move {
                (pass, worker.reconcile(target, seen).await)
            }));
        }
        if self.running.is_empty() {
            self.busy = None;
        } else if self.busy.is_none() {
            self.busy = Some(self.activity.busy("reconciliation pass"));
        }
    }

    /// The next reconciliation to finish, with its pass; never while none
    /// runs.
    pub(super) async fn next(&mut self) -> (u64, Reconciled) {
        match self.running.next().await {
            Some(done) => done,
            None => std::future::pending().await,
        }
    }

    /// Counts `result` in its pass, and completes the pass with its last key.
    pub(super) fn finished(&mut self, bus: &Bus, pass: u64, result: &Reconciled) {
        self.busy = Some(self.activity.busy("reconciliation pass"));
        let Some(tally) = self.open.get_mut(&pass) else {
            return;
        };
        tally.remaining = tally.remaining.saturating_sub(1);
        tally.writes += usize::from(result.outcome.wrote());
        if let Some(error) = &result.error {
            tally.failed += 1;
            tally
                .first_failure
                .get_or_insert_with(|| (result.key.to_string(), error.to_string()));
        }
        if tally.remaining == 0 {
            let tally = self.open.remove(&pass);
            if let Some(tally) = tally {
                report(bus, pass, &tally);
            }
        }
    }

    /// Drops every open pass, queued and running keys with them: no more
    /// writes, and the dropped passes do not complete.
    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.running = FuturesUnordered::new();
        self.open.clear();
        self.busy = None;
    }
}

fn report(bus: &Bus, pass: u64, tally: &Tally) {
    let duration = tally.started.elapsed();
    let (keys, writes, failed) = (tally.keys, tally.writes, tally.failed);
    match &tally.first_failure {
        None => tracing::debug!(
            pass,
            keys,
            writes,
            duration_ms = duration.as_millis() as u64,
            "reconciliation pass completed"
        ),
        Some((target, error)) => tracing::warn!(
            pass,
            keys,
            writes,
            failed,
            first_failed = %target,
            %error,
            duration_ms = duration.as_millis() as u64,
            "reconciliation pass completed with failed writes"
        ),
    }
    bus.publish(Event::ReconciliationCompleted {
        pass,
        duration,
        writes,
        failed,
    });
}
