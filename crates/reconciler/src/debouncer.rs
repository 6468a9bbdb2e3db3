//! The debounce state machine, free of any runtime: the caller feeds it the
//! current time with every input and sleeps until [`Debouncer::deadline`].

use std::time::{Duration, Instant};

use poolkeeper_bus::TriggerReason;

/// What the debouncer reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// A watched object changed; `initial` when it came from a (re)list.
    Changed { initial: bool },
    /// This replica became the leader.
    LeadershipGained,
    /// The bus subscription lagged: changes may have been missed.
    Lagged,
    /// The process is stopping: nothing triggers any more.
    Shutdown,
}

/// Trailing debounce with a cap.
///
/// A live change (re)starts a quiet period of `interval`; the trigger fires
/// when it expires. Continuous churn would postpone that forever, so the
/// deadline never moves past `first change of the window + max_delay`.
/// Full triggers (index synchronized, leadership, lag) fire at once and
/// absorb any pending window, since they cover every key anyway.
#[derive(Clone, Debug)]
pub struct Debouncer {
    interval: Duration,
    max_delay: Duration,
    window: Option<Window>,
    shut_down: bool,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    first_change: Instant,
    deadline: Instant,
}

impl Debouncer {
    pub fn new(interval: Duration, max_delay: Duration) -> Self {
        Self {
            interval,
            max_delay,
            window: None,
            shut_down: false,
        }
    }

    /// Feeds one input observed at `now`; returns the trigger to publish, if any.
    pub fn on_event(&mut self, now: Instant, input: Input) -> Option<TriggerReason> {
        if self.shut_down {
            return None;
        }
        match input {
            Input::Changed { initial: true } => None,
            Input::Changed { initial: false } => {
                // The quiet period may already have expired without the caller
                // having had the chance to call `on_deadline`: that window is
                // complete and this change opens the next one.
                let expired = self.on_deadline(now);
                let first_change = self.window.map_or(now, |w| w.first_change);
                let deadline = (now + self.interval).min(first_change + self.max_delay);
                self.window = Some(Window {
                    first_change,
                    deadline,
                });
                expired
            }
            Input::LeadershipGained => self.fire(TriggerReason::LeadershipGained),
            Input::Lagged => self.fire(TriggerReason::Lagged),
            Input::Shutdown => {
                self.window = None;
                self.shut_down = true;
                None
            }
        }
    }

