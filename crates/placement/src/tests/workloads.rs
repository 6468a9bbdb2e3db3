//! Workloads: every kind's template decided as the Pods it becomes, in every
//! mode; DaemonSet templates narrowed into their pool; narrowing of Pods.

use poolkeeper_config::Mode;
use serde_json::{Value, json};

use super::{POLICY, POOL, cluster, expr, pod, required};
use crate::{
    PlacementPolicy, Reason, Workload, WorkloadKind, mutate, mutate_workload, validate,
    validate_workload,
};

/// A workload of `kind` whose template has `labels` and `spec`.
pub(super) fn workload(kind: WorkloadKind, labels: Value, spec: Value) -> Workload {
    let mut template_spec = json!({"containers": [{"name": "c", "image": "registry.example/c:1"}]});
    template_spec
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    let template = json!({"metadata": {"labels": labels}, "spec": template_spec});
    let mut object = json!({
        "apiVersion": if kind.group().is_empty() { "v1".to_owned() } else { format!("{}/v1", kind.group()) },
        "kind": kind.kind(),
        "metadata": {"name": "w", "namespace": "shop-hangzhou"},
    });
    let mut slot = &mut object;
    for token in kind.template_path() {
        slot = &mut slot[*token];
    }
    *slot = template;
    Workload::from_value(kind, object).unwrap()
}

fn policy_with(extra: &str) -> PlacementPolicy {
    PlacementPolicy::parse(&POLICY.replace(
        "    nodePool: hangzhou\n",
        &format!("    nodePool: hangzhou\n{extra}"),
    ))
    .unwrap()
}

#[test]
fn kinds_are_read_from_the_request_and_the_manifest() {
    for kind in WorkloadKind::ALL {
        assert_eq!(
            WorkloadKind::from_type(kind.group(), "v1", kind.kind()),
            Some(kind)
        );
    }
    assert_eq!(
        WorkloadKind::from_api_version("apps/v1", "Deployment"),
        Some(WorkloadKind::Deployment)
    );
    assert_eq!(
        WorkloadKind::from_api_version("batch/v1", "CronJob"),
        Some(WorkloadKind::CronJob)
    );
    assert_eq!(
        WorkloadKind::from_api_version("v1", "ReplicationController"),
        Some(WorkloadKind::ReplicationController)
    );
    assert_eq!(WorkloadKind::from_api_version("v1", "Pod"), None);
    assert_eq!(
        WorkloadKind::from_api_version("apps/v1beta2", "Deployment"),
        None
    );
    assert_eq!(WorkloadKind::from_type("", "v1", "Deployment"), None);
}

/// Every kind, every mode: the template's verdict is the verdict for the Pod
/// it becomes (after the Pod mutation), with the message naming the kind.
#[test]
fn templates_are_judged_as_the_pods_they_become_in_every_mode() {
    let index = cluster();
    let view = index.placement();
    let cases = [
        // (what, template spec, enforce allows, reason)
        (
            "no constraints: pinned at creation",
            json!({}),
            true,
            Reason::InPool,
        ),
        (
            "selector inside the pool",
            json!({"nodeSelector": {"disk": "ssd", POOL: "hangzhou"},
            "tolerations": [{"operator": "Exists"}]}),
            true,
            Reason::InPool,
        ),
        (
            "selector reaching outside",
            json!({"nodeSelector": {"disk": "ssd"}}),
            false,
            Reason::OutsidePool,
        ),
        (
            "selector matching nothing",
            json!({"nodeSelector": {"disk": "tape"}}),
            false,
            Reason::NoMatchingNode,
        ),
        (
            "nodeName outside",
            json!({"nodeName": "bj-1"}),
            false,
            Reason::OutsidePool,
        ),
    ];
    // A DaemonSet's template is judged as written (see below).
    let kinds = WorkloadKind::ALL
        .into_iter()
        .filter(|k| *k != WorkloadKind::DaemonSet);
    for kind in kinds {
        for (what, spec, allowed, reason) in &cases {
            for mode in [Mode::Enforce, Mode::Warn, Mode::Dryrun] {
                let policy = policy_with(&format!("    mode: {mode}\n"));
                let w = workload(kind, json!({}), spec.clone());
                let decision = validate_workload(&w, "shop-hangzhou", &view, &policy);
                let case = format!("{kind} {what} in {mode}");
                let (allowed, reason) = (*allowed, *reason);
                assert_eq!(decision.reason, reason, "{case}");
                assert_eq!(decision.mode, mode, "{case}");
                assert_eq!(decision.enforce_allows(), allowed, "{case}");
                assert_eq!(decision.allowed, allowed || mode != Mode::Enforce, "{case}");
                let denial = decision
                    .message
                    .as_ref()
                    .or(decision.withheld_denial.as_ref());
                assert_eq!(denial.is_some(), !allowed, "{case}");
                if let Some(denial) = denial {
                    assert!(
                        denial.starts_with(&format!("the pod template of {kind}: ")),
                        "{case}: {denial}"
                    );
                }
                if !allowed && mode == Mode::Warn {
                    assert!(
                        decision.warnings[0].contains(&format!("the pod template of {kind}")),
                        "{case}"
                    );
                }
            }
        }
    }
}

