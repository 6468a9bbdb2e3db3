//! What a pass does to the Secrets MachineClasses reference.

use kube::core::PartialObjectMeta;

use super::*;

const SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";

type SecretMeta = PartialObjectMeta<k8s_openapi::api::core::v1::Secret>;

/// `class` referencing `secret_ref` and `credentials` (by name, in NS).
fn with_refs(
    mut class: MachineClass,
    secret_ref: Option<&str>,
    credentials: Option<&str>,
) -> MachineClass {
    let reference = |name: &str| {
        serde_json::from_value(json!({"name": name, "namespace": NS})).expect("a reference parses")
    };
    class.secret_ref = secret_ref.map(reference);
    class.credentials_secret_ref = credentials.map(reference);
    class
}

fn secret_meta(name: &str, finalizers: &[&str], deleting: bool) -> SecretMeta {
    let mut meta = json!({
        "metadata": {
            "name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "resourceVersion": "1", "finalizers": finalizers,
        },
    });
    if deleting {
        meta["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    }
    serde_json::from_value(meta).expect("Secret metadata parses")
}

impl Harness {
    /// A Secret in both the index and the fake API server.
    fn secret(&self, name: &str, finalizers: &[&str]) {
        self.fake.insert_secret(&key(name), finalizers);
        self.apply(ResourceKind::Secret, secret_meta(name, finalizers, false));
    }

    /// `(secret, outcome, classes, requeue_after)` of every Secret
    /// reconciliation.
    fn secrets_reconciled(&self) -> Vec<(String, ClassOutcome, usize, Duration)> {
        self.events()
            .into_iter()
            .filter_map(|(_, event)| match event {
                Event::SecretReconciled {
                    key,
                    outcome,
                    classes,
                    requeue_after,
                    ..
                } => Some((key.name, outcome, classes, requeue_after)),
                _ => None,
            })
            .collect()
    }

    fn secret_finalizers(&self, name: &str) -> Vec<String> {
        self.fake
            .secret_finalizers(&key(name))
            .expect("the Secret exists")
    }
}

fn ours() -> Vec<String> {
    vec![SECRET_FINALIZER.to_owned()]
}

/// Both references protect their Secret; the data is untouched; an
/// unreferenced Secret is left alone; settled Secrets requeue after
/// `longRetry`.
#[tokio::test(start_paused = true)]
async fn both_references_are_protected() {
    let a = with_refs(class("a", &[]), Some("cloud"), Some("creds"));
    let h = Harness::start(&[a], &[]);
    h.secret("cloud", &[]);
    h.secret("creds", &["example.com/other"]);
    h.secret("unrelated", &[]);
    let data = h.fake.secret_data(&key("cloud"));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(h.secret_finalizers("cloud"), ours());
    assert_eq!(
        h.secret_finalizers("creds"),
        ["example.com/other", SECRET_FINALIZER]
    );
    assert_eq!(h.secret_finalizers("unrelated"), Vec::<String>::new());
    assert_eq!(h.fake.secret_data(&key("cloud")), data, "data untouched");
    let mut reconciled = h.secrets_reconciled();
    reconciled.sort();
    assert_eq!(
        reconciled,
        [
            ("cloud".into(), ClassOutcome::FinalizerAdded, 1, LONG),
            ("creds".into(), ClassOutcome::FinalizerAdded, 1, LONG),
            ("unrelated".into(), ClassOutcome::Unused, 0, Duration::ZERO),
        ]
    );
    // The class finalizer is the class's alone.
    assert_eq!(h.fake.finalizers(&key("a")), Some(Vec::new()));
    // Steady: the periodic re-check writes nothing.
    h.at(LONG + ms(10)).await;
    assert_eq!(h.fake.calls().len(), 2, "{:?}", h.calls());
    h.stop().await;
}

/// A class that changes its secretRef releases the old Secret and protects
/// the new one; a class that goes releases its Secrets, unless another
/// class still references them.
#[tokio::test(start_paused = true)]
async fn references_that_go_release_their_secret() {
    let a = with_refs(class("a", &[]), Some("cloud"), Some("creds"));
    let b = with_refs(class("b", &[]), None, Some("creds"));
    let h = Harness::start(&[a, b], &[]);
    for name in ["cloud", "creds", "cloud-v2"] {
        h.secret(name, &[]);
    }
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(h.secret_finalizers("cloud"), ours());
    assert_eq!(h.secret_finalizers("creds"), ours());

    h.apply(
        ResourceKind::MachineClass,
        with_refs(class("a", &[]), Some("cloud-v2"), Some("creds")),
    );
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(h.secret_finalizers("cloud"), Vec::<String>::new());
    assert_eq!(h.secret_finalizers("cloud-v2"), ours());

    h.delete::<MachineClass>(ResourceKind::MachineClass, "a");
    h.trigger(TriggerReason::Debounced);
    h.at(ms(30)).await;
    assert_eq!(h.secret_finalizers("cloud-v2"), Vec::<String>::new());
    assert_eq!(
        h.secret_finalizers("creds"),
        ours(),
        "b still references it"
    );

    h.delete::<MachineClass>(ResourceKind::MachineClass, "b");
    h.trigger(TriggerReason::Debounced);
    h.at(ms(40)).await;
    assert_eq!(h.secret_finalizers("creds"), Vec::<String>::new());
    h.stop().await;
}

/// A referenced Secret being deleted keeps the finalizer (and gets none if
/// it had none); once no class references it, it is released.
#[tokio::test(start_paused = true)]
async fn a_deleted_secret_waits_for_its_classes() {
    let a = with_refs(class("a", &[]), Some("cloud"), Some("bare"));
    let h = Harness::start(&[a], &[]);
    h.fake.insert_secret(&key("cloud"), &[SECRET_FINALIZER]);
    h.apply(
        ResourceKind::Secret,
        secret_meta("cloud", &[SECRET_FINALIZER], true),
    );
    h.fake.insert_secret(&key("bare"), &[]);
    h.apply(ResourceKind::Secret, secret_meta("bare", &[], true));
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    assert_eq!(h.fake.calls(), [], "nothing to write");
    assert_eq!(h.secret_finalizers("cloud"), ours());

    h.delete::<MachineClass>(ResourceKind::MachineClass, "a");
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(h.secret_finalizers("cloud"), Vec::<String>::new());
    assert_eq!(h.calls(), [(ms(10), "cloud".into(), Answer::Accepted)]);
    h.stop().await;
}

/// A class may name a Secret that does not exist yet: nothing is written,
/// it is not requeued, and it is protected the moment it shows up.
#[tokio::test(start_paused = true)]
async fn a_missing_secret_is_protected_once_it_appears() {
    let h = Harness::start(&[with_refs(class("a", &[]), Some("later"), None)], &[]);
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    let gone: Vec<(Requeue, Duration)> = h
        .events()
        .into_iter()
        .filter_map(|(_, event)| match event {
            Event::SecretReconciled {
                outcome: ClassOutcome::Gone,
                requeue,
                requeue_after,
                ..
            } => Some((requeue, requeue_after)),
            _ => None,
        })
        .collect();
    assert_eq!(gone, [(Requeue::Never, Duration::ZERO)]);
    h.secret("later", &[]);
    h.trigger(TriggerReason::Debounced);
    h.at(ms(20)).await;
    assert_eq!(h.secret_finalizers("later"), ours());
    h.stop().await;
}

/// A lost race on a Secret is retried after `conflictRetry`, with the index
/// as the watch left it.
#[tokio::test(start_paused = true)]
async fn a_conflict_is_retried() {
    let h = Harness::start(&[with_refs(class("a", &[]), Some("cloud"), None)], &[]);
    h.secret("cloud", &[]);
    h.fake
        .answer_next(&key("cloud"), crate::fake::bare_unprocessable());
    h.trigger(TriggerReason::LeadershipGained);
    h.at(secs(1)).await;
    assert_eq!(
        h.calls(),
        [
            (ms(0), "cloud".into(), Answer::Conflict),
            (CONFLICT, "cloud".into(), Answer::Accepted),
        ]
    );
    assert_eq!(h.secret_finalizers("cloud"), ours());
    h.stop().await;
}

/// `machineClasses.protectSecrets: false`: no Secret is looked at or written.
#[tokio::test(start_paused = true)]
async fn without_protection_secrets_are_left_alone() {
    let mut config = Config::default();
    config.machine_classes.protect_secrets = false;
    let setup = Setup {
        settings: ExecutorSettings::from(&config),
        ..Setup::default()
    };
    let a = with_refs(class("a", &[]), Some("cloud"), None);
    let h = Harness::start_with(&[a], &[], setup);
    h.secret("cloud", &[]);
    h.trigger(TriggerReason::LeadershipGained);
    h.apply(
        ResourceKind::MachineClass,
        with_refs(class("a", &[]), Some("other"), None),
    );
    h.trigger(TriggerReason::Debounced);
    h.at(ms(10)).await;
    assert_eq!(h.secrets_reconciled(), []);
    assert_eq!(h.secret_finalizers("cloud"), Vec::<String>::new());
    h.stop().await;
}

/// A full pass releases a finalizer left behind on a Secret no class
/// references (machine-controller-manager's open issue 650), and does not
/// look at the namespace's other Secrets, which are no work at all.
#[tokio::test(start_paused = true)]
async fn a_full_pass_releases_leftovers_and_skips_other_secrets() {
    let h = Harness::start(&[with_refs(class("a", &[]), Some("cloud"), None)], &[]);
    for (name, finalizers) in [
        ("cloud", &[][..]),
        ("leftover", &[SECRET_FINALIZER][..]),
        ("unrelated", &["example.com/other"][..]),
    ] {
        // In the index as the initial list put them: nothing dirtied.
        h.fake.insert_secret(&key(name), finalizers);
        h.index.apply(secret_meta(name, finalizers, false));
    }
    h.trigger(TriggerReason::LeadershipGained);
    h.at(ms(10)).await;
    let mut reconciled = h.secrets_reconciled();
    reconciled.sort();
    assert_eq!(
        reconciled,
        [
            ("cloud".into(), ClassOutcome::FinalizerAdded, 1, LONG),
            ("leftover".into(), ClassOutcome::FinalizerRemoved, 0, LONG),
        ]
    );
    assert_eq!(h.secret_finalizers("leftover"), Vec::<String>::new());
    assert_eq!(h.secret_finalizers("unrelated"), ["example.com/other"]);
    // Released, it has nothing left to do: the re-check after longRetry
    // forgets it.
    h.at(LONG + ms(10)).await;
    let leftover: Vec<(ClassOutcome, Duration)> = h
        .secrets_reconciled()
        .into_iter()
        .filter(|(name, ..)| name == "leftover")
        .map(|(_, outcome, _, after)| (outcome, after))
        .collect();
    assert_eq!(
        leftover,
        [
            (ClassOutcome::FinalizerRemoved, LONG),
            (ClassOutcome::Unused, Duration::ZERO)
        ]
    );
    h.stop().await;
}
