//! The chaos run's fault schedule: which fault comes next and when the run is over. The cluster
//! test (xtask/examples/cluster-tests/chaos.rs) injects the faults; this is its pure part,
//! compiled into xtask's own tests as well so that it is tested without a cluster.

use std::collections::BTreeSet;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    LeaderDeleted,
    /// The leader Pod deleted every [`DELETION_PERIOD`] through a phase, whether or not the
    /// replica replacing the last one is ready yet.
    LeaderDeletedEvery30s,
    LeaderFrozen,
    LeaderCutOff,
    /// The leader's container limited to 5 % of a CPU for 2 × leaseDuration: it may keep the
    /// Lease or lose it.
    LeaderThrottled,
    /// The API server stopped (SIGTERM) and started again: every replica is cut off at once,
    /// and creates fail until it serves again.
    ApiServerRestarted,
    BothDeleted,
}

pub const DELETION_PERIOD: Duration = Duration::from_secs(30);
/// Runs this long or longer take the longer cycle: the API server restarted twice per cycle
/// and four deletions in the phase; shorter ones (the run inside `cargo xtask test`) take
/// every fault once, the phase with two deletions.
pub const LONG_RUN: Duration = Duration::from_secs(5 * 60);
/// At most one step per this much of the run: bounded whatever the faults take.
const STEP_BUDGET: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Once(Fault),
    /// [`Fault::LeaderDeletedEvery30s`]: `deletions` of them, [`DELETION_PERIOD`] apart.
    DeletionPhase {
        deletions: u32,
    },
}

impl Step {
    pub fn fault(self) -> Fault {
        match self {
            Step::Once(fault) => fault,
            Step::DeletionPhase { .. } => Fault::LeaderDeletedEvery30s,
        }
    }
}

#[derive(Debug)]
pub struct Schedule {
    run_for: Duration,
    cycle: Vec<Step>,
}

impl Schedule {
    pub fn new(run_for: Duration) -> Self {
        use Fault::*;
        let cycle = if run_for < LONG_RUN {
            vec![
                Step::Once(LeaderDeleted),
                Step::Once(LeaderFrozen),
                Step::Once(LeaderCutOff),
                Step::Once(LeaderThrottled),
                Step::Once(ApiServerRestarted),
                Step::Once(BothDeleted),
                Step::DeletionPhase { deletions: 2 },
            ]
        } else {
            vec![
                Step::Once(LeaderDeleted),
                Step::Once(BothDeleted),
                Step::Once(LeaderFrozen),
                Step::Once(ApiServerRestarted),
                Step::Once(LeaderCutOff),
                Step::Once(LeaderThrottled),
                Step::DeletionPhase { deletions: 4 },
                Step::Once(ApiServerRestarted),
            ]
        };
        Self { run_for, cycle }
    }

    /// The run against a deliberately broken leader (`cargo xtask chaos --broken-leader`): the
    /// leader frozen first and then again and again, so that each freeze lands on the replica
    /// that took over while the last one was frozen, just after that one resumed: the resumed
    /// replica, which the broken build keeps acting as leader, then has the script's changes to
    /// itself while the Lease is another's. A cut-off closes the cycle.
    pub fn broken_leader(run_for: Duration) -> Self {
        use Fault::*;
        let cycle = vec![
            Step::Once(LeaderFrozen),
            Step::Once(LeaderFrozen),
            Step::Once(LeaderFrozen),
            Step::Once(LeaderCutOff),
        ];
        Self { run_for, cycle }
    }

    /// The most steps a run takes.
    pub fn max_steps(&self) -> usize {
        let budget = self.run_for.as_secs() / STEP_BUDGET.as_secs();
        usize::try_from(budget)
            .unwrap_or(usize::MAX)
            .max(self.cycle.len())
    }

    /// The step to take as the `index`-th (from 0), `elapsed` into the run, with the kinds
    /// `injected` so far; `None` once the time is up and every kind was injected, or after
    /// [`Self::max_steps`].
    pub fn next(
        &self,
        index: usize,
        elapsed: Duration,
        injected: &BTreeSet<Fault>,
    ) -> Option<Step> {
        let every_kind = self.cycle.iter().all(|s| injected.contains(&s.fault()));
        if index >= self.max_steps() || (elapsed >= self.run_for && every_kind) {
            return None;
        }
        self.cycle.get(index % self.cycle.len()).copied()
    }
}

/// The script's `step`-th move: which Machine is pointed at which MachineClass. The run re-points
/// six Machines among four classes, so that every class stays in use and the finalizers stay
/// put while the references move. The broken leader's run moves one Machine from class to
/// class, so that every step takes the finalizer off one class and puts it on the next: a
/// deposed leader that goes on writing has finalizer patches to race the new leader for.
pub fn script_step(step: usize, broken_leader: bool) -> (usize, usize) {
    if broken_leader {
        (0, step % 4)
    } else {
        let machine = step % 6;
        (machine, (step / 6 + machine) % 4)
    }
}

