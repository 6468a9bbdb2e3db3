//! The Kubernetes Events on Secrets that MachineClasses reference: the
//! finalizer added or removed (`machineClasses.secretFinalizer`), and a
//! failed write. What `kubectl describe secret NAME` shows, for instance why
//! a deleted Secret stays Terminating.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::Resource;
use poolkeeper_bus::{ClassOutcome, ObjectKey};

use crate::notice::{FinalizerWhy, Notice, finalizer_notice};
use crate::settings::RecorderSettings;

/// What a `SecretReconciled` tells of the classes that reference the Secret.
#[derive(Clone, Copy, Debug)]
pub struct Referrers<'a> {
    /// How many MachineClasses reference it.
    pub count: usize,
    /// The first of them, by name.
    pub named: &'a [String],
}

impl Referrers<'_> {
    /// "MachineClass a", "2 MachineClasses: a, b", "5 MachineClasses: a, b,
    /// c, ..."
    fn describe(&self) -> String {
        let names = self.named.join(", ");
        match self.count {
            1 => format!("MachineClass {names}"),
            count if count > self.named.len() => format!("{count} MachineClasses: {names}, ..."),
            count => format!("{count} MachineClasses: {names}"),
        }
    }
}

/// The Event a Secret reconciliation calls for: finalizer changes and
/// failures, as for a class; settled, unused and missing Secrets and
/// conflicts call for none.
pub fn secret_notice(
    outcome: ClassOutcome,
    referrers: Referrers<'_>,
    requeue_after: Duration,
    settings: &RecorderSettings,
) -> Option<Notice> {
    let why = FinalizerWhy {
        added: || format!("referenced by {}", referrers.describe()),
        removed: "no MachineClass references this Secret",
    };
    finalizer_notice(outcome, &settings.secret_finalizer, why, requeue_after)
}

/// The `regarding` reference of a Secret, by UID (how `kubectl describe`
/// finds its Events); no resourceVersion, so repetitions form a series.
pub fn secret_reference(key: &ObjectKey, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(Secret::api_version(&()).into_owned()),
        kind: Some(Secret::kind(&()).into_owned()),
        namespace: key.namespace.clone(),
        name: Some(key.name.clone()),
        uid,
        field_path: None,
        resource_version: None,
    }
}

#[cfg(test)]
mod tests {
    use poolkeeper_bus::{Event, IntoEnumIterator, Requeue};
    use poolkeeper_config::Config;

    use super::*;
    use crate::notice::notices_for;

    fn settings() -> RecorderSettings {
        let mut config = Config::default();
        config.machine_classes.secret_finalizer = "example.com/keep".to_owned();
        RecorderSettings::from(&config)
    }

    fn reconciled(outcome: ClassOutcome, classes: usize, named: &[&str]) -> Event {
        Event::SecretReconciled {
            key: ObjectKey::namespaced("machine-system", "cloud"),
            uid: Some("uid-cloud".into()),
            classes,
            named: named.iter().map(|n| n.to_string()).collect(),
            outcome,
            requeue: Requeue::Short,
            requeue_after: Duration::from_secs(5),
            duration: Duration::ZERO,
        }
    }

    #[test]
    fn each_outcome_maps_to_its_event_or_none() {
        let cases = crate::notice::tests::OUTCOMES;
        assert_eq!(cases.len(), ClassOutcome::iter().count(), "every outcome");
        for (outcome, expected) in cases {
            let actual = notices_for(&reconciled(outcome, 1, &["a"]), &settings()).pop();
            let actual = actual.map(|(regarding, notice)| {
                assert_eq!(
                    regarding,
                    secret_reference(
                        &ObjectKey::namespaced("machine-system", "cloud"),
                        Some("uid-cloud".into())
                    )
                );
                (notice.type_, notice.reason, notice.action)
            });
            assert_eq!(actual, expected, "{outcome}");
        }
    }

    #[test]
    fn notes_name_the_finalizer_and_the_classes() {
        let cases: [(usize, &[&str], &str); 3] = [
            (
                1,
                &["a"],
                "Added finalizer example.com/keep: referenced by MachineClass a",
            ),
            (
                2,
                &["a", "b"],
                "Added finalizer example.com/keep: referenced by 2 MachineClasses: a, b",
            ),
            (
                5,
                &["a", "b", "c"],
                "Added finalizer example.com/keep: referenced by 5 MachineClasses: a, b, c, ...",
            ),
        ];
        for (count, named, note) in cases {
            let named: Vec<String> = named.iter().map(|n| n.to_string()).collect();
            let referrers = Referrers {
                count,
                named: &named,
            };
            let notice = secret_notice(
                ClassOutcome::FinalizerAdded,
                referrers,
                Duration::ZERO,
                &settings(),
            );
            assert_eq!(notice.unwrap().note, note);
        }
        let none = Referrers {
            count: 0,
            named: &[],
        };
        let removed = secret_notice(
            ClassOutcome::FinalizerRemoved,
            none,
            Duration::ZERO,
            &settings(),
        );
        assert_eq!(
            removed.unwrap().note,
            "Removed finalizer example.com/keep: no MachineClass references this Secret"
        );
        let failed = secret_notice(
            ClassOutcome::Error,
            none,
            Duration::from_secs(5),
            &settings(),
        );
        assert!(failed.unwrap().note.ends_with("retrying every 5s"));
    }

    #[test]
    fn the_reference_is_a_core_v1_secret() {
        let reference = secret_reference(&ObjectKey::namespaced("machine-system", "cloud"), None);
        assert_eq!(reference.api_version.as_deref(), Some("v1"));
        assert_eq!(reference.kind.as_deref(), Some("Secret"));
        assert_eq!(reference.uid, None);
    }
}
