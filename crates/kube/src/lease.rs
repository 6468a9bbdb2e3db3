//! The decision of leader election on a `coordination.k8s.io/v1` Lease, pure: given what the
//! Lease says, when this replica saw it and who this replica is, [`LeaseDecider`] says what to
//! do and what to write. Like client-go, expiry is measured on the local clock from the moment
//! this replica first saw the holder's current record, never from the holder's `renewTime`,
//! so clock skew between replicas cannot make two leaders. [`crate::LeaseElector`] is the thin
//! Kubernetes part around it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// What the Lease says, as far as the decision goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: Option<String>,
    pub renew_time: Option<Timestamp>,
    /// The holder's lease duration; candidates wait this long.
    pub lease_duration: Option<Duration>,
    pub transitions: i32,
}

impl LeaseRecord {
    pub fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        Self {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            lease_duration: spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .filter(|&s| s > 0)
                .map(Duration::from_secs),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAction {
    /// There is no Lease yet.
    Create,
    /// The Lease is free or its holder let it expire: take it over.
    Acquire,
    /// This replica holds the Lease: renew it.
    Renew,
    /// Someone else holds the Lease until at least `expires_at`.
    Follow {
        holder: String,
        expires_at: Timestamp,
    },
}

/// The pure part of leader election.
#[derive(Clone, Debug)]
pub struct LeaseDecider {
    identity: String,
    lease_duration: Duration,
    /// Another holder's record as last seen, and when this replica first
    /// saw it like that.
    observed: Option<(LeaseRecord, Timestamp)>,
}

impl LeaseDecider {
    pub fn new(identity: impl Into<String>, lease_duration: Duration) -> Self {
        Self {
            identity: identity.into(),
            lease_duration,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// What to do about the Lease as read at `now` (`None`: it does not exist).
    pub fn decide(&mut self, lease: Option<&LeaseRecord>, now: Timestamp) -> LeaseAction {
        let Some(record) = lease else {
            self.observed = None;
            return LeaseAction::Create;
        };
        let holder = match &record.holder {
            None => {
                self.observed = None;
                return LeaseAction::Acquire;
            }
            Some(holder) if *holder == self.identity => {
                self.observed = None;
                return LeaseAction::Renew;
            }
            Some(holder) => holder.clone(),
        };
        let seen_at = match &self.observed {
            Some((seen, at)) if seen == record => *at,
            _ => {
                self.observed = Some((record.clone(), now));
                now
            }
        };
        let duration = record.lease_duration.unwrap_or(self.lease_duration);
        let expires_at = seen_at.saturating_add(duration).unwrap_or(Timestamp::MAX);
        if now >= expires_at {
            LeaseAction::Acquire
        } else {
            LeaseAction::Follow { holder, expires_at }
        }
    }

    /// The spec to write for `action` over the current one (`None` for
    /// [`LeaseAction::Follow`]).
    pub fn next_spec(
        &self,
        action: &LeaseAction,
        current: Option<&LeaseSpec>,
        now: Timestamp,
    ) -> Option<LeaseSpec> {
        let mut spec = current.cloned().unwrap_or_default();
        let previous_transitions = spec.lease_transitions.unwrap_or(0);
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(whole_seconds(self.lease_duration));
        spec.renew_time = Some(MicroTime(now));
        match action {
            LeaseAction::Create => {
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions = Some(0);
            }
            LeaseAction::Acquire => {
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions = Some(previous_transitions.saturating_add(1));
            }
            LeaseAction::Renew => {
                if spec.acquire_time.is_none() {
                    spec.acquire_time = Some(MicroTime(now));
                }
            }
            LeaseAction::Follow { .. } => return None,
        }
        Some(spec)
    }

    /// The spec that hands the Lease back (`None` when this replica does not
    /// hold it). Clearing the holder lets any candidate take it at once.
    pub fn released_spec(&self, current: &LeaseSpec) -> Option<LeaseSpec> {
        if current.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return None;
        }
        let mut spec = current.clone();
        spec.holder_identity = None;
        Some(spec)
    }
}

fn whole_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn held_by(holder: &str, renewed: i64) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.to_string()),
            renew_time: Some(at(renewed)),
            lease_duration: Some(Duration::from_secs(15)),
            transitions: 3,
        }
    }

    fn follow(holder: &str, expires: i64) -> LeaseAction {
        LeaseAction::Follow {
            holder: holder.to_string(),
            expires_at: at(expires),
        }
    }

    /// Each case is a sequence of reads of the Lease by replica "me"
    /// (lease duration 15s): (seconds, what the Lease says, expected action).
    #[test]
    fn decisions() {
        let free = LeaseRecord {
            transitions: 2,
            ..LeaseRecord::default()
        };
        let emptied = LeaseRecord::from_spec(Some(&LeaseSpec {
            holder_identity: Some(String::new()),
            ..LeaseSpec::default()
        }));
        let long = LeaseRecord {
            lease_duration: Some(Duration::from_secs(60)),
            ..held_by("other", 0)
        };
        let no_duration = LeaseRecord {
            lease_duration: None,
            ..held_by("other", 0)
        };
        type Case = (&'static str, Vec<(i64, Option<LeaseRecord>, LeaseAction)>);
        let cases: Vec<Case> = vec![
            ("no lease", vec![(0, None, LeaseAction::Create)]),
            ("no holder", vec![(0, Some(free), LeaseAction::Acquire)]),
            (
                "empty holder",
                vec![(0, Some(emptied), LeaseAction::Acquire)],
            ),
            (
                "held by me",
                vec![(0, Some(held_by("me", -100)), LeaseAction::Renew)],
            ),
            (
                "held by another: wait a full duration from the first sight, whatever renewTime says",
                vec![(0, Some(held_by("other", -3600)), follow("other", 15))],
            ),
            (
                "unchanged record expires",
                vec![
                    (0, Some(held_by("other", 0)), follow("other", 15)),
                    (10, Some(held_by("other", 0)), follow("other", 15)),
                    (15, Some(held_by("other", 0)), LeaseAction::Acquire),
                ],
            ),
            (
                "a renewal restarts the wait",
                vec![
                    (0, Some(held_by("other", 0)), follow("other", 15)),
                    (10, Some(held_by("other", 9)), follow("other", 25)),
                    (20, Some(held_by("other", 9)), follow("other", 25)),
                    (25, Some(held_by("other", 9)), LeaseAction::Acquire),
                ],
            ),
            (
                "a new holder restarts the wait",
                vec![
                    (0, Some(held_by("other", 0)), follow("other", 15)),
                    (14, Some(held_by("third", 0)), follow("third", 29)),
                ],
            ),
            (
                "the holder's lease duration wins over ours",
                vec![
                    (0, Some(long.clone()), follow("other", 60)),
                    (59, Some(long.clone()), follow("other", 60)),
                    (60, Some(long), LeaseAction::Acquire),
                ],
            ),
            (
                "our lease duration when the holder gives none",
                vec![(0, Some(no_duration), follow("other", 15))],
            ),
            (
                "a deleted lease is recreated",
                vec![
                    (0, Some(held_by("other", 0)), follow("other", 15)),
                    (5, None, LeaseAction::Create),
                    (6, Some(held_by("other", 0)), follow("other", 21)),
                ],
            ),
            (
                "leadership moves back and forth",
                vec![
                    (0, Some(held_by("me", 0)), LeaseAction::Renew),
                    (2, Some(held_by("other", 2)), follow("other", 17)),
                    (17, Some(held_by("other", 2)), LeaseAction::Acquire),
                    (19, Some(held_by("me", 17)), LeaseAction::Renew),
                ],
            ),
        ];
        for (name, steps) in cases {
            let mut decider = LeaseDecider::new("me", Duration::from_secs(15));
            for (step, (now, lease, want)) in steps.into_iter().enumerate() {
                let got = decider.decide(lease.as_ref(), at(now));
                assert_eq!(got, want, "{name}, step {step}");
            }
        }
    }

    #[test]
    fn specs_to_write() {
        let decider = LeaseDecider::new("me", Duration::from_secs(15));
        let theirs = LeaseSpec {
            holder_identity: Some("other".into()),
            acquire_time: Some(MicroTime(at(-100))),
            renew_time: Some(MicroTime(at(-20))),
            lease_duration_seconds: Some(30),
            lease_transitions: Some(4),
            ..LeaseSpec::default()
        };

        let created = decider
            .next_spec(&LeaseAction::Create, None, at(0))
            .unwrap();
        assert_eq!(created.holder_identity.as_deref(), Some("me"));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.lease_duration_seconds, Some(15));
        assert_eq!(created.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(created.renew_time, Some(MicroTime(at(0))));

        let acquired = decider
            .next_spec(&LeaseAction::Acquire, Some(&theirs), at(0))
            .unwrap();
        assert_eq!(acquired.holder_identity.as_deref(), Some("me"));
        assert_eq!(acquired.lease_transitions, Some(5));
        assert_eq!(acquired.lease_duration_seconds, Some(15));
        assert_eq!(acquired.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(acquired.renew_time, Some(MicroTime(at(0))));

        let renewed = decider
            .next_spec(&LeaseAction::Renew, Some(&acquired), at(2))
            .unwrap();
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(2))));
        assert_eq!(renewed.lease_transitions, Some(5));

        assert_eq!(
            decider.next_spec(&follow("other", 15), Some(&theirs), at(0)),
            None
        );

        let released = decider.released_spec(&renewed).unwrap();
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_transitions, Some(5));
        assert_eq!(
            LeaseRecord::from_spec(Some(&released)).holder,
            None,
            "a released lease is free for everyone"
        );
        assert_eq!(
            decider.released_spec(&theirs),
            None,
            "only the holder releases"
        );
    }
}
