//! Reading the placement policy.

use std::collections::BTreeMap;

use poolkeeper_index::IndexResource;

use crate::{Mode, PlacementError, PlacementPolicy};

use super::pools_of;

fn problems(yaml: &str) -> Vec<String> {
    match PlacementPolicy::parse(yaml) {
        Err(PlacementError::PolicyInvalid { problems, .. }) => problems,
        other => panic!("expected PolicyInvalid for {yaml:?}, got {other:?}"),
    }
}

/// The message of a syntax error, without the origin.
fn syntax(yaml: &str) -> String {
    match PlacementPolicy::parse(yaml) {
        Err(error @ PlacementError::PolicySyntax { .. }) => error
            .to_string()
            .strip_prefix("placement policy: ")
            .expect("the message starts with the origin")
            .to_owned(),
        other => panic!("expected PolicySyntax for {yaml:?}, got {other:?}"),
    }
}

#[test]
fn empty_documents_are_the_empty_policy() {
    for yaml in [
        "",
        "\n",
        "# nothing yet\n",
        "null",
        "~",
        "---\n",
        "bindings: []\nedgeTolerations: []\n",
        "bindings:\nedgeTolerations:\n",
    ] {
        let policy = PlacementPolicy::parse(yaml).unwrap_or_else(|e| panic!("{yaml:?}: {e}"));
        assert!(policy.is_empty(), "{yaml:?}");
    }
}

#[test]
fn the_design_example() {
    let policy = PlacementPolicy::parse(
        "bindings:\n  - namespace: shop-hangzhou\n    nodePool: hangzhou\nedgeTolerations:\n  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}\n",
    )
    .unwrap();
    assert_eq!(
        pools_of(&policy, "shop-hangzhou").as_deref(),
        Some("hangzhou")
    );
    assert_eq!(pools_of(&policy, "default").as_deref(), None);
    assert_eq!(
        policy
            .bindings()
            .map(|(ns, binding)| (ns, binding.pools.joined(), binding.mode))
            .collect::<Vec<_>>(),
        [("shop-hangzhou", "hangzhou".to_owned(), Mode::Enforce)]
    );
    let [toleration] = policy.edge_tolerations() else {
        panic!("one toleration expected");
    };
    assert_eq!(
        toleration.key.as_deref(),
        Some("node-role.kubernetes.io/edge")
    );
    assert_eq!(toleration.operator.as_deref(), Some("Exists"));
    assert_eq!(toleration.effect.as_deref(), Some("NoSchedule"));
    assert_eq!(toleration.value, None);
}

#[test]
fn several_namespaces_may_share_a_pool() {
    let policy = PlacementPolicy::parse(
        "bindings:\n- {namespace: a, nodePool: p}\n- {namespace: b, nodePool: p}\n",
    )
    .unwrap();
    assert_eq!(pools_of(&policy, "a").as_deref(), Some("p"));
    assert_eq!(pools_of(&policy, "b").as_deref(), Some("p"));
}

#[test]
fn shape_errors_carry_the_position() {
    let cases = [
        (
            "foo: 1\n",
            "unknown field `foo`, expected one of bindings, edgeTolerations at line 1, column 1",
        ),
        (
            "bindings:\n  - namespace: a\n    nodepool: b\n",
            "unknown field `nodepool`, expected one of namespace, nodePool, nodePools, mode, constraints, exceptions at line 3, column 5",
        ),
        (
            "edgeTolerations:\n  - {key: a, operator: Exists, efect: NoSchedule}\n",
            "unknown field `efect`",
        ),
        ("bindings: 5\n", "line 1, column 11"),
        ("bindings: [\n", "line 1, column 11"),
        ("bindings: []\nbindings: []\n", "duplicate mapping key"),
        ("- a\n- b\n", "line 1"),
        (
            "edgeTolerations:\n  - {key: a, operator: Exists, effect: NoExecute, tolerationSeconds: soon}\n",
            "line 2",
        ),
    ];
    for (yaml, expected) in cases {
        let message = syntax(yaml);
        assert!(
            message.contains(expected),
            "{yaml:?}: {message:?} lacks {expected:?}"
        );
        assert!(!message.contains('\n'), "one line: {message:?}");
    }
}

