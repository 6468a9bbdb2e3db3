//! How a binding's mode changes what each decision does, for every reason
//! the rules give, over the test cluster (see `cluster()`).

use serde_json::{Value, json};

use super::{POOL, cluster, expr, labelled_pod, pod, required};
use crate::decision::warn_text;
use crate::{Decision, Mode, PlacementPolicy, Reason, mutate, validate};

const EDGE_OK: &str = r#"[
    {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "edge.example.com/link", "operator": "Equal", "value": "flaky", "effect": "NoExecute"}
]"#;

/// The test policy with every binding in `mode`.
fn policy_in(mode: Mode) -> PlacementPolicy {
    let yaml = format!(
        "bindings:
  - {{namespace: shop-hangzhou, nodePool: hangzhou, mode: {mode}}}
  - {{namespace: shop-beijing, nodePool: beijing, mode: {mode}}}
  - {{namespace: shop-empty, nodePool: empty, mode: {mode}}}
  - {{namespace: shop-gone, nodePool: gone, mode: {mode}}}
edgeTolerations:
  - {{key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}}
  - {{key: edge.example.com/link, operator: Equal, value: flaky, effect: NoExecute}}
"
    );
    PlacementPolicy::parse(&yaml).expect("mode policy parses")
}

fn pool_affinity(pool: &str) -> Value {
    required(json!([{"matchExpressions": [expr(POOL, "In", &[pool])]}]))
}

fn tolerant(mut spec: Value) -> Value {
    spec["tolerations"] = serde_json::from_str(EDGE_OK).unwrap();
    spec
}

/// One Pod of each validating reason: `(name, namespace, spec, reason)`.
fn validating_cases() -> Vec<(&'static str, &'static str, Value, Reason)> {
    vec![
        ("unbound", "default", json!({}), Reason::Unbound),
        ("pool missing", "shop-gone", json!({}), Reason::PoolMissing),
        (
            "in pool",
            "shop-beijing",
            pool_affinity("beijing"),
            Reason::InPool,
        ),
        (
            "missing edge tolerations",
            "shop-hangzhou",
            pool_affinity("hangzhou"),
            Reason::MissingEdgeTolerations,
        ),
        (
            "no matching node",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "nowhere"}}),
            Reason::NoMatchingNode,
        ),
        (
            "outside pool",
            "shop-beijing",
            json!({"nodeSelector": {"zone": "a"}}),
            Reason::OutsidePool,
        ),
        (
            "outside an edge pool, tolerant",
            "shop-hangzhou",
            tolerant(json!({"nodeName": "bj-1"})),
            Reason::OutsidePool,
        ),
    ]
}

fn is_denial(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::MissingEdgeTolerations | Reason::NoMatchingNode | Reason::OutsidePool
    )
}

#[test]
fn validation_in_every_mode() {
    let index = cluster();
    for (name, namespace, spec, reason) in validating_cases() {
        let enforced = validate(
            &pod(spec.clone()),
            namespace,
            &index.placement(),
            &policy_in(Mode::Enforce),
        );
        assert_eq!(enforced.reason, reason, "{name}");
        assert_eq!(enforced.allowed, !is_denial(reason), "{name}");
        let denial = enforced.message.clone();
        let bound = reason != Reason::Unbound;
        for mode in [Mode::Enforce, Mode::Warn, Mode::Dryrun] {
            let decision = validate(
                &pod(spec.clone()),
                namespace,
                &index.placement(),
                &policy_in(mode),
            );
            let what = format!("{name} in {mode}");
            assert_eq!(decision.reason, reason, "{what}: the rules' reason stays");
            assert_eq!(decision.pool, enforced.pool, "{what}");
            let expected_mode = if bound { mode } else { Mode::Enforce };
            assert_eq!(decision.mode, expected_mode, "{what}");
            assert_eq!(decision.patch, None, "{what}");
            assert_eq!(decision.enforce_allows(), enforced.allowed, "{what}");
            check_validation_mode(&what, &decision, &enforced, denial.as_deref());
        }
    }
}

/// What `decision` (in its mode) answers, against the `enforced` one.
fn check_validation_mode(
    what: &str,
    decision: &Decision,
    enforced: &Decision,
    denial: Option<&str>,
) {
    match (decision.mode, denial) {
        (Mode::Enforce, _) | (_, None) => {
            let same_but_mode = Decision {
                mode: enforced.mode,
                ..decision.clone()
            };
            assert_eq!(&same_but_mode, enforced, "{what}: nothing to withhold");
        }
        (Mode::Warn, Some(denial)) => {
            assert!(decision.allowed, "{what}: warn admits");
            assert_eq!(decision.message, None, "{what}");
            assert_eq!(decision.withheld_denial.as_deref(), Some(denial), "{what}");
            assert_eq!(decision.warnings, [warn_text(denial)], "{what}");
            assert!(decision.warnings[0].contains(denial), "{what}");
        }
        (Mode::Dryrun, Some(denial)) => {
            assert!(decision.allowed, "{what}: dryrun admits");
            assert_eq!(decision.message, None, "{what}");
            assert!(decision.warnings.is_empty(), "{what}: dryrun is silent");
            assert_eq!(decision.withheld_denial.as_deref(), Some(denial), "{what}");
        }
    }
    assert_eq!(decision.withheld_patch, None, "{what}");
}

