//! One round over a fake Pod source.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use poolkeeper_bus::Event;
use poolkeeper_index::IndexResource;
use serde_json::json;

use super::{
    FAKE_VERSION, FakePods, POOL, Start, assert_failed_listing, cluster, counts, k8s_node, labels,
    namespace_query, on, pod, policy, policy_config_map, settings,
};
use poolkeeper_placement::{Workload, WorkloadKind};

use crate::lister::RUNNING_OR_PENDING;
use crate::lister::{PageStart, PodQuery};
use crate::{AuditError, ReportKey, audit_round};

fn pods() -> Vec<poolkeeper_placement::PodPlacement> {
    vec![
        // shop-hangzhou (enforce): two inside, two outside, one pending reaching out.
        pod("shop-hangzhou", "in-1", json!({}), on("hz-1")),
        pod("shop-hangzhou", "in-2", json!({}), on("hz-2")),
        pod("shop-hangzhou", "out-bj", json!({}), on("bj-1")),
        pod("shop-hangzhou", "out-free", json!({}), on("free-1")),
        pod(
            "shop-hangzhou",
            "pending-out",
            json!({}),
            json!({"nodeSelector": {"x": "y"}}),
        ),
        pod("shop-hangzhou", "on-unknown", json!({}), on("gone")),
        // On a Node of its namespace's pool, but labelled with a pool
        // outside its namespace's binding: the label is the violation.
        pod(
            "shop-hangzhou",
            "labelled-away",
            labels(&[(POOL, "beijing")]),
            on("hz-1"),
        ),
        // shop-beijing (dryrun): one outside, one labelled with hangzhou,
        // outside its binding.
        pod("shop-beijing", "out-hz", json!({}), on("hz-1")),
        pod(
            "shop-beijing",
            "relabelled",
            labels(&[(POOL, "hangzhou")]),
            on("hz-2"),
        ),
        // Unbound namespaces: only labelled Pods count.
        pod("default", "plain", json!({}), on("bj-1")),
        pod(
            "default",
            "labelled-out",
            labels(&[(POOL, "beijing")]),
            on("hz-1"),
        ),
        pod(
            "default",
            "labelled-in",
            labels(&[(POOL, "beijing")]),
            on("bj-1"),
        ),
        pod("default", "empty-label", labels(&[(POOL, "")]), on("hz-1")),
    ]
}

#[tokio::test]
async fn judges_bound_namespaces_and_labelled_pods_once_each() {
    let settings = settings();
    let index = cluster();
    let lister = FakePods::new(pods());
    let round = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();

    // Unlabelled in bound namespaces but not on their pools' Nodes: 4 + 1;
    // labelled anywhere: 5. in-1, in-2 (hangzhou) and plain (unbound) are
    // never read.
    assert_eq!(round.pods, 10);
    let expected = [
        (("default", "beijing", "outside_pool"), 1),
        (("shop-beijing", "beijing", "label_outside_binding"), 1),
        (("shop-beijing", "beijing", "outside_pool"), 1),
        (("shop-hangzhou", "hangzhou", "label_outside_binding"), 1),
        (("shop-hangzhou", "hangzhou", "no_matching_node"), 1),
        (("shop-hangzhou", "hangzhou", "outside_pool"), 2),
    ];
    let expected: std::collections::BTreeMap<_, _> = expected
        .into_iter()
        .map(|((ns, pool, reason), n)| ((ns.to_owned(), pool.to_owned(), reason), n))
        .collect();
    assert_eq!(counts(&round), expected);
    assert_eq!(round.violations(), 7);
    assert!(!round.truncated);

    let found: Vec<(&str, &str, Option<&str>)> = round
        .findings
        .iter()
        .map(|f| (f.namespace.as_str(), f.pod.as_str(), f.node.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            ("shop-beijing", "out-hz", Some("hz-1")),
            ("shop-hangzhou", "out-bj", Some("bj-1")),
            ("shop-hangzhou", "out-free", Some("free-1")),
            ("shop-hangzhou", "pending-out", None),
            ("shop-hangzhou", "labelled-away", Some("hz-1")),
            ("shop-beijing", "relabelled", Some("hz-2")),
            ("default", "labelled-out", Some("hz-1")),
        ],
        "bound namespaces in order, then the labelled Pods"
    );
    let out_bj = &round.findings[1];
    assert_eq!(out_bj.uid, "uid-out-bj");
    assert_eq!(
        out_bj.message,
        "pod is bound to node pool \"hangzhou\" but runs on node \"bj-1\", which is in node pool \"beijing\""
    );
    assert_eq!(round.findings[0].mode, poolkeeper_placement::Mode::Dryrun);
    assert_eq!(out_bj.mode, poolkeeper_placement::Mode::Enforce);
    // As the validating webhook refuses it, wherever the Pod runs.
    let away = &round.findings[4];
    assert_eq!(
        (away.reason, away.pool.as_str()),
        ("label_outside_binding", "hangzhou")
    );
    assert!(
        away.message.starts_with(
            "pod's label apps.openyurt.io/nodepool=beijing names node pool \"beijing\", but namespace \"shop-hangzhou\" is bound to node pool \"hangzhou\""
        ),
        "{}",
        away.message
    );
}