/// The template's verdict and the Pod's agree, message aside.
#[test]
fn a_template_and_its_pod_get_the_same_verdict() {
    let index = cluster();
    let view = index.placement();
    let policy = super::policy();
    for spec in [
        json!({"nodeSelector": {"zone": "a"}}),
        json!({"nodeName": "hz-1", "tolerations": [{"operator": "Exists"}]}),
        required(json!([{"matchExpressions": [expr("zone", "In", &["b"])]}])),
    ] {
        let w = workload(WorkloadKind::Deployment, json!({}), spec.clone());
        let as_template = validate_workload(&w, "shop-hangzhou", &view, &policy);
        let p = pod(spec.clone());
        let mutated = mutate(&p, "shop-hangzhou", &view, &policy);
        let mut pod_json = super::pod_json(json!({}), spec.clone());
        if let Some(patch) = &mutated.patch {
            json_patch::patch(&mut pod_json, &patch.0).unwrap();
        }
        let as_pod = validate(&super::to_pod(&pod_json), "shop-hangzhou", &view, &policy);
        assert_eq!(as_template.reason, as_pod.reason, "{spec}");
        assert_eq!(as_template.allowed, as_pod.allowed, "{spec}");
    }
}

#[test]
fn a_template_label_binds_like_a_pod_label() {
    let index = cluster();
    let view = index.placement();
    let w = workload(
        WorkloadKind::Job,
        json!({POOL: "beijing"}),
        json!({"nodeSelector": {"zone": "a"}}),
    );
    let decision = validate_workload(&w, "default", &view, &super::policy());
    assert_eq!(decision.pool.as_deref(), Some("beijing"));
    assert_eq!(decision.reason, Reason::OutsidePool);
    let unbound = workload(
        WorkloadKind::Job,
        json!({}),
        json!({"nodeSelector": {"zone": "a"}}),
    );
    assert_eq!(
        validate_workload(&unbound, "default", &view, &super::policy()).reason,
        Reason::Unbound
    );
}

/// Applies a workload decision's patch to the workload object.
fn patched_template(kind: WorkloadKind, spec: Value, mode: Mode) -> (crate::Decision, Value) {
    let index = cluster();
    let view = index.placement();
    let policy = policy_with(&format!("    mode: {mode}\n"));
    let w = workload(kind, json!({"app": "agent"}), spec.clone());
    let decision = mutate_workload(&w, "shop-hangzhou", &view, &policy);
    let mut object = json!({"spec": {}});
    let mut slot = &mut object;
    for token in kind.template_path() {
        slot = &mut slot[*token];
    }
    *slot = json!({"metadata": {"labels": {"app": "agent"}}, "spec": spec});
    if let Some(patch) = &decision.patch {
        json_patch::patch(&mut object, &patch.0).unwrap();
    }
    let mut template = object;
    for token in kind.template_path() {
        template = template[*token].take();
    }
    (decision, template)
}

#[test]
fn daemonset_templates_are_narrowed_into_their_pool() {
    let pool_term = expr(POOL, "In", &["hangzhou"]);
    // Unconstrained: the pool requirement and the edge tolerations.
    let (decision, template) = patched_template(WorkloadKind::DaemonSet, json!({}), Mode::Enforce);
    assert_eq!(decision.reason, Reason::Patched);
    assert_eq!(
        template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"],
        json!([{"matchExpressions": [pool_term.clone()]}])
    );
    assert_eq!(template["spec"]["tolerations"].as_array().unwrap().len(), 2);
    let recorded: Value = serde_json::from_str(
        template["metadata"]["annotations"][crate::pod::PLACEMENT_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        recorded,
        json!({"pool": "hangzhou", "binding": "namespace", "mode": "enforce", "constraints": "narrow"})
    );

    // Its own terms are kept, each ANDed with the pool.
    let mut own = required(json!([
        {"matchExpressions": [expr("zone", "In", &["a"])]},
        {"matchExpressions": [expr("disk", "In", &["ssd"])]},
    ]));
    own["tolerations"] = json!([{"operator": "Exists"}]);
    let (_, template) = patched_template(WorkloadKind::DaemonSet, own, Mode::Warn);
    assert_eq!(
        template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"],
        json!([
            {"matchExpressions": [expr("zone", "In", &["a"]), pool_term.clone()]},
            {"matchExpressions": [expr("disk", "In", &["ssd"]), pool_term.clone()]},
        ])
    );

    // dryrun withholds, and the template as written would spread over every
    // node: that is what validation (and the audit) judge for a DaemonSet.
    let (decision, template) = patched_template(WorkloadKind::DaemonSet, json!({}), Mode::Dryrun);
    assert!(decision.patch.is_none() && decision.withheld_patch.is_some());
    assert!(template["spec"].get("affinity").is_none());
    let index = cluster();
    let view = index.placement();
    let as_written = workload(
        WorkloadKind::DaemonSet,
        json!({}),
        json!({"tolerations": [{"operator": "Exists"}]}),
    );
    let verdict = validate_workload(&as_written, "shop-hangzhou", &view, &super::policy());
    assert_eq!(verdict.reason, Reason::OutsidePool);
    assert!(
        verdict
            .message
            .unwrap()
            .starts_with("the pod template of DaemonSet: ")
    );
    let (_, narrowed) = patched_template(WorkloadKind::DaemonSet, json!({}), Mode::Enforce);
    let object = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "shop-hangzhou"},
        "spec": {"template": narrowed}});
    let narrowed = Workload::from_value(WorkloadKind::DaemonSet, object).unwrap();
    let verdict = validate_workload(&narrowed, "shop-hangzhou", &view, &super::policy());
    assert_eq!(verdict.reason, Reason::InPool);
    for kind in WorkloadKind::ALL
        .into_iter()
        .filter(|k| *k != WorkloadKind::DaemonSet)
    {
        let (decision, _) = patched_template(kind, json!({}), Mode::Enforce);
        assert_eq!(decision.reason, Reason::TemplateNotMutated, "{kind}");
        assert!(decision.patch.is_none(), "{kind}");
    }
}

