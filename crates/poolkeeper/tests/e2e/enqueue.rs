//! machine-controller-manager's enqueue semantics since its PR 1056, end to
//! end: Machines being deleted are not enqueued, and a class deleted while
//! Machines use it stays Terminating, is re-checked every `shortRetry`
//! without enqueueing its Machines again, and completes (releasing its
//! Secret) once they are gone.

use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use poolkeeper_api::Machine;
use poolkeeper_bus::{ClassOutcome, EnqueueReason, Event, ObjectKey};
use serde_json::json;

use crate::harness::{Running, metric_sum, next_event, wait_until};
use crate::objects::{FINALIZER, MACHINE_NAMESPACE, create_machine, finalizers_of, machine};
use crate::secrets::{Cluster, class_with, create, create_secret, wait_gone, wait_protected};

/// A finalizer of someone else's that holds a Machine in Terminating.
const HOLD: &str = "example.com/drain";

/// `poolkeeper_executor_machines_enqueued_total{reason}` as `/metrics`
/// reports it once the observer has caught up with `published` (the sum the
/// bus events give).
async fn enqueued_metric(running: &Running, reason: EnqueueReason, published: u64) -> u64 {
    let series = format!(
        "poolkeeper_executor_machines_enqueued_total{{reason=\"{}\"}}",
        reason.as_str()
    );
    wait_until(&format!("{series} at {published}"), || async {
        let value = metric_sum(&running.metrics().await, &series);
        (value == published).then_some(value)
    })
    .await
}

/// How many Machines of `class` a `MachinesEnqueued` for `why` hands on;
/// `None` for any other event.
fn enqueued(event: &Event, class: &ObjectKey, why: EnqueueReason) -> Option<usize> {
    match event {
        Event::MachinesEnqueued {
            class: of,
            reason,
            machines,
        } if of == class && *reason == why => Some(*machines),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_deleted_in_use_waits_without_re_enqueueing() {
    let mut cluster = Cluster::start().await;
    cluster.config.executor.short_retry = Duration::from_secs(1);
    let (classes, secrets) = (cluster.classes(), cluster.secrets());
    let machines = Api::<Machine>::namespaced(cluster.admin(), MACHINE_NAMESPACE);
    create_secret(&secrets, "cloud", "x").await;
    let mut running = Running::start(&cluster.config, &cluster.env).await;
    running.wait_ready().await;

    // Two Machines, one of them already being deleted (held by a finalizer).
    let mut leaving = machine("leaving", "small");
    leaving.metadata.finalizers = Some(vec![HOLD.to_owned()]);
    machines
        .create(&PostParams::default(), &leaving)
        .await
        .expect("creating Machine leaving");
    machines
        .delete("leaving", &DeleteParams::default())
        .await
        .expect("deleting Machine leaving");
    create_machine(&machines, "staying", "small").await;
    create(
        &classes,
        &class_with("small", Some((MACHINE_NAMESPACE, "cloud")), None),
    )
    .await;
    let small = ObjectKey::namespaced(MACHINE_NAMESPACE, "small");
    let added = next_event(
        &mut running.events,
        "MachinesEnqueued{small, FinalizerAdded}",
        |e| enqueued(e, &small, EnqueueReason::FinalizerAdded).is_some(),
    )
    .await;
    assert_eq!(
        enqueued(&added.event, &small, EnqueueReason::FinalizerAdded),
        Some(1),
        "the Machine being deleted is not enqueued"
    );
    wait_protected(&secrets, "cloud", true).await;

    // Deleted while in use: enqueued once, then only re-checked.
    classes
        .delete("small", &DeleteParams::default())
        .await
        .expect("deleting MachineClass small");
    let deleting = next_event(
        &mut running.events,
        "MachinesEnqueued{small, ClassDeleting}",
        |e| enqueued(e, &small, EnqueueReason::ClassDeleting).is_some(),
    )
    .await;
    assert_eq!(
        enqueued(&deleting.event, &small, EnqueueReason::ClassDeleting),
        Some(1)
    );
    let mut rechecks = 0;
    while rechecks < 4 {
        let envelope = next_event(&mut running.events, "a re-check of small", |e| {
            matches!(e, Event::MachineClassReconciled { key, .. } if *key == small)
                || enqueued(e, &small, EnqueueReason::ClassDeleting).is_some()
        })
        .await;
        match &envelope.event {
            Event::MachineClassReconciled { outcome, .. } => {
                assert_eq!(*outcome, ClassOutcome::Unchanged, "kept while in use");
                rechecks += 1;
            }
            other => panic!("enqueued again on a re-check: {other:?}"),
        }
    }
    assert_eq!(
        enqueued_metric(&running, EnqueueReason::ClassDeleting, 1).await,
        1,
        "bounded: one Machine, once, after {rechecks} re-checks"
    );
    let held = classes.get("small").await.expect("small is Terminating");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        held.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER)
    );
    wait_protected(&secrets, "cloud", true).await;
    secrets
        .delete("cloud", &DeleteParams::default())
        .await
        .expect("deleting Secret cloud");

    // The Machines go: the class completes, and with it the Secret.
    machines
        .delete("staying", &DeleteParams::default())
        .await
        .expect("deleting Machine staying");
    let release = json!({"metadata": {"finalizers": null}});
    machines
        .patch("leaving", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("releasing Machine leaving");
    wait_until("MachineClass small is gone", || async {
        finalizers_of(&classes, "small")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    wait_gone(&secrets, "cloud").await;
    assert_eq!(
        enqueued_metric(&running, EnqueueReason::ClassDeleting, 1).await,
        1,
        "nothing more was enqueued while the class waited"
    );
    running.stop().await;
}
