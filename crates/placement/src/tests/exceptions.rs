//! PlacementExceptions over the test cluster (see `cluster()`): which
//! exceptions select a Pod, that only a binding with `exceptions: allowed`
//! lets them apply, what each allowance does to the mutating and
//! validating decisions and to the audit, expiry, and `explain`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use poolkeeper_api::{ExceptionAllowance, PlacementException, PlacementExceptionSpec};
use poolkeeper_index::{Index, IndexResource};
use serde_json::{Value, json};

use super::{POOL, cluster, to_pod};
use crate::{
    Decision, PlacementPolicy, Reason, applied_exceptions, audit, explain, mutate, validate,
};

const POLICY: &str = "
bindings:
  - {namespace: shop-open, nodePool: hangzhou, exceptions: allowed}
  - {namespace: shop-warn, nodePool: hangzhou, mode: warn, exceptions: allowed}
  - {namespace: shop-closed, nodePool: hangzhou}
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
";

/// The time the views of these tests are taken at.
const NOW: i64 = 1_800_000_000;

fn policy() -> PlacementPolicy {
    PlacementPolicy::parse(POLICY).unwrap()
}

struct Allow {
    skip_mutation: bool,
    skip_validation: bool,
    pools: &'static [&'static str],
}

const SKIP_VALIDATION: Allow = Allow {
    skip_mutation: false,
    skip_validation: true,
    pools: &[],
};

fn exception(
    namespace: &str,
    name: &str,
    app: &str,
    allow: Allow,
    expires_at: Option<i64>,
) -> PlacementException {
    let spec = PlacementExceptionSpec {
        selector: LabelSelector {
            match_labels: Some([("app".to_owned(), app.to_owned())].into()),
            match_expressions: None,
        },
        reason: format!("{name} may leave the pool"),
        expires_at: expires_at.map(|at| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(at).unwrap(),
            )
        }),
        allow: ExceptionAllowance {
            skip_mutation: allow.skip_mutation,
            skip_validation: allow.skip_validation,
            pools: allow.pools.iter().map(|p| (*p).to_owned()).collect(),
        },
    };
    let mut exception = PlacementException::new(name, spec);
    exception.metadata.namespace = Some(namespace.to_owned());
    exception
}

/// The test cluster with the exceptions of every case below.
fn excepted_cluster() -> Index {
    let index = cluster();
    let exceptions = [
        exception("shop-open", "debug", "debug", SKIP_VALIDATION, None),
        exception(
            "shop-open",
            "legacy",
            "legacy",
            Allow {
                skip_mutation: true,
                skip_validation: true,
                pools: &[],
            },
            None,
        ),
        exception(
            "shop-open",
            "burst",
            "burst",
            Allow {
                skip_mutation: false,
                skip_validation: false,
                pools: &["beijing"],
            },
            None,
        ),
        exception("shop-open", "old", "old", SKIP_VALIDATION, Some(NOW - 1)),
        exception(
            "shop-open",
            "later",
            "later",
            SKIP_VALIDATION,
            Some(NOW + 60),
        ),
        exception("shop-warn", "debug", "debug", SKIP_VALIDATION, None),
        exception("shop-closed", "debug", "debug", SKIP_VALIDATION, None),
    ];
    for exception in exceptions {
        IndexResource::<PlacementException>::apply(&index, exception);
    }
    index
}

/// A Pod labelled `app` that tolerates the Edge pools, in `namespace`,
/// with `spec` merged in.
fn app_pod(namespace: &str, app: &str, spec: Value) -> crate::PodPlacement {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": app, "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "tolerations": [{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]
        }
    });
    if let (Some(target), Value::Object(extra)) = (pod["spec"].as_object_mut(), spec) {
        target.extend(extra);
    }
    to_pod(&pod)
}

fn on_beijing() -> Value {
    json!({"nodeSelector": {POOL: "beijing"}})
}

/// `(allowed, reason, exceptions counted)` of a decision.
type Outcome<'d> = (bool, Reason, Vec<&'d str>);

fn outcome(decision: &Decision) -> Outcome<'_> {
    (
        decision.allowed,
        decision.reason,
        decision.exceptions.iter().map(String::as_str).collect(),
    )
}

