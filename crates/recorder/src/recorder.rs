//! The component: reads the bus, queues the Events it calls for, and writes
//! them one at a time beside the bus reading.

use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::events::Reporter;
use poolkeeper_bus::{Bus, Delivery, Subscription};
use poolkeeper_supervisor::{BoxError, Component, Context, error_chain};
use tokio::sync::mpsc;

use crate::notice::notices_for;
use crate::queue::{Pending, Queue};
use crate::settings::RecorderSettings;
use crate::writer::{Writer, Written};

/// `reportingController` of every Event poolkeeper writes.
pub const REPORTING_CONTROLLER: &str = "poolkeeper";

/// The API server's limit on `reportingInstance`, in bytes.
const MAX_INSTANCE_BYTES: usize = 128;

/// Events waiting to be written. Beyond this the API server is too slow
/// for them, and new ones are dropped (and logged) rather than delaying
/// anything.
const QUEUE_CAPACITY: usize = 256;

/// The `event-recorder` component: Kubernetes Events (events.k8s.io/v1) for
/// what happens on the bus. See the crate documentation.
pub struct EventRecorder {
    subscription: Subscription,
    settings: RecorderSettings,
    queue: Queue,
    pending: mpsc::Receiver<Pending>,
    writer: Writer,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    pub const NAME: &'static str = "event-recorder";

    /// Subscribes to `bus` right away, so construct it before `bus.start()`
    /// (or, leader-gated, in the factory). `instance` is this replica's
    /// identity, the Events' `reportingInstance` (cut to 128 bytes).
    pub fn new(
        settings: RecorderSettings,
        bus: &Bus,
        client: Client,
        instance: impl Into<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_owned(),
            instance: Some(reporting_instance(instance.into())),
        };
        let (queue, pending) = Queue::channel(QUEUE_CAPACITY);
        Self {
            subscription: bus.subscribe(Self::NAME),
            writer: Writer::new(client, reporter, settings.write_timeout),
            settings,
            queue,
            pending,
        }
    }

    /// Writes Events only within the leader's `term`, as every leader
    /// write; they are best-effort and carry no fencing epoch.
    pub fn guarded_by(mut self, term: poolkeeper_supervisor::LeaderTerm) -> Self {
        self.writer.guarded_by(term);
        self
    }

    async fn run_loop(mut self, ctx: Context) -> Result<(), BoxError> {
        ctx.mark_ready();
        let mut writing: Option<BoxFuture<'static, Written>> = None;
        loop {
            tokio::select! {
                biased;
                () = ctx.cancelled() => break,
                delivery = self.subscription.next_delivery() => self.on_delivery(&delivery),
                written = finish(&mut writing) => {
                    writing = None;
                    self.on_written(written);
                }
                Some(pending) = self.pending.recv(), if writing.is_none() => {
                    writing = Some(Box::pin(self.start_write(pending)));
                }
            }
        }
        let unwritten = self.pending.len() + usize::from(writing.is_some());
        if unwritten > 0 {
            tracing::info!(
                unwritten,
                "event recorder stopping: queued Kubernetes Events dropped"
            );
        }
        Ok(())
    }

    fn on_delivery(&mut self, delivery: &Delivery) {
        let envelope = match delivery {
            Delivery::Event(envelope) => envelope,
            Delivery::Lagged(missed) => {
                tracing::warn!(
                    missed,
                    "event recorder fell behind the bus: Kubernetes Events for the missed \
                     events are skipped"
                );
                return;
            }
        };
        for (regarding, notice) in notices_for(&envelope.event, &self.settings) {
            self.queue.offer(Pending { regarding, notice });
        }
    }

    fn start_write(&self, pending: Pending) -> impl Future<Output = Written> + use<> {
        self.writer.clone().write(pending)
    }

    fn on_written(&mut self, written: Written) {
        match written.result {
            Ok(()) => tracing::debug!(event = %written.pending, "Kubernetes Event written"),
            Err(error) => tracing::warn!(
                event = %written.pending,
                error = %error_chain(&error),
                "Kubernetes Event not written"
            ),
        }
    }
}

impl Component for EventRecorder {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Ready the moment it runs: it waits for nothing.
    fn readiness_check(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_loop(ctx))
    }
}

/// The result of the write under way, or never if none is.
async fn finish(writing: &mut Option<BoxFuture<'static, Written>>) -> Written {
    match writing {
        Some(write) => write.await,
        None => std::future::pending().await,
    }
}