#[tokio::test]
async fn reads_every_page_with_the_configured_size() {
    let mut settings = settings();
    // One LIST at a time: the calls in the order of the LISTs.
    settings.concurrency = 1;
    let index = cluster();
    let lister = FakePods::new(pods());
    audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    let calls = lister.calls.lock().clone();
    let hangzhou = namespace_query("shop-hangzhou", &["hz-1", "hz-2"]);
    let beijing = namespace_query("shop-beijing", &["bj-1"]);
    let labelled = PodQuery::Labelled {
        pool_label: POOL.to_owned(),
    };
    // The first LIST reads the latest Pods, every later one from the
    // resourceVersion of that first answer; later pages from their token.
    let from_first = || Start::NotOlderThan(FAKE_VERSION.to_owned());
    let page = |token: &str| Start::Continue(token.to_owned());
    let expected = vec![
        (beijing, 2, Start::Latest),
        (hangzhou.clone(), 2, from_first()),
        (hangzhou, 2, page("2")),
        (labelled.clone(), 2, from_first()),
        (labelled.clone(), 2, page("2")),
        (labelled, 2, page("4")),
    ];
    assert_eq!(calls, expected);
}

#[test]
fn list_parameters() {
    let namespace = namespace_query("a", &[]).list_params(500, PageStart::Latest);
    assert_eq!(namespace.limit, Some(500));
    assert_eq!(
        namespace.field_selector.as_deref(),
        Some(RUNNING_OR_PENDING)
    );
    assert_eq!(
        namespace.label_selector.as_deref(),
        Some("!apps.openyurt.io/nodepool")
    );
    assert_eq!(namespace.continue_token, None);
    assert_eq!(namespace.resource_version, None);
    let leaving_out = namespace_query("a", &["hz-1", "hz-2"]).list_params(500, PageStart::Latest);
    assert_eq!(
        leaving_out.field_selector.as_deref(),
        Some(
            "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!=hz-1,spec.nodeName!=hz-2"
        )
    );
    let labelled = PodQuery::Labelled {
        pool_label: POOL.to_owned(),
    }
    .list_params(10, PageStart::Continue("abc"));
    assert_eq!(labelled.label_selector.as_deref(), Some(POOL));
    assert_eq!(labelled.continue_token.as_deref(), Some("abc"));
    assert_eq!(labelled.resource_version, None);
    let recent = namespace_query("a", &[]).list_params(500, PageStart::NotOlderThan("7"));
    assert_eq!(recent.resource_version.as_deref(), Some("7"));
    assert_eq!(
        recent.version_match,
        Some(kube::api::VersionMatch::NotOlderThan)
    );
    assert_eq!(recent.continue_token, None);
    assert_eq!(labelled.limit, Some(10));
}

#[tokio::test]
async fn only_the_first_violations_are_detailed_but_all_are_counted() {
    let mut settings = settings();
    settings.max_reported = 2;
    let index = cluster();
    let lister = FakePods::new(pods());
    let round = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    assert_eq!(round.findings.len(), 2);
    assert!(round.truncated);
    assert_eq!(round.violations(), 7);
    let event = round.to_event();
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["type"], "AuditCompleted");
    assert_eq!(json["violations"].as_array().unwrap().len(), 2);
    assert_eq!(json["truncated"], true);
}