#[test]
fn only_a_binding_that_allows_exceptions_lets_them_apply() {
    let index = excepted_cluster();
    let view = index.placement_at(NOW);
    let policy = policy();
    let cases: [(&str, &str, Value, Outcome<'_>); 9] = [
        (
            "shop-open",
            "debug",
            on_beijing(),
            (true, Reason::Excepted, vec!["debug"]),
        ),
        (
            "shop-closed",
            "debug",
            on_beijing(),
            (false, Reason::OutsidePool, vec![]),
        ),
        (
            "shop-open",
            "web",
            on_beijing(),
            (false, Reason::OutsidePool, vec![]),
        ),
        (
            "shop-open",
            "old",
            on_beijing(),
            (false, Reason::OutsidePool, vec![]),
        ),
        (
            "shop-open",
            "later",
            on_beijing(),
            (true, Reason::Excepted, vec!["later"]),
        ),
        (
            "shop-open",
            "burst",
            on_beijing(),
            (true, Reason::InPool, vec!["burst"]),
        ),
        (
            "shop-open",
            "burst",
            json!({"nodeSelector": {"zone": "a"}}),
            (false, Reason::OutsidePool, vec!["burst"]),
        ),
        (
            "shop-open",
            "legacy",
            on_beijing(),
            (true, Reason::Excepted, vec!["legacy"]),
        ),
        // warn: the exception, not the mode, admits it: no warning.
        (
            "shop-warn",
            "debug",
            on_beijing(),
            (true, Reason::Excepted, vec!["debug"]),
        ),
    ];
    for (namespace, app, spec, expected) in cases {
        let pod = app_pod(namespace, app, spec);
        let decision = validate(&pod, namespace, &view, &policy);
        assert_eq!(outcome(&decision), expected, "{namespace}/{app}");
        if decision.reason == Reason::Excepted {
            assert!(
                decision.warnings.is_empty(),
                "{namespace}/{app}: {decision:?}"
            );
        }
    }
}

#[test]
fn a_denial_says_which_exception_the_binding_ignores() {
    let index = excepted_cluster();
    let view = index.placement_at(NOW);
    let pod = app_pod("shop-closed", "debug", on_beijing());
    let decision = validate(&pod, "shop-closed", &view, &policy());
    let message = decision.message.unwrap();
    assert!(
        message.ends_with(
            " (PlacementException \"debug\" selects this pod, but namespace \"shop-closed\"'s binding does not allow exceptions)"
        ),
        "{message}"
    );
    let unselected = app_pod("shop-closed", "web", on_beijing());
    let message = validate(&unselected, "shop-closed", &view, &policy())
        .message
        .unwrap();
    assert!(!message.contains("PlacementException"), "{message}");
}

#[test]
fn skipping_the_mutation_writes_only_the_record_that_names_the_exception() {
    let index = excepted_cluster();
    let view = index.placement_at(NOW);
    let policy = policy();

    let legacy = mutate(
        &app_pod("shop-open", "legacy", json!({})),
        "shop-open",
        &view,
        &policy,
    );
    assert_eq!(outcome(&legacy), (true, Reason::Excepted, vec!["legacy"]));
    let patch = serde_json::to_value(legacy.patch.unwrap()).unwrap();
    assert_eq!(
        patch,
        json!([{
            "op": "add",
            "path": "/metadata/annotations",
            "value": {"poolkeeper.io/placement": "{\"pool\":\"hangzhou\",\"binding\":\"namespace\",\"mode\":\"enforce\",\"constraints\":\"judge\",\"exceptions\":\"legacy\"}"}
        }])
    );

    // Validation only: the Pod is placed as any other, nothing counted.
    let debug = mutate(
        &app_pod("shop-open", "debug", json!({})),
        "shop-open",
        &view,
        &policy,
    );
    assert_eq!(outcome(&debug), (true, Reason::Patched, vec![]));

    // Extra pools: the requirement names both, and the record the exception.
    let burst = mutate(
        &app_pod("shop-open", "burst", json!({})),
        "shop-open",
        &view,
        &policy,
    );
    assert_eq!(outcome(&burst), (true, Reason::Patched, vec!["burst"]));
    assert_eq!(burst.pool.as_deref(), Some("beijing,hangzhou"));
    let patch = serde_json::to_value(burst.patch.unwrap())
        .unwrap()
        .to_string();
    assert!(patch.contains(r#"\"exceptions\":\"burst\""#), "{patch}");

    // A closed binding ignores the exception: placed in its pool.
    let closed = mutate(
        &app_pod("shop-closed", "legacy", json!({})),
        "shop-closed",
        &view,
        &policy,
    );
    assert_eq!(outcome(&closed), (true, Reason::Patched, vec![]));
}

#[test]
fn the_audit_applies_them_alike_and_reports_what_an_expired_one_let_out() {
    let index = excepted_cluster();
    let policy = policy();
    let running = |app: &str| app_pod("shop-open", app, json!({"nodeName": "bj-1"}));
    let view = index.placement_at(NOW);
    assert!(audit(&running("debug"), &view, &policy).allowed);
    assert!(audit(&running("burst"), &view, &policy).allowed);
    assert_eq!(
        outcome(&audit(&running("old"), &view, &policy)).1,
        Reason::OutsidePool
    );
    assert!(audit(&running("later"), &view, &policy).allowed);
    drop(view);
    let later = index.placement_at(NOW + 60);
    assert_eq!(
        outcome(&audit(&running("later"), &later, &policy)).1,
        Reason::OutsidePool
    );
}

#[test]
fn exceptions_merge_and_need_the_binding_to_allow_them() {
    let index = excepted_cluster();
    let view = index.placement_at(NOW);
    let policy = policy();
    let labels = [("app".to_owned(), "burst".to_owned())].into();
    let open = applied_exceptions(&labels, "shop-open", policy.binding("shop-open"), &view);
    assert_eq!(open.names, ["burst"]);
    assert_eq!(open.pools, ["beijing"]);
    assert_eq!(open.mutation, ["burst"]);
    assert_eq!(open.validation, ["burst"]);
    let closed = applied_exceptions(&labels, "shop-closed", policy.binding("shop-closed"), &view);
    assert!(closed.is_empty());
    let unbound = applied_exceptions(&labels, "elsewhere", None, &view);
    assert!(unbound.is_empty());
}

#[test]
fn selectors_match_as_kubernetes_matches_them() {
    let index = cluster();
    let mut exception = exception("shop-open", "tiered", "-", SKIP_VALIDATION, None);
    exception.spec.selector = LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![
            LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["batch".into(), "debug".into()]),
            },
            LabelSelectorRequirement {
                key: "pinned".into(),
                operator: "DoesNotExist".into(),
                values: None,
            },
        ]),
    };
    IndexResource::<PlacementException>::apply(&index, exception);
    let view = index.placement_at(NOW);
    let policy = policy();
    let cases = [
        (json!({"tier": "batch"}), true),
        (json!({"tier": "debug", "app": "x"}), true),
        (json!({"tier": "web"}), false),
        (json!({"tier": "batch", "pinned": "yes"}), false),
        (json!({}), false),
    ];
    for (labels, selected) in cases {
        let labels = serde_json::from_value(labels.clone()).unwrap();
        let applied = applied_exceptions(&labels, "shop-open", policy.binding("shop-open"), &view);
        assert_eq!(!applied.is_empty(), selected, "{labels:?}");
    }
}

#[test]
fn explain_names_the_exception_or_why_it_is_ignored() {
    let index = excepted_cluster();
    let view = index.placement_at(NOW);
    let policy = policy();
    let open = explain(
        &app_pod("shop-open", "debug", on_beijing()),
        "shop-open",
        &view,
        &policy,
    );
    let binding = open.binding.unwrap();
    assert_eq!(
        binding.exceptions,
        ["debug: skips the validation (debug may leave the pool)"]
    );
    assert!(binding.ignored_exceptions.is_empty());
    assert!(open.validate.allowed);

    let closed = explain(
        &app_pod("shop-closed", "debug", on_beijing()),
        "shop-closed",
        &view,
        &policy,
    );
    let binding = closed.binding.unwrap();
    assert!(binding.exceptions.is_empty());
    assert_eq!(
        binding.ignored_exceptions,
        ["debug: skips the validation (debug may leave the pool)"]
    );
    assert!(!closed.validate.allowed);
}