/// A patch without its last operation, the one recording the decision (and
/// with it the mode) in the placement annotation.
fn placed(patch: Option<&json_patch::Patch>) -> Option<Vec<json_patch::PatchOperation>> {
    patch.map(|patch| patch.0[..patch.0.len() - 1].to_vec())
}

#[test]
fn mutation_in_every_mode() {
    let index = cluster();
    let cases = [
        ("unbound", "default", json!({}), Reason::Unbound),
        ("pool missing", "shop-gone", json!({}), Reason::PoolMissing),
        ("patched", "shop-hangzhou", json!({}), Reason::Patched),
        (
            "unchanged",
            "shop-beijing",
            pool_affinity("beijing"),
            Reason::Unchanged,
        ),
    ];
    for (name, namespace, spec, reason) in cases {
        let enforced = mutate(
            &pod(spec.clone()),
            namespace,
            &index.placement(),
            &policy_in(Mode::Enforce),
        );
        assert_eq!(enforced.reason, reason, "{name}");
        for mode in [Mode::Enforce, Mode::Warn, Mode::Dryrun] {
            let decision = mutate(
                &pod(spec.clone()),
                namespace,
                &index.placement(),
                &policy_in(mode),
            );
            let what = format!("{name} in {mode}");
            assert!(decision.allowed, "{what}: mutation never denies");
            assert_eq!(decision.reason, reason, "{what}");
            assert_eq!(decision.warnings, enforced.warnings, "{what}");
            assert_eq!(decision.withheld_denial, None, "{what}");
            assert_eq!(
                placed(decision.enforce_patch()),
                placed(enforced.patch.as_ref()),
                "{what}"
            );
            if mode == Mode::Dryrun {
                assert_eq!(decision.patch, None, "{what}: dryrun patches nothing");
                assert_eq!(
                    placed(decision.withheld_patch.as_ref()),
                    placed(enforced.patch.as_ref()),
                    "{what}"
                );
                assert_eq!(decision.is_withheld(), reason == Reason::Patched, "{what}");
            } else {
                assert_eq!(
                    placed(decision.patch.as_ref()),
                    placed(enforced.patch.as_ref()),
                    "{what}: {mode} patches"
                );
                assert_eq!(decision.withheld_patch, None, "{what}");
                assert!(!decision.is_withheld(), "{what}");
            }
        }
    }
}

#[test]
fn a_labelled_pod_takes_its_namespace_mode_or_the_default() {
    let index = cluster();
    let yaml = "bindings:\n  - {namespace: shop-beijing, nodePool: beijing, mode: warn}\n";
    let labels = json!({(POOL): "beijing"});
    let outside = json!({"nodeSelector": {"zone": "a"}});
    for (default_mode, namespace, expected) in [
        (Mode::Dryrun, "shop-beijing", Mode::Warn),
        (Mode::Dryrun, "elsewhere", Mode::Dryrun),
        (Mode::Enforce, "elsewhere", Mode::Enforce),
    ] {
        let policy = PlacementPolicy::parse_with_default_mode(yaml, default_mode).unwrap();
        let pod = labelled_pod(labels.clone(), outside.clone());
        let decision = validate(&pod, namespace, &index.placement(), &policy);
        assert_eq!(decision.reason, Reason::OutsidePool, "{namespace}");
        assert_eq!(
            decision.mode, expected,
            "{namespace}, default {default_mode}"
        );
        assert_eq!(decision.allowed, expected != Mode::Enforce, "{namespace}");
    }
}

#[test]
fn with_mode_is_the_whole_mode_logic() {
    let denied = Decision::deny(Reason::OutsidePool, "out");
    let warned = denied.clone().with_mode(Mode::Warn);
    assert!(warned.allowed && warned.message.is_none());
    assert_eq!(warned.warnings, [warn_text("out")]);
    assert_eq!(
        warn_text("out"),
        "poolkeeper would deny this pod (binding mode warn): out"
    );
    let dry = denied.clone().with_mode(Mode::Dryrun);
    assert!(dry.allowed && dry.warnings.is_empty());
    assert_eq!(dry.withheld_denial.as_deref(), Some("out"));
    assert_eq!(denied.clone().with_mode(Mode::Enforce), denied);
    let allowed = Decision::allow(Reason::InPool);
    assert_eq!(allowed.mode, Mode::Enforce);
    assert!(!allowed.clone().with_mode(Mode::Dryrun).is_withheld());
}
