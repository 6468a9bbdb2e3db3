//! The leader's write guard: every write a leader-only component sends asks
//! [`LeaderTerm::permit`] first.
//!
//! A leader that was paused (SIGSTOP, a frozen cgroup, a long GC-like stall
//! of its host) or cut off from the API server wakes up believing it still
//! leads: its components run on, and the next write would go out although
//! another replica may have taken the lease over meanwhile. The elector
//! therefore records, after each successful acquire or renew, until when the
//! term is certainly still this replica's: the moment the attempt *started*
//! plus the renew deadline, on the monotonic clock. A follower waits a full
//! lease duration from the moment it first saw that renewal, which is later
//! than the attempt's start, and the renew deadline is shorter than the lease
//! duration: so before the deadline no other replica can lead. Past it the
//! write is not sent, and the elector steps down at the same instant.
//!
//! The term also carries its fencing epoch (a Lease's `leaseTransitions`),
//! which writers put into their preconditions so that the API server itself
//! refuses a write that was already in flight when the term ended.
//!
//! The cargo feature `broken-leader-for-chaos` breaks this guard on purpose,
//! for the chaos run's proof that its oracle catches a deposed leader's
//! writes: a term that ends or is found expired keeps permitting writes for
//! [`IGNORED_LOSS`] more, and [`crate::LeaderGated`] stops the leader-only
//! components as late. Never ship a build with it.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::watchdog::format_duration;

/// How long a build with the feature `broken-leader-for-chaos` goes on
/// acting as leader after it learnt that its term is over.
#[cfg(feature = "broken-leader-for-chaos")]
pub(crate) const IGNORED_LOSS: Duration = Duration::from_secs(10);

/// One confirmed term: its fencing epoch and until when it is certainly ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermState {
    pub epoch: i64,
    pub valid_until: Instant,
}

impl TermState {
    /// Whether a write may be sent at `now`, and how long it may take.
    pub fn permit_at(&self, now: Instant) -> Result<WritePermit, NotLeader> {
        match self.valid_until.checked_duration_since(now) {
            Some(remaining) if !remaining.is_zero() => Ok(WritePermit {
                epoch: self.epoch,
                remaining,
            }),
            _ => Err(NotLeader::Expired {
                epoch: self.epoch,
                late: now.saturating_duration_since(self.valid_until),
            }),
        }
    }
}

/// Leave to send one write as leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritePermit {
    /// The term's fencing epoch, for the write's preconditions.
    pub epoch: i64,
    /// Time left in the term: a write still unanswered by then is given up.
    pub remaining: Duration,
}

impl WritePermit {
    /// `timeout`, cut to what is left of the term.
    pub fn bound(&self, timeout: Duration) -> Duration {
        timeout.min(self.remaining)
    }
}

/// Why a leader write was not sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotLeader {
    #[error("this replica does not lead")]
    NoTerm,
    #[error(
        "leadership term {epoch} ended {} ago without a renewal: not writing",
        format_duration(*late)
    )]
    Expired { epoch: i64, late: Duration },
}

/// The current leadership term, shared between the elector that confirms
/// it and the leader-only components that write under it. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct LeaderTerm {
    state: Arc<Mutex<Option<TermState>>>,
    /// The deliberately broken build's term that ended, still permitting
    /// writes until its `valid_until`.
    #[cfg(feature = "broken-leader-for-chaos")]
    ignored_loss: Arc<Mutex<Option<TermState>>>,
}

impl LeaderTerm {
    /// No term yet: every permit is refused until the elector confirms one.
    pub fn new() -> Self {
        Self::default()
    }

    /// The elector renewed or acquired the lease for `epoch`: the term holds
    /// until `valid_until`.
    pub fn confirm(&self, epoch: i64, valid_until: Instant) {
        *self.state.lock() = Some(TermState { epoch, valid_until });
        #[cfg(feature = "broken-leader-for-chaos")]
        {
            *self.ignored_loss.lock() = None;
        }
    }

    /// The elector stepped down: no write is permitted until the next term.
    pub fn end(&self) {
        #[cfg(feature = "broken-leader-for-chaos")]
        self.ignore_loss();
        *self.state.lock() = None;
    }

    /// The deliberately broken build: the term that ends now goes on
    /// permitting writes for [`IGNORED_LOSS`].
    #[cfg(feature = "broken-leader-for-chaos")]
    fn ignore_loss(&self) {
        if let Some(ended) = *self.state.lock() {
            *self.ignored_loss.lock() = Some(TermState {
                epoch: ended.epoch,
                valid_until: Instant::now() + IGNORED_LOSS,
            });
        }
    }