/// A narrowing binding ANDs the pool into a Pod's own constraints; a judging
/// one leaves them; a nodeName is never rewritten.
#[test]
fn narrowing_pods() {
    let index = cluster();
    let view = index.placement();
    let narrow = policy_with("    constraints: narrow\n");
    let judge = super::policy();
    let tolerant = |mut spec: Value| {
        spec["tolerations"] = json!([{"operator": "Exists"}]);
        spec
    };
    let cases = [
        // (spec, narrowed terms, judged reason, narrowed reason)
        (
            json!({"nodeSelector": {"zone": "a"}}),
            Some(json!([{"matchExpressions": [expr(POOL, "In", &["hangzhou"])]}])),
            Reason::OutsidePool,
            Reason::InPool,
        ),
        (
            required(
                json!([{"matchExpressions": [expr("zone", "In", &["a"])]}, {"matchFields": [expr("metadata.name", "In", &["bj-1"])]}]),
            ),
            Some(
                json!([{"matchExpressions": [expr("zone", "In", &["a"]), expr(POOL, "In", &["hangzhou"])]}, {"matchFields": [expr("metadata.name", "In", &["bj-1"])], "matchExpressions": [expr(POOL, "In", &["hangzhou"])]}]),
            ),
            Reason::OutsidePool,
            Reason::InPool,
        ),
        (
            json!({"nodeName": "bj-1"}),
            None,
            Reason::OutsidePool,
            Reason::OutsidePool,
        ),
    ];
    for (spec, terms, judged, narrowed) in cases {
        let spec = tolerant(spec);
        let p = pod(spec.clone());
        assert!(
            mutate(&p, "shop-hangzhou", &view, &judge).patch.is_none(),
            "judge leaves {spec}"
        );
        assert_eq!(
            validate(&p, "shop-hangzhou", &view, &judge).reason,
            judged,
            "{spec}"
        );

        let decision = mutate(&p, "shop-hangzhou", &view, &narrow);
        let mut pod_json = super::pod_json(json!({}), spec.clone());
        if let Some(patch) = &decision.patch {
            json_patch::patch(&mut pod_json, &patch.0).unwrap();
        }
        let got = &pod_json["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        match &terms {
            Some(terms) => assert_eq!(got, terms, "{spec}"),
            None => assert!(
                decision.patch.is_none(),
                "nodeName is never rewritten: {spec}"
            ),
        }
        let again = mutate(&super::to_pod(&pod_json), "shop-hangzhou", &view, &narrow);
        assert!(
            again.patch.is_none(),
            "narrowing twice adds nothing: {pod_json}"
        );
        assert_eq!(
            validate(&super::to_pod(&pod_json), "shop-hangzhou", &view, &narrow).reason,
            narrowed,
            "{spec}"
        );
    }
}

#[test]
fn constraints_are_a_policy_field_with_a_default() {
    let policy = policy_with("    constraints: narrow\n");
    assert_eq!(
        policy.constraints_for_namespace("shop-hangzhou"),
        crate::Constraints::Narrow
    );
    assert_eq!(
        policy.constraints_for_namespace("shop-beijing"),
        crate::Constraints::Judge
    );
    let error =
        PlacementPolicy::parse("bindings: [{namespace: a, nodePool: p, constraints: shrink}]")
            .unwrap_err();
    assert!(
        error.to_string().contains("shrink") && error.to_string().contains("line 1"),
        "{error}"
    );
}