    /// When the pending trigger is due, if one is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.window.map(|w| w.deadline)
    }

    /// Call when [`Debouncer::deadline`] has passed; returns the debounced
    /// trigger if it is indeed due at `now`.
    pub fn on_deadline(&mut self, now: Instant) -> Option<TriggerReason> {
        match self.window {
            Some(w) if now >= w.deadline => self.fire(TriggerReason::Debounced),
            _ => None,
        }
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    fn fire(&mut self, reason: TriggerReason) -> Option<TriggerReason> {
        self.window = None;
        Some(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_millis(500);
    const MAX_DELAY: Duration = Duration::from_secs(5);

    enum Step {
        /// An input at this many milliseconds after the start.
        At(u64, Input),
        /// `on_deadline` at this many milliseconds after the start.
        Tick(u64),
    }
    use Step::{At, Tick};

    const LIVE: Input = Input::Changed { initial: false };
    const INITIAL: Input = Input::Changed { initial: true };

    struct Case {
        name: &'static str,
        steps: Vec<Step>,
        /// (milliseconds, reason) of every trigger, in order.
        triggers: Vec<(u64, TriggerReason)>,
        /// Pending deadline after the last step, in milliseconds.
        deadline: Option<u64>,
    }

    fn run(case: &Case) {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut debouncer = Debouncer::new(INTERVAL, MAX_DELAY);
        let mut triggers = Vec::new();
        for step in &case.steps {
            let (ms, fired) = match step {
                At(ms, input) => (*ms, debouncer.on_event(at(*ms), *input)),
                Tick(ms) => (*ms, debouncer.on_deadline(at(*ms))),
            };
            if let Some(reason) = fired {
                triggers.push((ms, reason));
            }
        }
        assert_eq!(triggers, case.triggers, "{}: triggers", case.name);
        assert_eq!(
            debouncer.deadline(),
            case.deadline.map(at),
            "{}: pending deadline",
            case.name
        );
    }

    #[test]
    fn table() {
        use TriggerReason::*;
        let cases = vec![
            Case {
                name: "one change triggers after the quiet period",
                steps: vec![At(0, LIVE), Tick(499), Tick(500)],
                triggers: vec![(500, Debounced)],
                deadline: None,
            },
            Case {
                name: "changes at 0, 100, 300 ms trigger once at 800 ms",
                steps: vec![
                    At(0, LIVE),
                    At(100, LIVE),
                    At(300, LIVE),
                    Tick(600),
                    Tick(799),
                    Tick(800),
                ],
                triggers: vec![(800, Debounced)],
                deadline: None,
            },
            Case {
                name: "a change resets the pending deadline",
                steps: vec![At(0, LIVE), At(400, LIVE)],
                triggers: vec![],
                deadline: Some(900),
            },
            Case {
                name: "churn every 100 ms for 20 s triggers every max delay",
                steps: (0..200).map(|i| At(i * 100, LIVE)).collect(),
                // Each change landing on a capped deadline fires it and
                // opens the next window.
                triggers: vec![(5000, Debounced), (10_000, Debounced), (15_000, Debounced)],
                deadline: Some(20_000),
            },
            Case {
                name: "the cap holds the deadline while changes keep coming",
                steps: (0..50).map(|i| At(i * 100, LIVE)).collect(),
                triggers: vec![],
                deadline: Some(5000),
            },
            Case {
                name: "a change after an unobserved expiry fires the old window",
                steps: vec![At(0, LIVE), At(700, LIVE)],
                triggers: vec![(700, Debounced)],
                deadline: Some(1200),
            },
            Case {
                name: "a new window starts after a trigger",
                steps: vec![At(0, LIVE), Tick(500), At(6000, LIVE), Tick(6500)],
                triggers: vec![(500, Debounced), (6500, Debounced)],
                deadline: None,
            },
            Case {
                name: "initial changes never trigger",
                steps: vec![At(0, INITIAL), At(100, INITIAL), Tick(10_000)],
                triggers: vec![],
                deadline: None,
            },
            Case {
                name: "initial changes leave a pending window alone",
                steps: vec![At(0, LIVE), At(400, INITIAL)],
                triggers: vec![],
                deadline: Some(500),
            },
            Case {
                name: "leadership gained triggers at once and cancels the window",
                steps: vec![At(0, LIVE), At(50, Input::LeadershipGained), Tick(500)],
                triggers: vec![(50, LeadershipGained)],
                deadline: None,
            },
            Case {
                name: "lag triggers at once and cancels the window",
                steps: vec![At(0, LIVE), At(50, Input::Lagged), Tick(500)],
                triggers: vec![(50, Lagged)],
                deadline: None,
            },
            Case {
                name: "shutdown drops the pending window",
                steps: vec![At(0, LIVE), At(100, Input::Shutdown), Tick(500)],
                triggers: vec![],
                deadline: None,
            },
            Case {
                name: "nothing triggers after shutdown",
                steps: vec![
                    At(0, Input::Shutdown),
                    At(10, LIVE),
                    At(20, Input::Lagged),
                    At(30, Input::LeadershipGained),
                    At(40, Input::Lagged),
                    Tick(10_000),
                ],
                triggers: vec![],
                deadline: None,
            },
            Case {
                name: "a deadline tick without a window does nothing",
                steps: vec![Tick(0), Tick(1000)],
                triggers: vec![],
                deadline: None,
            },
            Case {
                name: "an early tick keeps the window",
                steps: vec![At(0, LIVE), Tick(100)],
                triggers: vec![],
                deadline: Some(500),
            },
        ];
        for case in &cases {
            run(case);
        }
    }

    #[test]
    fn max_delay_shorter_than_interval_caps_the_first_deadline() {
        let start = Instant::now();
        let mut debouncer = Debouncer::new(Duration::from_secs(2), Duration::from_secs(1));
        debouncer.on_event(start, LIVE);
        assert_eq!(debouncer.deadline(), Some(start + Duration::from_secs(1)));
    }

    #[test]
    fn shutdown_is_reported() {
        let mut debouncer = Debouncer::new(INTERVAL, MAX_DELAY);
        assert!(!debouncer.is_shut_down());
        debouncer.on_event(Instant::now(), Input::Shutdown);
        assert!(debouncer.is_shut_down());
    }

    /// Drives the debouncer as the component does: every change at its
    /// time, and `on_deadline` exactly when a deadline comes first.
    /// Returns the trigger times.
    fn drive(changes: &[u64], interval: Duration, max_delay: Duration) -> Vec<u64> {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let ms_of = |instant: Instant| instant.duration_since(start).as_millis() as u64;
        let mut debouncer = Debouncer::new(interval, max_delay);
        let mut fired = Vec::new();
        for &change in changes {
            while let Some(deadline) = debouncer.deadline().filter(|d| *d < at(change)) {
                fired.extend(debouncer.on_deadline(deadline).map(|_| ms_of(deadline)));
            }
            fired.extend(debouncer.on_event(at(change), LIVE).map(|_| change));
        }
        if let Some(deadline) = debouncer.deadline() {
            fired.extend(debouncer.on_deadline(deadline).map(|_| ms_of(deadline)));
        }
        fired
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// On any sequence of live changes: every change is followed by a
        /// trigger within maxDelay; a trigger comes only once the quiet
        /// period after the latest change before it expired, or maxDelay
        /// after the first change of its window; and no trigger fires
        /// without a change since the previous one.
        #[test]
        fn triggers_obey_the_quiet_period_and_max_delay(
            gaps in proptest::collection::vec(0u64..1_500, 1..60),
            interval_ms in 1u64..1_000,
            extra_ms in 0u64..4_000,
        ) {
            let (interval, max_delay) = (
                Duration::from_millis(interval_ms),
                Duration::from_millis(interval_ms + extra_ms),
            );
            let changes: Vec<u64> = gaps
                .iter()
                .scan(0, |t, gap| { *t += gap; Some(*t) })
                .collect();
            let triggers = drive(&changes, interval, max_delay);
            let max_delay_ms = interval_ms + extra_ms;
            for &change in &changes {
                proptest::prop_assert!(
                    triggers.iter().any(|&t| t >= change && t <= change + max_delay_ms),
                    "change at {change} ms not triggered within {max_delay_ms} ms: {triggers:?}"
                );
            }
            // A window holds the changes since the previous trigger (a change
            // at the very instant of a trigger opens the next window).
            let mut previous = 0;
            for &trigger in &triggers {
                let window: Vec<u64> = changes
                    .iter()
                    .copied()
                    .filter(|&c| c >= previous && c < trigger)
                    .collect();
                proptest::prop_assert!(!window.is_empty(), "trigger at {trigger} without a change");
                let (first, latest) = (window[0], window[window.len() - 1]);
                // Exactly when the quiet period after the window's latest
                // change ends, or at the cap of its first change if sooner.
                let due = (latest + interval_ms).min(first + max_delay_ms);
                proptest::prop_assert_eq!(trigger, due, "window {:?}", window);
                previous = trigger;
            }
        }
    }
}
