//! The bounded queue between whoever asks for an Event and the one writer
//! that writes them, so that asking never waits for the API server.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::mpsc;

use crate::notice::Notice;

/// One Event waiting to be written, with the complete reference (UID
/// included) of the object it regards.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Pending {
    pub(crate) regarding: ObjectReference,
    pub(crate) notice: Notice,
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reference = &self.regarding;
        write!(
            f,
            "{} on {} {}/{}",
            self.notice.reason,
            reference.kind.as_deref().unwrap_or("object"),
            reference.namespace.as_deref().unwrap_or_default(),
            reference.name.as_deref().unwrap_or_default()
        )
    }
}

/// The sending side; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Queue {
    sender: mpsc::Sender<Pending>,
    /// Events turned away since the queue was last found with room.
    dropped: Arc<AtomicU64>,
}

impl Queue {
    pub(crate) fn channel(capacity: usize) -> (Self, mpsc::Receiver<Pending>) {
        let (sender, receiver) = mpsc::channel(capacity);
        let queue = Self {
            sender,
            dropped: Arc::default(),
        };
        (queue, receiver)
    }

    /// Queues `pending` if there is room and the writer still runs; never
    /// waits. A full queue is logged once per streak of dropped Events.
    pub(crate) fn offer(&self, pending: Pending) -> bool {
        match self.sender.try_send(pending) {
            Ok(()) => {
                let dropped = self.dropped.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    tracing::info!(dropped, "Kubernetes Event queue has room again");
                }
                true
            }
            Err(mpsc::error::TrySendError::Full(pending)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        event = %pending,
                        "Kubernetes Event queue is full (the API server is slow): dropping \
                         Events until it has room"
                    );
                }
                false
            }
            Err(mpsc::error::TrySendError::Closed(pending)) => {
                tracing::debug!(event = %pending, "the event recorder has stopped: Event dropped");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(name: &str) -> Pending {
        Pending {
            regarding: crate::notice::class_reference(
                &poolkeeper_bus::ObjectKey::namespaced("ns", name),
                Some(format!("uid-{name}")),
            ),
            notice: Notice::normal("FinalizerAdded", "AddFinalizer", "note"),
        }
    }

    #[test]
    fn a_full_queue_drops_until_it_has_room() {
        let (queue, mut receiver) = Queue::channel(2);
        assert!(queue.offer(pending("a")));
        assert!(queue.offer(pending("b")));
        assert!(!queue.offer(pending("c")));
        assert!(!queue.clone().offer(pending("d")));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(receiver.try_recv().unwrap(), pending("a"));
        assert!(queue.offer(pending("e")));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 0);
        assert_eq!(receiver.try_recv().unwrap(), pending("b"));
        assert_eq!(receiver.try_recv().unwrap(), pending("e"));
    }

    #[test]
    fn nothing_is_queued_once_the_writer_is_gone() {
        let (queue, receiver) = Queue::channel(2);
        drop(receiver);
        assert!(!queue.offer(pending("a")));
    }

    #[test]
    fn pending_events_describe_themselves_for_the_log() {
        assert_eq!(
            pending("a").to_string(),
            "FinalizerAdded on MachineClass ns/a"
        );
        let pod = Pending {
            regarding: ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("shop".into()),
                name: Some("web".into()),
                ..ObjectReference::default()
            },
            notice: Notice::warning("OutsidePool", "Audit", "note"),
        };
        assert_eq!(pod.to_string(), "OutsidePool on Pod shop/web");
    }
}
