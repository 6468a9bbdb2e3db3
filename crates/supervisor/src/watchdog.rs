//! Stall detection: one liveness check per running component, failed while
//! the component has been busy with one unit of work for too long.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::health::{Gate, Health};

/// Tracks what a component is doing right now, for stall detection.
#[derive(Clone, Debug, Default)]
pub struct Activity {
    current: Arc<Mutex<Option<(&'static str, Instant)>>>,
}

impl Activity {
    pub fn busy(&self, what: &'static str) -> BusyGuard {
        *self.current.lock() = Some((what, Instant::now()));
        BusyGuard {
            activity: self.clone(),
        }
    }

    /// `Some((what, for how long))` while a unit of work is in progress.
    pub fn busy_for(&self) -> Option<(&'static str, Duration)> {
        self.current
            .lock()
            .map(|(what, since)| (what, since.elapsed()))
    }
}

/// Clears the component's activity when dropped.
#[derive(Debug)]
pub struct BusyGuard {
    activity: Activity,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        *self.activity.current.lock() = None;
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabels {
    component: String,
}

#[derive(Debug, Default)]
struct Metrics {
    running: Family<ComponentLabels, Gauge>,
    stalled: Family<ComponentLabels, Gauge>,
}

impl Metrics {
    fn running(&self, name: &str) -> Gauge {
        self.running
            .get_or_create(&ComponentLabels {
                component: name.to_string(),
            })
            .clone()
    }

    fn stalled(&self, name: &str) -> Gauge {
        self.stalled
            .get_or_create(&ComponentLabels {
                component: name.to_string(),
            })
            .clone()
    }
}

#[derive(Debug)]
struct Watched {
    activity: Activity,
    gate: Gate,
    stalled: bool,
    /// Tells a registration from a later one under the same name.
    generation: u64,
}

#[derive(Debug)]
struct Inner {
    health: Health,
    stall_timeout: Duration,
    watched: Mutex<HashMap<&'static str, Watched>>,
    next_generation: AtomicU64,
    metrics: Metrics,
}

/// Watches the [`Activity`] of every running component.
#[derive(Clone, Debug)]
pub(crate) struct Watchdog {
    inner: Arc<Inner>,
}

impl Watchdog {
    pub(crate) fn new(health: Health, stall_timeout: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                health,
                stall_timeout,
                watched: Mutex::new(HashMap::new()),
                next_generation: AtomicU64::new(0),
                metrics: Metrics::default(),
            }),
        }
    }

    pub(crate) fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "component_running",
            "Whether a component is running (1) or not (0)",
            self.inner.metrics.running.clone(),
        );
        registry.register(
            "component_stalled",
            "Whether a component has been busy with one unit of work for longer than the stall timeout",
            self.inner.metrics.stalled.clone(),
        );
    }

    /// Starts watching `activity` under the liveness check `name` until the
    /// returned guard is dropped.
    pub(crate) fn watch(&self, name: &'static str, activity: Activity) -> WatchGuard {
        let generation = self.inner.next_generation.fetch_add(1, Ordering::Relaxed);
        let gate = self.inner.health.liveness_gate(name);
        self.inner.metrics.running(name).set(1);
        self.inner.metrics.stalled(name).set(0);
        self.inner.watched.lock().insert(
            name,
            Watched {
                activity,
                gate,
                stalled: false,
                generation,
            },
        );
        WatchGuard {
            watchdog: self.clone(),
            name,
            generation,
        }
    }

    fn unwatch(&self, name: &'static str, generation: u64) {
        let mut watched = self.inner.watched.lock();
        if watched.get(name).map(|w| w.generation) != Some(generation) {
            return;
        }
        if let Some(entry) = watched.remove(name) {
            // A stopped component is not a stalled one.
            entry.gate.pass();
            self.inner.metrics.running(name).set(0);
            self.inner.metrics.stalled(name).set(0);
        }
    }

    /// One pass over every watched component.
    pub(crate) fn check(&self) {
        let stall_timeout = self.inner.stall_timeout;
        let mut watched = self.inner.watched.lock();
        for (&name, entry) in watched.iter_mut() {
            match entry.activity.busy_for() {
                Some((what, busy)) if busy > stall_timeout => {
                    let reason = format!("stalled: {what} for {}", format_duration(busy));
                    if !entry.stalled {
                        tracing::warn!(
                            component = name,
                            doing = what,
                            busy_for = %format_duration(busy),
                            "component stalled"
                        );
                        entry.stalled = true;
                        self.inner.metrics.stalled(name).set(1);
                    }
                    entry.gate.fail(reason);
                }
                _ => {
                    if entry.stalled {
                        tracing::info!(component = name, "component no longer stalled");
                        entry.stalled = false;
                        entry.gate.pass();
                        self.inner.metrics.stalled(name).set(0);
                    }
                }
            }
        }
    }

    /// How often [`Watchdog::run`] checks: often enough that a stall shows
    /// within a quarter of the timeout, rarely enough to cost nothing.
    pub(crate) fn period(&self) -> Duration {
        (self.inner.stall_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(5))
    }

    /// Checks periodically until `stop` is cancelled.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(self.period());
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => self.check(),
            }
        }
    }
}

/// Stops watching a component when dropped (its task ended or was aborted).
#[derive(Debug)]
pub(crate) struct WatchGuard {
    watchdog: Watchdog,
    name: &'static str,
    generation: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.watchdog.unwatch(self.name, self.generation);
    }
}

/// Durations in messages and logs, as the configuration writes them
/// (humantime: `2m 3s`, `250ms`), to the millisecond below a second and to
/// the second above, so a stall reads "for 2m 3s" rather than to the
/// nanosecond. Every crate logs durations through it
/// (`delay = %format_duration(delay)`), never with `Debug`.
pub fn format_duration(d: Duration) -> String {
    let shown = if d < Duration::from_secs(1) {
        Duration::from_millis(d.as_millis() as u64)
    } else {
        Duration::from_secs(d.as_secs())
    };
    humantime::format_duration(shown).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_the_configuration_writes_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_micros(250_700), "250ms"),
            (Duration::from_millis(1500), "1s"),
            (Duration::from_secs(45), "45s"),
            (Duration::from_secs(123), "2m 3s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(3605), "1h 5s"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(d), want, "{d:?}");
        }
    }
}
