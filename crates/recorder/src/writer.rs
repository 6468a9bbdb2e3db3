//! The I/O: writing an Event through kube's [`Recorder`], which keeps the
//! Events it wrote (for six minutes after their last repetition) and turns a
//! repetition into a patch of the same object's `series` instead of a new
//! object. The Event's `regarding` reference comes complete, UID included
//! (a MachineClass's from the index, by way of `MachineClassReconciled`):
//! nothing is read from the API server to write an Event.

use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

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
}

impl Writer {
    pub(crate) fn new(client: Client, reporter: Reporter, timeout: Duration) -> Self {
        Self {
            recorder: Recorder::new(client, reporter),
            timeout,
        }
    }

    /// Writes `pending` within the write timeout.
    pub(crate) async fn write(self, pending: Pending) -> Written {
        let event = pending.notice.to_kube();
        let attempt = self.recorder.publish(&event, &pending.regarding);
        let result = match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result.map_err(Error::Write),
            Err(_) => Err(Error::Timeout(self.timeout)),
        };
        Written { pending, result }
    }
}
