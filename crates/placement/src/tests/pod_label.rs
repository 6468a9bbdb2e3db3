//! A Pod's own pool label against its namespace's binding, over the test
//! cluster (see `cluster()`): in a bound namespace the label may only narrow
//! the binding to pools inside it; naming a pool outside it is refused by
//! the validating decisions (in the binding's mode) while the binding still
//! places the Pod; in a namespace without binding the label binds.

use std::collections::BTreeMap;

use poolkeeper_config::{Mode, NamespaceLabels};
use poolkeeper_index::{Index, Namespace};
use serde_json::{Value, json};

use super::workloads::workload;
use super::{POOL, cluster, labelled_pod, pod_json, to_pod};
use crate::{
    BindingSource, Decision, PlacementPolicy, Reason, Workload, WorkloadKind, audit, explain,
    mutate, mutate_workload, validate, validate_workload,
};

const TENANTS: &str = "
bindings:
  - {namespace: shop-hangzhou, nodePool: hangzhou}
  - {namespace: shop-both, nodePools: [hangzhou, beijing]}
  - {namespace: shop-warn, nodePool: hangzhou, mode: warn}
  - {namespace: shop-dry, nodePool: hangzhou, mode: dryrun}
  - {namespace: shop-gone, nodePool: gone}
edgeTolerations:
  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}
";

/// The bindings above, plus `team` bound to hangzhou by its own labels.
fn tenants() -> PlacementPolicy {
    let team = Namespace {
        name: "team".to_owned(),
        uid: "uid-team".to_owned(),
        labels: BTreeMap::from([(POOL.to_owned(), "hangzhou".to_owned())]),
    };
    PlacementPolicy::parse_with_default_mode(TENANTS, Mode::Enforce)
        .unwrap()
        .with_namespace_labels([&team], &NamespaceLabels::default())
}

