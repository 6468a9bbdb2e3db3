//! The I/O: writing an Event through kube's [`Recorder`], which keeps the
//! Events it wrote (for six minutes after their last repetition) and turns a
//! repetition into a patch of the same object's `series` instead of a new
//! object. The Event's `regarding` reference comes complete, UID included
//! (a MachineClass's from the index, by way of `MachineClassReconciled`):
//! nothing is read from the API server to write an Event.

use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use poolkeeper_supervisor::LeaderTerm;

use crate::error::Error;
use crate::queue::Pending;

/// How one write went.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) pending: Pending,
    pub(crate) result: Result<(), Error>,
}

/// Writes Events as one reporter; cheap to clone (the clones share kube's
/// cache of written Events).
#[derive(Clone)]
pub(crate) struct Writer {
    recorder: Recorder,
    timeout: Duration,
    /// Events are best-effort and not fenced (each is an object of its
    /// own, nothing to test), but a leader past its term writes none, as
    /// every other leader write.
    term: Option<LeaderTerm>,
}

impl Writer {
    pub(crate) fn new(client: Client, reporter: Reporter, timeout: Duration) -> Self {
        Self {
            recorder: Recorder::new(client, reporter),
            timeout,
            term: None,
        }
    }

    pub(crate) fn guarded_by(&mut self, term: LeaderTerm) {
        self.term = Some(term);
    }

    /// Writes `pending` within the write timeout and the leader's term.
    pub(crate) async fn write(self, pending: Pending) -> Written {
        let mut timeout = self.timeout;
        if let Some(term) = &self.term {
            match term.permit() {
                Ok(permit) => timeout = permit.bound(timeout),
                Err(refused) => {
                    return Written {
                        pending,
                        result: Err(refused.into()),
                    };
                }
            }
        }
        let event = pending.notice.to_kube();
        let attempt = self.recorder.publish(&event, &pending.regarding);
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result.map_err(Error::Write),
            Err(_) => Err(Error::Timeout(timeout)),
        };
        Written { pending, result }
    }
}