/// When each deletion of a phase is due, since the phase's start.
pub fn deletion_times(deletions: u32) -> impl Iterator<Item = Duration> {
    (0..deletions).map(|i| DELETION_PERIOD * i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(steps: &[Step]) -> BTreeSet<Fault> {
        steps.iter().map(|s| s.fault()).collect()
    }

    /// Runs the schedule with each step taking `step_takes`: the steps taken.
    fn run(run_for: Duration, step_takes: Duration) -> Vec<Step> {
        take(&Schedule::new(run_for), step_takes)
    }

    fn run_broken(run_for: Duration, step_takes: Duration) -> Vec<Step> {
        take(&Schedule::broken_leader(run_for), step_takes)
    }

    fn take(schedule: &Schedule, step_takes: Duration) -> Vec<Step> {
        let mut taken = Vec::new();
        let mut elapsed = Duration::ZERO;
        while let Some(step) = schedule.next(taken.len(), elapsed, &kinds(&taken)) {
            taken.push(step);
            elapsed += step_takes;
        }
        taken
    }

    fn count(steps: &[Step], fault: Fault) -> usize {
        steps.iter().filter(|s| s.fault() == fault).count()
    }

    #[test]
    fn the_short_run_takes_every_fault_once_and_the_restart_once() {
        let steps = run(Duration::from_secs(150), Duration::from_secs(25));
        assert_eq!(steps.len(), 7, "{steps:?}");
        assert_eq!(kinds(&steps).len(), 7);
        assert_eq!(count(&steps, Fault::ApiServerRestarted), 1);
        assert!(steps.contains(&Step::DeletionPhase { deletions: 2 }));
    }

    #[test]
    fn a_long_run_restarts_the_api_server_several_times() {
        let steps = run(Duration::from_secs(10 * 60), Duration::from_secs(35));
        assert_eq!(kinds(&steps).len(), 7);
        assert!(count(&steps, Fault::ApiServerRestarted) >= 4, "{steps:?}");
        assert!(steps.contains(&Step::DeletionPhase { deletions: 4 }));
        for kind in kinds(&steps) {
            assert!(count(&steps, kind) >= 2, "{kind:?} in {steps:?}");
        }
    }

    #[test]
    fn the_run_goes_on_past_its_time_until_every_kind_was_injected() {
        // Each step overruns the whole run: still one of each.
        let steps = run(Duration::from_secs(60), Duration::from_secs(120));
        assert_eq!(kinds(&steps).len(), 7);
        assert_eq!(steps.len(), 7);
    }

    #[test]
    fn steps_are_bounded_however_fast_they_go() {
        let run_for = Duration::from_secs(10 * 60);
        let steps = run(run_for, Duration::ZERO);
        assert_eq!(steps.len(), 30);
        assert_eq!(Schedule::new(run_for).max_steps(), 30);
    }

    #[test]
    fn the_broken_leaders_run_freezes_one_leader_after_the_other() {
        // 3 minutes with each fault taking 40 s (30 s held, the replicas Ready again).
        let steps = run_broken(Duration::from_secs(180), Duration::from_secs(40));
        assert_eq!(
            steps[..3],
            [Step::Once(Fault::LeaderFrozen); 3],
            "{steps:?}"
        );
        assert!(count(&steps, Fault::LeaderFrozen) >= 4, "{steps:?}");
        // However slow, the freeze comes three times: every kind of the cycle is injected.
        let slow = run_broken(Duration::from_secs(30), Duration::from_secs(120));
        assert_eq!(count(&slow, Fault::LeaderFrozen), 3, "{slow:?}");
        assert_eq!(count(&slow, Fault::LeaderCutOff), 1, "{slow:?}");
        assert!(!kinds(&slow).contains(&Fault::ApiServerRestarted));
    }

    /// The classes in use after each of `steps` moves of the script.
    fn classes_in_use(steps: usize, broken_leader: bool) -> Vec<BTreeSet<usize>> {
        let mut machines = std::collections::BTreeMap::new();
        (0..steps)
            .map(|step| {
                let (machine, class) = script_step(step, broken_leader);
                machines.insert(machine, class);
                machines.values().copied().collect()
            })
            .collect()
    }

    #[test]
    fn the_run_keeps_every_class_in_use_and_the_broken_leaders_moves_one_each_step() {
        let all: BTreeSet<usize> = (0..4).collect();
        let run = classes_in_use(60, false);
        assert!(run[6..].iter().all(|used| *used == all), "{run:?}");
        let broken = classes_in_use(60, true);
        for (step, used) in broken.iter().enumerate() {
            assert_eq!(used.len(), 1, "{step}: {used:?}");
            if step > 0 {
                assert_ne!(used, &broken[step - 1], "{step}: a finalizer moves");
            }
        }
    }

    #[test]
    fn deletions_of_a_phase_are_30_s_apart() {
        let times: Vec<u64> = deletion_times(4).map(|d| d.as_secs()).collect();
        assert_eq!(times, [0, 30, 60, 90]);
        assert_eq!(deletion_times(0).count(), 0);
    }
}