/// A Pod labelled `label` (none when empty) that tolerates the Edge pools,
/// so that only the pool decides.
fn tenant_pod(label: &str) -> Value {
    let labels = match label {
        "" => json!({}),
        pool => json!({POOL: pool}),
    };
    pod_json(
        labels,
        json!({"tolerations": [{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]}),
    )
}

/// The pools of the required affinity a patch adds (empty: none).
fn affinity_pools(decision: &Decision) -> Vec<String> {
    let Some(patch) = decision.enforce_patch() else {
        return Vec::new();
    };
    let patch = serde_json::to_value(patch).unwrap();
    patch
        .as_array()
        .unwrap()
        .iter()
        .find(|op| op["path"] == "/spec/affinity")
        .and_then(|op| {
            op["value"].pointer(
                "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0/values",
            )
        })
        .and_then(Value::as_array)
        .map(|values| {
            values
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Mutates `pod` in `namespace`, applies the patch as the API server would
/// (the one the mode lets through), and validates the result.
fn admit(index: &Index, namespace: &str, pod: &Value) -> (Decision, Decision) {
    let view = index.placement();
    let policy = tenants();
    let mutation = mutate(&to_pod(pod), namespace, &view, &policy);
    let mut admitted = pod.clone();
    if let Some(patch) = &mutation.patch {
        json_patch::patch(&mut admitted, &patch.0).unwrap();
    }
    let validation = validate(&to_pod(&admitted), namespace, &view, &policy);
    (mutation, validation)
}

const REFUSED: &str = "pod's label apps.openyurt.io/nodepool=beijing names node pool \"beijing\", but namespace \"shop-hangzhou\" is bound to node pool \"hangzhou\": a pod's pool label may only name pools of its namespace's binding";

#[test]
fn a_pod_label_narrows_its_namespace_binding_and_cannot_leave_it() {
    struct Case {
        what: &'static str,
        namespace: &'static str,
        label: &'static str,
        /// The pools the mutation's affinity names (as `enforce` would
        /// patch: `dryrun` withholds it).
        placed: &'static [&'static str],
        /// The decisions' pool.
        pool: Option<&'static str>,
        reason: Reason,
        allowed: bool,
        mode: Mode,
    }
    let case = |what, namespace, label, placed, pool, reason, allowed, mode| Case {
        what,
        namespace,
        label,
        placed,
        pool,
        reason,
        allowed,
        mode,
    };
    use Reason::{InPool, LabelOutsideBinding, Unbound};
    let cases = [
        case(
            "label inside a one-pool binding",
            "shop-hangzhou",
            "hangzhou",
            &["hangzhou"],
            Some("hangzhou"),
            InPool,
            true,
            Mode::Enforce,
        ),
        case(
            "label narrows a two-pool binding",
            "shop-both",
            "beijing",
            &["beijing"],
            Some("beijing"),
            InPool,
            true,
            Mode::Enforce,
        ),
        case(
            "no label: the whole binding",
            "shop-both",
            "",
            &["beijing", "hangzhou"],
            Some("beijing,hangzhou"),
            InPool,
            true,
            Mode::Enforce,
        ),
        case(
            "label outside: the binding places, validate refuses",
            "shop-hangzhou",
            "beijing",
            &["hangzhou"],
            Some("hangzhou"),
            LabelOutsideBinding,
            false,
            Mode::Enforce,
        ),
        case(
            "label outside a two-pool binding, pool unknown",
            "shop-both",
            "elsewhere",
            &["beijing", "hangzhou"],
            Some("beijing,hangzhou"),
            LabelOutsideBinding,
            false,
            Mode::Enforce,
        ),
        case(
            "label outside, warn: admitted with a warning",
            "shop-warn",
            "beijing",
            &["hangzhou"],
            Some("hangzhou"),
            LabelOutsideBinding,
            true,
            Mode::Warn,
        ),
        case(
            "label outside, dryrun: admitted, nothing patched",
            "shop-dry",
            "beijing",
            &["hangzhou"],
            Some("hangzhou"),
            LabelOutsideBinding,
            true,
            Mode::Dryrun,
        ),
        case(
            "label outside a binding to a missing pool",
            "shop-gone",
            "beijing",
            &[],
            Some("gone"),
            LabelOutsideBinding,
            false,
            Mode::Enforce,
        ),
        case(
            "label inside a namespace label binding",
            "team",
            "hangzhou",
            &["hangzhou"],
            Some("hangzhou"),
            InPool,
            true,
            Mode::Enforce,
        ),
        case(
            "label outside a namespace label binding",
            "team",
            "beijing",
            &["hangzhou"],
            Some("hangzhou"),
            LabelOutsideBinding,
            false,
            Mode::Enforce,
        ),
        case(
            "unbound namespace: the label binds",
            "default",
            "beijing",
            &["beijing"],
            Some("beijing"),
            InPool,
            true,
            Mode::Enforce,
        ),
        case(
            "excluded namespace: nothing binds",
            "kube-system",
            "beijing",
            &[],
            None,
            Unbound,
            true,
            Mode::Enforce,
        ),
    ];
    let index = cluster();
    for c in cases {
        let what = c.what;
        let (mutation, validation) = admit(&index, c.namespace, &tenant_pod(c.label));
        assert!(mutation.allowed, "{what}: mutate never denies");
        assert_eq!(affinity_pools(&mutation), c.placed, "{what}");
        assert_eq!(
            mutation.is_patched(),
            !c.placed.is_empty() && c.mode != Mode::Dryrun,
            "{what}"
        );
        assert_eq!(mutation.pool.as_deref(), c.pool, "{what}: mutate's pool");
        assert_eq!(
            validation.pool.as_deref(),
            c.pool,
            "{what}: validate's pool"
        );
        assert_eq!(validation.reason, c.reason, "{what}");
        assert_eq!(validation.allowed, c.allowed, "{what}");
        assert_eq!(validation.mode, c.mode, "{what}");
        assert_eq!(
            validation.enforce_allows(),
            c.reason != LabelOutsideBinding,
            "{what}"
        );
    }
}

#[test]
fn the_refusal_names_the_label_and_the_binding_in_every_mode() {
    let index = cluster();
    let (_, enforce) = admit(&index, "shop-hangzhou", &tenant_pod("beijing"));
    assert_eq!(enforce.message.as_deref(), Some(REFUSED));

    let (_, warn) = admit(&index, "shop-warn", &tenant_pod("beijing"));
    let warned = REFUSED.replace("shop-hangzhou", "shop-warn");
    assert_eq!(warn.message, None);
    assert_eq!(
        warn.warnings,
        [format!(
            "poolkeeper would deny this pod (binding mode warn): {warned}"
        )]
    );
    assert_eq!(warn.withheld_denial.as_deref(), Some(warned.as_str()));

    let (_, dryrun) = admit(&index, "shop-dry", &tenant_pod("beijing"));
    assert!(dryrun.warnings.is_empty(), "{:?}", dryrun.warnings);
    assert_eq!(
        dryrun.withheld_denial.as_deref(),
        Some(REFUSED.replace("shop-hangzhou", "shop-dry").as_str())
    );

    let (_, by_labels) = admit(&index, "team", &tenant_pod("beijing"));
    assert_eq!(
        by_labels.message.as_deref(),
        Some(
            "pod's label apps.openyurt.io/nodepool=beijing names node pool \"beijing\", but namespace \"team\" is bound by its labels to node pool \"hangzhou\": a pod's pool label may only name pools of its namespace's binding"
        )
    );

    let (_, two_pools) = admit(&index, "shop-both", &tenant_pod("elsewhere"));
    assert!(
        two_pools
            .message
            .as_deref()
            .unwrap()
            .contains("names node pool \"elsewhere\", but namespace \"shop-both\" is bound to node pools \"beijing\", \"hangzhou\""),
        "{:?}",
        two_pools.message
    );
}

#[test]
fn the_mutation_records_the_binding_that_placed_the_pod() {
    let index = cluster();
    let record = |namespace: &str, label: &str| {
        let (mutation, _) = admit(&index, namespace, &tenant_pod(label));
        let mut pod = tenant_pod(label);
        json_patch::patch(&mut pod, &mutation.patch.unwrap().0).unwrap();
        super::mutate::annotation_of(&pod)
    };
    let narrowed = record("shop-both", "beijing");
    assert_eq!(
        (narrowed["pool"].as_str(), narrowed["binding"].as_str()),
        (Some("beijing"), Some("podLabel"))
    );
    let refused = record("shop-hangzhou", "beijing");
    assert_eq!(
        (refused["pool"].as_str(), refused["binding"].as_str()),
        (Some("hangzhou"), Some("namespace"))
    );
}

#[test]
fn the_audit_reports_a_label_outside_the_binding_wherever_the_pod_runs() {
    let index = cluster();
    let view = index.placement();
    let policy = tenants();
    let running = |namespace: &str, label: &str, node: &str| {
        let mut pod = tenant_pod(label);
        pod["metadata"]["namespace"] = json!(namespace);
        pod["spec"]["nodeName"] = json!(node);
        audit(&to_pod(&pod), &view, &policy)
    };
    for (namespace, node) in [("shop-hangzhou", "bj-1"), ("shop-hangzhou", "hz-1")] {
        let decision = running(namespace, "beijing", node);
        assert!(!decision.allowed, "{namespace} on {node}");
        assert_eq!(decision.reason, Reason::LabelOutsideBinding);
        assert_eq!(decision.pool.as_deref(), Some("hangzhou"));
        assert_eq!(decision.message.as_deref(), Some(REFUSED));
    }
    // The audit reports in every mode: the mode is carried, not applied.
    let dry = running("shop-dry", "beijing", "hz-1");
    assert!(!dry.allowed);
    assert_eq!(
        (dry.reason, dry.mode),
        (Reason::LabelOutsideBinding, Mode::Dryrun)
    );

    // Narrowed to beijing: a Node of hangzhou is outside its pool now.
    let narrowed = running("shop-both", "beijing", "hz-1");
    assert_eq!(narrowed.reason, Reason::OutsidePool);
    assert_eq!(
        narrowed.message.as_deref(),
        Some(
            "pod is bound to node pool \"beijing\" but runs on node \"hz-1\", which is in node pool \"hangzhou\""
        )
    );
    assert_eq!(
        running("shop-both", "beijing", "bj-1").reason,
        Reason::InPool
    );
    assert_eq!(running("default", "beijing", "bj-1").reason, Reason::InPool);
    assert_eq!(
        running("default", "beijing", "hz-1").reason,
        Reason::OutsidePool
    );
}

#[test]
fn workload_templates_follow_the_same_rule() {
    let index = cluster();
    let view = index.placement();
    let policy = tenants();
    let tolerant = json!({"tolerations": [{"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}]});
    // As the validating webhook sees it: after the mutating webhook (which
    // patches only a DaemonSet's template).
    let validated = |workload: &Workload, namespace: &str| {
        let admitted = match mutate_workload(workload, namespace, &view, &policy).patch {
            Some(patch) => workload.patched(&patch),
            None => workload.clone(),
        };
        validate_workload(&admitted, namespace, &view, &policy)
    };
    for kind in [
        WorkloadKind::Deployment,
        WorkloadKind::DaemonSet,
        WorkloadKind::CronJob,
    ] {
        let labelled = workload(kind, json!({POOL: "beijing"}), tolerant.clone());
        let decision = validated(&labelled, "shop-hangzhou");
        assert_eq!(decision.reason, Reason::LabelOutsideBinding, "{kind}");
        assert_eq!(
            decision.message,
            Some(format!("the pod template of {kind}: {REFUSED}")),
            "{kind}"
        );
        let warned = validated(&labelled, "shop-warn");
        assert!(warned.allowed, "{kind}");
        assert!(
            warned.warnings[0].starts_with(&format!(
                "poolkeeper would deny this pod (binding mode warn): the pod template of {kind}: pod's label"
            )),
            "{kind}: {:?}",
            warned.warnings
        );

        let decision = validated(&labelled, "shop-both");
        assert_eq!(
            decision.reason,
            Reason::InPool,
            "{kind}: {:?}",
            decision.message
        );
        assert_eq!(decision.pool.as_deref(), Some("beijing"), "{kind}");
    }
    // A DaemonSet's template is narrowed into the pool its label chose
    // inside the binding, and into the binding when the label leaves it.
    let daemon = |label: &str| {
        workload(
            WorkloadKind::DaemonSet,
            json!({POOL: label}),
            tolerant.clone(),
        )
    };
    let narrowed = mutate_workload(&daemon("beijing"), "shop-both", &view, &policy);
    assert_eq!(affinity_of_template(&narrowed), ["beijing"]);
    let placed = mutate_workload(&daemon("beijing"), "shop-hangzhou", &view, &policy);
    assert_eq!(affinity_of_template(&placed), ["hangzhou"]);
}

/// The pools of the required affinity a DaemonSet's patch adds.
fn affinity_of_template(decision: &Decision) -> Vec<String> {
    let patch = serde_json::to_value(decision.patch.as_ref().unwrap()).unwrap();
    let op = patch
        .as_array()
        .unwrap()
        .iter()
        .find(|op| op["path"] == "/spec/template/spec/affinity")
        .unwrap();
    op["value"]
        .pointer("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0/values")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn explain_shows_a_narrowed_binding_and_a_refused_label() {
    let index = cluster();
    let view = index.placement();
    let policy = tenants();
    let narrowed = explain(
        &labelled_pod(json!({POOL: "beijing"}), json!({})),
        "shop-both",
        &view,
        &policy,
    );
    let binding = narrowed.binding.as_ref().unwrap();
    assert_eq!(
        (binding.pool.as_str(), binding.source),
        ("beijing", BindingSource::PodLabel)
    );
    assert_eq!(binding.narrows.as_deref(), Some("beijing,hangzhou"));
    assert_eq!(binding.refused_label, None);
    assert_eq!(narrowed.mutate.reason, "patched");

    let refused = explain(
        &labelled_pod(json!({POOL: "beijing"}), json!({})),
        "shop-hangzhou",
        &view,
        &policy,
    );
    let binding = refused.binding.as_ref().unwrap();
    assert_eq!(
        (binding.pool.as_str(), binding.source),
        ("hangzhou", BindingSource::Namespace)
    );
    assert_eq!(
        binding.refused_label.as_deref(),
        Some("apps.openyurt.io/nodepool=beijing")
    );
    assert_eq!(binding.narrows, None);
    assert_eq!(refused.validate.reason, "label_outside_binding");
    assert_eq!(refused.validate.message.as_deref(), Some(REFUSED));
    assert_eq!(
        refused.outside_pool.as_ref().unwrap().constraint,
        "outside node pool \"hangzhou\""
    );

    let json = serde_json::to_value(&refused).unwrap();
    assert_eq!(
        json["binding"]["refusedLabel"],
        "apps.openyurt.io/nodepool=beijing"
    );
    assert!(json["binding"].get("narrows").is_none());
    let json = serde_json::to_value(&narrowed).unwrap();
    assert_eq!(json["binding"]["narrows"], "beijing,hangzhou");
}