    /// The term as last confirmed, if any.
    pub fn current(&self) -> Option<TermState> {
        let current = *self.state.lock();
        #[cfg(feature = "broken-leader-for-chaos")]
        let current = current.or_else(|| {
            let now = Instant::now();
            self.ignored_loss.lock().filter(|t| t.valid_until > now)
        });
        current
    }

    /// Leave to send one write now, or why not.
    pub fn permit(&self) -> Result<WritePermit, NotLeader> {
        self.current()
            .ok_or(NotLeader::NoTerm)?
            .permit_at(Instant::now())
    }

    /// Resolves when the confirmed term runs out (never while there is none).
    pub async fn expired(&self) {
        match self.current() {
            Some(term) => tokio::time::sleep_until(term.valid_until).await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_within_the_term_only() {
        let start = Instant::now();
        let term = TermState {
            epoch: 4,
            valid_until: start + Duration::from_secs(10),
        };
        let cases = [
            ("at the start", Duration::ZERO, Ok(Duration::from_secs(10))),
            (
                "just before the deadline",
                Duration::from_millis(9_999),
                Ok(Duration::from_millis(1)),
            ),
            (
                "at the deadline",
                Duration::from_secs(10),
                Err(Duration::ZERO),
            ),
            (
                "resumed long after",
                Duration::from_secs(40),
                Err(Duration::from_secs(30)),
            ),
        ];
        for (name, after, want) in cases {
            let got = term.permit_at(start + after);
            match want {
                Ok(remaining) => assert_eq!(
                    got,
                    Ok(WritePermit {
                        epoch: 4,
                        remaining
                    }),
                    "{name}"
                ),
                Err(late) => assert_eq!(got, Err(NotLeader::Expired { epoch: 4, late }), "{name}"),
            }
        }
    }

    #[test]
    fn a_permit_bounds_the_write_timeout() {
        let permit = WritePermit {
            epoch: 1,
            remaining: Duration::from_secs(3),
        };
        assert_eq!(
            permit.bound(Duration::from_secs(30)),
            Duration::from_secs(3)
        );
        assert_eq!(permit.bound(Duration::from_secs(1)), Duration::from_secs(1));
    }

    #[test]
    fn the_refusal_says_how_late() {
        let error = NotLeader::Expired {
            epoch: 7,
            late: Duration::from_secs(20),
        };
        assert_eq!(
            error.to_string(),
            "leadership term 7 ended 20s ago without a renewal: not writing"
        );
    }

    /// A term confirmed, then the process frozen past its deadline (the
    /// paused clock jumps as a SIGSTOP would): nothing is permitted on
    /// resume, and `expired` has fired.
    #[tokio::test(start_paused = true)]
    async fn a_frozen_leader_writes_nothing_on_resume() {
        let term = LeaderTerm::new();
        assert_eq!(term.permit(), Err(NotLeader::NoTerm));
        term.confirm(3, Instant::now() + Duration::from_secs(10));
        assert_eq!(term.permit().map(|p| p.epoch), Ok(3));

        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(
            term.permit(),
            Err(NotLeader::Expired {
                epoch: 3,
                late: Duration::from_secs(20)
            })
        );
        tokio::time::timeout(Duration::ZERO, term.expired())
            .await
            .expect("an expired term has expired");

        term.confirm(3, Instant::now() + Duration::from_secs(10));
        assert!(term.permit().is_ok(), "a renewal opens a new window");
        term.end();
        assert_eq!(term.permit(), Err(NotLeader::NoTerm));
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), term.expired())
                .await
                .is_err(),
            "without a term nothing expires"
        );
    }

    /// The deliberately broken build: a term found over (here after a
    /// freeze past its deadline) permits writes for 10 s more, once.
    #[cfg(feature = "broken-leader-for-chaos")]
    #[tokio::test(start_paused = true)]
    async fn the_broken_build_writes_10_s_past_the_end_of_its_term() {
        let term = LeaderTerm::new();
        term.confirm(3, Instant::now() + Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(term.permit().is_err(), "not yet found over");
        term.end();
        assert_eq!(
            term.permit(),
            Ok(WritePermit {
                epoch: 3,
                remaining: IGNORED_LOSS
            })
        );
        tokio::time::advance(IGNORED_LOSS).await;
        assert_eq!(term.permit(), Err(NotLeader::NoTerm));
        term.end();
        assert_eq!(term.permit(), Err(NotLeader::NoTerm), "ignored once only");
    }
}