fn reporting_instance(mut instance: String) -> String {
    if instance.len() > MAX_INSTANCE_BYTES {
        let mut end = MAX_INSTANCE_BYTES;
        while !instance.is_char_boundary(end) {
            end -= 1;
        }
        instance.truncate(end);
    }
    instance
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use poolkeeper_bus::{
        AuditViolation, Change, ClassOutcome, Envelope, Event, Mode, ObjectKey, Requeue,
        ResourceKind,
    };
    use poolkeeper_config::Config;

    use super::*;

    /// A recorder whose client points nowhere: these tests never write.
    fn recorder(bus: &Bus) -> EventRecorder {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        EventRecorder::new(
            RecorderSettings::from(&Config::default()),
            bus,
            client,
            "me",
        )
    }

    fn delivered(event: Event) -> Delivery {
        Delivery::Event(Arc::new(Envelope {
            seq: 0,
            published_at: SystemTime::now(),
            event,
        }))
    }

    fn reconciled(name: &str, outcome: ClassOutcome) -> Delivery {
        delivered(Event::MachineClassReconciled {
            key: ObjectKey::namespaced("machine-system", name),
            uid: Some(format!("uid-{name}")),
            outcome,
            requeue: Requeue::Long,
            requeue_after: Duration::from_secs(600),
            duration: Duration::ZERO,
        })
    }

    fn class_changed(name: &str, change: Change) -> Delivery {
        delivered(Event::ResourceChanged {
            kind: ResourceKind::MachineClass,
            key: ObjectKey::namespaced("machine-system", name),
            change,
            initial: false,
            related: Vec::new(),
        })
    }

    #[tokio::test]
    async fn only_events_that_call_for_one_are_queued() {
        let mut recorder = recorder(&Bus::default());
        recorder.on_delivery(&reconciled("a", ClassOutcome::Unchanged));
        recorder.on_delivery(&reconciled("a", ClassOutcome::Conflict));
        recorder.on_delivery(&class_changed("a", Change::Updated));
        recorder.on_delivery(&reconciled("a", ClassOutcome::FinalizerAdded));
        let queued = recorder.pending.try_recv().expect("one Event queued");
        assert_eq!(queued.regarding.name.as_deref(), Some("a"));
        assert_eq!(
            queued.regarding.uid.as_deref(),
            Some("uid-a"),
            "the UID comes with the event: no lookup"
        );
        assert_eq!(queued.notice.reason, "FinalizerAdded");
        assert!(recorder.pending.try_recv().is_err(), "nothing else");
    }

    fn violation(name: &str, first_found: bool) -> AuditViolation {
        AuditViolation {
            namespace: "shop".into(),
            pod: name.into(),
            kind: "Pod",
            api_version: "v1",
            name: name.into(),
            uid: format!("uid-{name}"),
            mode: Mode::Warn,
            first_found,
            pool: "hangzhou".into(),
            reason: "outside_pool",
            node: Some("bj-1".into()),
            message: "pod is bound to node pool \"hangzhou\" but runs on node \"bj-1\"".into(),
        }
    }

    /// Each reason the audit reports has its own Event reason; an unknown
    /// one still gives a Warning.
    #[test]
    fn audit_reasons_become_event_reasons() {
        for (reason, event_reason) in [
            ("outside_pool", "OutsidePool"),
            ("no_matching_node", "NoMatchingNode"),
            ("missing_edge_tolerations", "MissingEdgeTolerations"),
            ("label_outside_binding", "LabelOutsideBinding"),
            ("something_new", "PlacementViolation"),
        ] {
            let violation = AuditViolation {
                reason,
                ..violation("web", true)
            };
            assert_eq!(
                crate::notice::audit_notice(&violation).reason,
                event_reason,
                "{reason}"
            );
        }
    }

    /// The audit's Warnings come from the bus: one per violation found for
    /// the first time, regarding the object by UID.
    #[tokio::test]
    async fn violations_found_for_the_first_time_are_warned_about() {
        let mut recorder = recorder(&Bus::default());
        recorder.on_delivery(&delivered(Event::AuditCompleted {
            pods: 2,
            duration: Duration::ZERO,
            counts: Vec::new(),
            violations: vec![violation("old", false), violation("web", true)],
            truncated: false,
            results: Default::default(),
        }));
        let queued = recorder.pending.try_recv().expect("one Warning queued");
        assert_eq!(queued.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(queued.regarding.name.as_deref(), Some("web"));
        assert_eq!(queued.regarding.uid.as_deref(), Some("uid-web"));
        assert_eq!(queued.regarding.resource_version, None);
        assert_eq!(queued.notice.reason, "OutsidePool");
        assert!(
            queued.notice.note.ends_with("(binding mode warn)"),
            "{:?}",
            queued.notice
        );
        assert!(recorder.pending.try_recv().is_err(), "none for the old one");
    }

    #[test]
    fn long_instances_are_cut_to_the_api_limit() {
        assert_eq!(
            reporting_instance("poolkeeper-7d9f_1a2b".into()),
            "poolkeeper-7d9f_1a2b"
        );
        let long = "p".repeat(127) + "ü";
        assert_eq!(reporting_instance(long), "p".repeat(127));
    }

    #[test]
    fn error_chains_name_every_distinct_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let error = crate::error::Error::Write(kube::Error::Service(Box::new(io)));
        let text = error_chain(&error);
        assert!(text.starts_with("writing the Event: "), "{text}");
        assert!(text.ends_with("connection refused"), "{text}");
    }
}