#[tokio::test]
async fn with_reports_every_violation_is_kept_by_namespace_however_few_are_detailed() {
    let mut settings = settings();
    settings.max_reported = 2;
    let index = cluster();
    let lister = FakePods::new(pods());
    let without = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    assert!(without.results.is_empty());

    settings.reports = true;
    let round = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    assert_eq!(round.findings.len(), 2);
    assert_eq!(round.results.len(), round.violations());
    let namespaces: Vec<&str> = round.results.iter().map(|v| v.namespace.as_str()).collect();
    assert!(namespaces.is_sorted(), "{namespaces:?}");
    let Event::AuditCompleted { results, .. } = round.to_event() else {
        unreachable!()
    };
    assert_eq!(*results, *round.results);
}

#[tokio::test]
async fn tells_which_reports_still_violate() {
    let settings = settings();
    let index = cluster();
    let lister = FakePods::new(pods());
    let previous: HashSet<ReportKey> = [
        ReportKey::new("uid-out-bj", "shop-hangzhou", "out-bj", "outside_pool"),
        ReportKey::new("uid-gone", "shop-hangzhou", "gone", "outside_pool"),
        ReportKey::new("uid-in-1", "shop-hangzhou", "in-1", "outside_pool"),
    ]
    .into_iter()
    .collect();
    let round = audit_round(&lister, &index, &policy(), &settings, &previous)
        .await
        .unwrap();
    let still: HashSet<ReportKey> = [ReportKey::new(
        "uid-out-bj",
        "shop-hangzhou",
        "out-bj",
        "outside_pool",
    )]
    .into_iter()
    .collect();
    assert_eq!(round.still_reported, still);
}

#[tokio::test]
async fn a_relabelled_node_changes_the_verdict_of_the_next_round() {
    let settings = settings();
    let index = cluster();
    let lister = FakePods::new(vec![pod("shop-hangzhou", "web", json!({}), on("hz-2"))]);
    let before = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    assert_eq!(before.violations(), 0);
    index.apply(k8s_node("hz-2", Some("beijing")));
    let after = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    assert_eq!(after.violations(), 1);
    assert_eq!(after.findings[0].node.as_deref(), Some("hz-2"));
}

#[tokio::test]
async fn failures_fail_the_round() {
    let settings = settings();
    let index = cluster();
    let lister = FakePods::new(pods());
    lister.failing.store(true, Ordering::SeqCst);
    let error = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap_err();
    assert_failed_listing(&error, "shop-beijing");

    lister.failing.store(false, Ordering::SeqCst);
    index.apply(policy_config_map("bindings: [{namespace: a}]"));
    let error = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap_err();
    assert!(matches!(error, AuditError::Policy(_)), "{error}");
}

#[tokio::test]
async fn without_bindings_only_labelled_pods_are_listed() {
    let settings = settings();
    let index = cluster();
    index.apply(policy_config_map(""));
    let lister = FakePods::new(pods());
    let round = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    assert_eq!(round.pods, 5, "the five labelled Pods");
    assert_eq!(
        round.violations(),
        2,
        "default/labelled-out, shop-hangzhou/labelled-away (no binding: the labels bind)"
    );
    assert!(
        lister
            .calls
            .lock()
            .iter()
            .all(|(query, _, _)| matches!(query, PodQuery::Labelled { .. }))
    );
}

fn workload(
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    labels: serde_json::Value,
    spec: serde_json::Value,
) -> Workload {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "i"}]);
    let template = json!({"metadata": {"labels": labels}, "spec": spec});
    let object = match kind {
        WorkloadKind::CronJob => {
            json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
            "spec": {"jobTemplate": {"spec": {"template": template}}}})
        }
        _ => {
            json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
            "spec": {"template": template}})
        }
    };
    Workload::from_value(kind, object).unwrap()
}