#[test]
fn pool_sets() {
    let policy = PlacementPolicy::parse(
        "bindings:\n - {namespace: a, nodePools: [q, p, q]}\n - {namespace: b, nodePools: [p]}\n",
    )
    .unwrap();
    assert_eq!(pools_of(&policy, "a").as_deref(), Some("p,q"));
    assert_eq!(pools_of(&policy, "b").as_deref(), Some("p"));
    let cases: [(&str, &[&str]); 5] = [
        (
            "bindings:\n - {namespace: a}\n",
            &["bindings[0]: names no pool: add nodePool or nodePools"],
        ),
        (
            "bindings:\n - {namespace: a, nodePool: p, nodePools: [q]}\n",
            &["bindings[0]: names both nodePool and nodePools; use one of them"],
        ),
        (
            "bindings:\n - {namespace: a, nodePools: []}\n",
            &["bindings[0].nodePools: must not be empty"],
        ),
        (
            "bindings:\n - {namespace: a, nodePools: [p, '', 'x y']}\n",
            &[
                "bindings[0].nodePools[1]: must not be empty",
                "bindings[0].nodePools[2]: \"x y\" cannot be a pool label value: a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ],
        ),
        (
            "bindings:\n - {namespace: kube-system, nodePools: [p, q]}\n",
            &[
                "bindings[0].namespace: \"kube-system\" is excluded from placement (placement.excludedNamespaces and poolkeeper's own namespace) and can never be bound",
            ],
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(problems(yaml), expected, "{yaml}");
    }
}

#[test]
fn binding_rules() {
    assert_eq!(
        problems(
            "bindings:\n - {namespace: a, nodePool: p}\n - {namespace: b, nodePool: q}\n - {namespace: a, nodePool: r}\n"
        ),
        [
            "bindings[2].namespace: duplicate binding for namespace \"a\" (first bound at bindings[0])"
        ]
    );
    assert_eq!(
        problems("bindings:\n - {namespace: a, nodePool: p}\n - {namespace: a, nodePool: p}\n"),
        [
            "bindings[1].namespace: duplicate binding for namespace \"a\" (first bound at bindings[0])"
        ],
        "even an identical repeat is a mistake worth fixing"
    );
    let cases = [
        (
            "{namespace: Shop, nodePool: p}",
            "bindings[0].namespace: \"Shop\" is not a valid namespace name",
        ),
        (
            "{namespace: '', nodePool: p}",
            "bindings[0].namespace: \"\" is not a valid namespace name",
        ),
        ("{namespace: a.b, nodePool: p}", "bindings[0].namespace"),
        (
            "{namespace: a, nodePool: ''}",
            "bindings[0].nodePool: must not be empty",
        ),
        (
            "{namespace: a, nodePool: 'two words'}",
            "bindings[0].nodePool: \"two words\" cannot be a pool label value",
        ),
        ("{namespace: a, nodePool: -edge}", "bindings[0].nodePool"),
    ];
    for (entry, expected) in cases {
        let found = problems(&format!("bindings:\n - {entry}\n"));
        assert!(
            found.len() == 1 && found[0].starts_with(expected),
            "{entry}: {found:?}"
        );
    }
}

#[test]
fn toleration_rules_follow_the_api_server() {
    let cases = [
        (
            "{operator: Equal, value: x}",
            "edgeTolerations[0].operator: must be Exists when `key` is empty",
        ),
        (
            "{value: x}",
            "edgeTolerations[0].operator: must be Exists when `key` is empty",
        ),
        (
            "{key: k, operator: Exists, value: x}",
            "edgeTolerations[0].value: must be empty when `operator` is 'Exists'",
        ),
        (
            "{key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}",
            "edgeTolerations[0].effect: must be 'NoExecute'",
        ),
        (
            "{key: k, operator: Gt, value: '1'}",
            "edgeTolerations[0].operator: unsupported value \"Gt\"",
        ),
        (
            "{key: k, operator: exists}",
            "edgeTolerations[0].operator: unsupported value \"exists\"",
        ),
        (
            "{key: k, operator: Exists, effect: NoScheduled}",
            "edgeTolerations[0].effect: unsupported value \"NoScheduled\"",
        ),
        (
            "{key: 'bad key', operator: Exists}",
            "edgeTolerations[0].key: \"bad key\"",
        ),
        (
            "{key: k, value: 'a b'}",
            "edgeTolerations[0].value: \"a b\"",
        ),
    ];
    for (entry, expected) in cases {
        let found = problems(&format!("edgeTolerations:\n - {entry}\n"));
        assert!(
            found.len() == 1 && found[0].starts_with(expected),
            "{entry}: {found:?}"
        );
    }
    for valid in [
        "{operator: Exists}",
        "{key: k}",
        "{key: k, value: v, effect: PreferNoSchedule}",
        "{key: k, operator: Equal, value: v, effect: NoExecute, tolerationSeconds: 300}",
        "{key: example.com/k, operator: Exists, effect: NoExecute}",
    ] {
        let yaml = format!("edgeTolerations:\n - {valid}\n");
        assert!(PlacementPolicy::parse(&yaml).is_ok(), "{valid}");
    }
}

#[test]
fn every_problem_is_reported() {
    let found = problems(
        "bindings:\n - {namespace: A, nodePool: ''}\n - {namespace: b, nodePool: p}\nedgeTolerations:\n - {operator: Equal}\n - {key: k, operator: Exists, value: v}\n",
    );
    assert_eq!(found.len(), 4, "{found:?}");
    let error = PlacementPolicy::parse("bindings:\n - {namespace: A, nodePool: p}\n").unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("placement policy is invalid: bindings[0].namespace"),
        "{error}"
    );
}

#[test]
fn from_a_config_map() {
    let source = super::policy_source();
    assert_eq!(
        source.to_string(),
        "ConfigMap poolkeeper-system/poolkeeper-placement key placement.yaml"
    );
    assert!(
        PlacementPolicy::from_config_map_data(None, &source)
            .unwrap()
            .is_empty()
    );

    let mut data = BTreeMap::new();
    data.insert("other.yaml".to_owned(), "not: [valid".to_owned());
    assert!(
        PlacementPolicy::from_config_map_data(Some(&data), &source)
            .unwrap()
            .is_empty(),
        "missing key is empty"
    );

    data.insert(
        "placement.yaml".to_owned(),
        "bindings: [{namespace: a, nodePool: p}]".to_owned(),
    );
    let policy = PlacementPolicy::from_config_map_data(Some(&data), &source).unwrap();
    assert_eq!(pools_of(&policy, "a").as_deref(), Some("p"));

    data.insert(
        "placement.yaml".to_owned(),
        "bindings: [{namespace: a, pool: p}]".to_owned(),
    );
    let error = PlacementPolicy::from_config_map_data(Some(&data), &source).unwrap_err();
    assert!(
        error.to_string()
            == "ConfigMap poolkeeper-system/poolkeeper-placement key placement.yaml: unknown field `pool`, \
                expected one of namespace, nodePool, nodePools, mode, constraints, exceptions at line 1, column 27",
        "{error}"
    );
}

#[test]
fn loaded_from_the_index() {
    let index = poolkeeper_index::Index::new(super::POOL);
    let source = super::policy_source();
    assert!(
        PlacementPolicy::load(&index.placement(), &source)
            .unwrap()
            .is_empty()
    );
    index.apply(super::policy_config_map(&source, super::POLICY));
    let policy = PlacementPolicy::load(&index.placement(), &source).unwrap();
    assert_eq!(policy, super::policy());
    assert_eq!(policy.edge_tolerations().len(), 2);
}

#[test]
fn binding_modes_and_the_default_mode() {
    let yaml = "bindings:
  - {namespace: a, nodePool: p}
  - {namespace: b, nodePool: p, mode: enforce}
  - {namespace: c, nodePool: p, mode: warn}
  - {namespace: d, nodePool: p, mode: dryrun}
";
    let table = [
        (
            Mode::Enforce,
            [Mode::Enforce, Mode::Enforce, Mode::Warn, Mode::Dryrun],
        ),
        (
            Mode::Warn,
            [Mode::Warn, Mode::Enforce, Mode::Warn, Mode::Dryrun],
        ),
        (
            Mode::Dryrun,
            [Mode::Dryrun, Mode::Enforce, Mode::Warn, Mode::Dryrun],
        ),
    ];
    for (default_mode, expected) in table {
        let policy = PlacementPolicy::parse_with_default_mode(yaml, default_mode).unwrap();
        let modes: Vec<Mode> = ["a", "b", "c", "d"]
            .iter()
            .map(|ns| policy.binding(ns).unwrap().mode)
            .collect();
        assert_eq!(modes, expected, "default {default_mode}");
        assert_eq!(policy.default_mode(), default_mode);
        // A namespace without a binding (a Pod bound by its own label) gets
        // the default mode.
        assert_eq!(policy.mode_for_namespace("unbound"), default_mode);
        assert_eq!(policy.mode_for_namespace("d"), Mode::Dryrun);
    }
    assert_eq!(
        PlacementPolicy::parse(yaml).unwrap().default_mode(),
        Mode::Enforce
    );
    assert_eq!(PlacementPolicy::default().default_mode(), Mode::Enforce);
    assert_eq!(
        PlacementPolicy::parse_with_default_mode("", Mode::Dryrun)
            .unwrap()
            .default_mode(),
        Mode::Dryrun,
        "the empty policy keeps the default mode"
    );
}

#[test]
fn an_unknown_mode_is_an_error_with_its_position() {
    let cases = [
        (
            "bindings:\n  - namespace: a\n    nodePool: p\n    mode: warning\n",
            "unknown variant `warning`, expected one of enforce, warn, dryrun at line 4, column 11",
        ),
        (
            "bindings:\n  - {namespace: a, nodePool: p, mode: Enforce}\n",
            "unknown variant `Enforce`",
        ),
        (
            "bindings:\n  - {namespace: a, nodePool: p, mode: 1}\n",
            "line 2",
        ),
        (
            "bindings:\n  - {namespace: a, nodePool: p, mode: [warn]}\n",
            "line 2",
        ),
    ];
    for (yaml, expected) in cases {
        let message = syntax(yaml);
        assert!(
            message.contains(expected),
            "{yaml:?}: {message:?} lacks {expected:?}"
        );
    }
}

#[test]
fn the_source_carries_the_configured_default_mode() {
    let mut config = poolkeeper_config::Config::default();
    assert_eq!(
        crate::PolicySource::from(&config.placement).default_mode,
        Mode::Enforce
    );
    config.placement.default_mode = Mode::Dryrun;
    let source = crate::PolicySource::from(&config.placement);
    assert_eq!(source.default_mode, Mode::Dryrun);
    assert_eq!(
        PlacementPolicy::from_config_map_data(None, &source)
            .unwrap()
            .mode_for_namespace("x"),
        Mode::Dryrun,
        "a missing ConfigMap is the empty policy with the default mode"
    );
    let mut data = BTreeMap::new();
    data.insert(
        source.key.clone(),
        "bindings: [{namespace: a, nodePool: p}]".to_owned(),
    );
    let policy = PlacementPolicy::from_config_map_data(Some(&data), &source).unwrap();
    assert_eq!(policy.binding("a").unwrap().mode, Mode::Dryrun);
}