/// Workloads of bound namespaces (and with the pool label on their
/// template) whose template would be denied are violations, in every mode,
/// reported on the workload itself.
#[tokio::test]
async fn workloads_whose_template_would_be_denied_are_reported() {
    let settings = settings();
    let index = cluster();
    let lister = FakePods::new(Vec::new()).with_workloads(vec![
        workload(
            WorkloadKind::Deployment,
            "shop-hangzhou",
            "web",
            json!({}),
            json!({"tolerations": [{"operator": "Exists"}]}),
        ),
        workload(
            WorkloadKind::Deployment,
            "shop-hangzhou",
            "stray",
            json!({}),
            json!({"nodeName": "bj-1"}),
        ),
        workload(
            WorkloadKind::CronJob,
            "shop-beijing",
            "nightly",
            json!({}),
            json!({"nodeSelector": {"zone": "nowhere"}}),
        ),
        // A DaemonSet created before the binding: its template was never narrowed.
        workload(
            WorkloadKind::DaemonSet,
            "shop-hangzhou",
            "agent",
            json!({}),
            json!({"tolerations": [{"operator": "Exists"}]}),
        ),
        workload(
            WorkloadKind::Job,
            "default",
            "unbound",
            json!({}),
            json!({"nodeName": "hz-1"}),
        ),
        workload(
            WorkloadKind::Job,
            "default",
            "labelled",
            labels(&[(POOL, "beijing")]),
            json!({"nodeName": "hz-1"}),
        ),
    ]);
    let round = audit_round(&lister, &index, &policy(), &settings, &HashSet::new())
        .await
        .unwrap();
    assert_eq!(round.pods, 0);
    assert_eq!(
        round.workloads, 5,
        "the unbound, unlabelled Job is not judged"
    );
    let found: Vec<(&str, &str, &str, &str)> = round
        .findings
        .iter()
        .map(|f| (f.namespace.as_str(), f.pod.as_str(), f.reason, f.kind))
        .collect();
    assert_eq!(
        found,
        [
            (
                "shop-hangzhou",
                "Deployment/stray",
                "outside_pool",
                "Deployment"
            ),
            (
                "shop-hangzhou",
                "DaemonSet/agent",
                "outside_pool",
                "DaemonSet"
            ),
            ("default", "Job/labelled", "outside_pool", "Job"),
            (
                "shop-beijing",
                "CronJob/nightly",
                "no_matching_node",
                "CronJob"
            ),
        ]
    );
    let stray = &round.findings[0];
    assert_eq!(
        (stray.name.as_str(), stray.uid.as_str(), stray.api_version),
        ("stray", "uid-stray", "apps/v1")
    );
    assert!(
        stray
            .message
            .starts_with("the pod template of Deployment: "),
        "{}",
        stray.message
    );
    // shop-beijing is a dryrun binding: what enforce would deny still counts.
    assert_eq!(round.findings[3].mode, poolkeeper_placement::Mode::Dryrun);
    assert_eq!(stray.kind, "Deployment");
}

/// A namespace's LIST leaves out the Nodes of every pool of its binding, in
/// name order, as many as the selector's budget holds.
#[test]
fn namespace_lists_leave_out_their_pools_nodes_within_the_budget() {
    use crate::round::{LEAVE_OUT_BYTES, queries};
    use poolkeeper_placement::PlacementPolicy;

    let index = cluster();
    // 300 Nodes of 40-character names in pool "wide": more than the budget holds.
    let wide: Vec<String> = (0..300).map(|i| format!("wide-{i:0>35}")).collect();
    for name in wide.iter().rev() {
        index.apply(k8s_node(name, Some("wide")));
    }
    index.apply(policy_config_map(
        "bindings:
  - {namespace: a, nodePool: wide}
  - {namespace: b, nodePools: [hangzhou, beijing]}
  - {namespace: c, nodePool: gone}
",
    ));
    let view = index.placement();
    let loaded = policy().get(&view);
    let policy: &PlacementPolicy = loaded.as_ref().as_ref().unwrap();
    let found = queries(policy, &view);
    let leave_out = |namespace: &str| match found
        .iter()
        .find(|query| matches!(query, PodQuery::Namespace { namespace: n, .. } if n == namespace))
    {
        Some(PodQuery::Namespace { leave_out, .. }) => leave_out.clone(),
        other => panic!("{other:?}"),
    };
    let a = leave_out("a");
    let fits = LEAVE_OUT_BYTES / (",spec.nodeName!=".len() + 40);
    assert_eq!(a, wide[..fits].to_vec(), "the first Nodes by name that fit");
    let selector = namespace_query("a", &a.iter().map(String::as_str).collect::<Vec<_>>())
        .list_params(500, PageStart::Latest)
        .field_selector
        .unwrap();
    assert!(selector.len() <= RUNNING_OR_PENDING.len() + LEAVE_OUT_BYTES);
    assert_eq!(leave_out("b"), ["bj-1", "hz-1", "hz-2"]);
    assert_eq!(leave_out("c"), Vec::<String>::new(), "a pool with no Nodes");
    assert_eq!(
        found.last(),
        Some(&PodQuery::Labelled {
            pool_label: POOL.to_owned()
        })
    );
}
